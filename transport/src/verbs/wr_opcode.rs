//! The work-request opcode table: for each `enum ibv_wr_opcode` value, its
//! name, what it completes as, which QP types take it, and what it needs.
//!
//! The second table beside the packet one ([`crate::wire::opcode`]), as
//! the kernel's rxe keeps `rxe_wr_opcode_info[]` beside `rxe_opcode[]`.
//! Everything that decides about a WR opcode asks here: the client at post
//! time, the daemon decoding a ring slot, the transport's send queue.
//!
//! Two sets of QP types per opcode: `iba`, where the verbs define the
//! operation at all, and `rxu`, where rxu executes it (a subset; empty for
//! the offload and driver-private opcodes). rxe's table
//! also lists SEND_WITH_INV for UC and UD, which have no packet opcode for
//! it (`table_is_consistent` checks both tables agree); here it is RC only.

use std::fmt;

use super::types::{QpType, WcOpcode};

/// A set of QP types.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpTypes(u8);

impl QpTypes {
    pub const NONE: QpTypes = QpTypes(0);
    pub const RC: QpTypes = QpTypes(1);
    pub const UC: QpTypes = QpTypes(1 << 1);
    pub const UD: QpTypes = QpTypes(1 << 2);

    const fn bit(t: QpType) -> u8 {
        match t {
            QpType::Rc => Self::RC.0,
            QpType::Uc => Self::UC.0,
            QpType::Ud => Self::UD.0,
        }
    }

    /// Whether `t` is in the set.
    #[inline]
    pub const fn contains(self, t: QpType) -> bool {
        self.0 & Self::bit(t) != 0
    }

    /// Whether every type of `other` is in the set.
    pub const fn includes(self, other: QpTypes) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: QpTypes) -> QpTypes {
        QpTypes(self.0 | other.0)
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for QpTypes {
    type Output = QpTypes;
    fn bitor(self, rhs: QpTypes) -> QpTypes {
        self.union(rhs)
    }
}

impl fmt::Debug for QpTypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_set();
        for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
            if self.contains(t) {
                l.entry(&t);
            }
        }
        l.finish()
    }
}

/// The operation family of a work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WrKind {
    /// SEND, with immediate data or invalidation.
    Send,
    /// RDMA WRITE, with or without immediate data.
    Write,
    Read,
    /// Compare-and-swap and fetch-and-add.
    Atomic,
    AtomicWrite,
    Flush,
    /// Operations on local memory keys (LOCAL_INV, BIND_MW).
    LocalOp,
    /// Segmentation offload and provider-private opcodes.
    Other,
}

impl WrKind {
    /// Answered by a response carrying data or a result rather than a
    /// plain ACK; occupies an initiator-depth slot while outstanding.
    pub const fn is_rd_atomic(self) -> bool {
        matches!(
            self,
            WrKind::Read | WrKind::Atomic | WrKind::AtomicWrite | WrKind::Flush
        )
    }
}

/// Flags describing a WR opcode. Combine with `|`.
pub mod wr_flags {
    /// May be posted with IBV_SEND_INLINE (its data is sent, not fetched).
    pub const INLINE: u32 = 1 << 0;
    /// Addresses remote memory: `remote_addr` and `rkey` are used.
    pub const REMOTE: u32 = 1 << 1;
    /// Carries immediate data (`imm_data`, a big-endian word in C).
    pub const IMM: u32 = 1 << 2;
    /// Carries an rkey for the responder to invalidate (in `imm_data`).
    pub const INV: u32 = 1 << 3;
}

/// Static facts about one WR opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrOpcodeInfo {
    /// The libibverbs name, e.g. `IBV_WR_SEND_WITH_IMM`.
    pub name: &'static str,
    pub kind: WrKind,
    /// What its completion says (None: provider-defined).
    pub wc_opcode: Option<WcOpcode>,
    /// QP types the verbs define it on.
    pub iba: QpTypes,
    /// QP types rxu executes it on; posting it elsewhere is EINVAL.
    pub rxu: QpTypes,
    /// Bitwise or of [`wr_flags`].
    pub flags: u32,
}

impl WrOpcodeInfo {
    /// True when every bit of `f` is set.
    #[inline]
    pub const fn has(&self, f: u32) -> bool {
        self.flags & f == f
    }

    /// May be sent inline.
    #[inline]
    pub const fn inline_ok(&self) -> bool {
        self.has(wr_flags::INLINE)
    }

    /// Needs a remote address and an rkey.
    #[inline]
    pub const fn needs_rkey(&self) -> bool {
        self.has(wr_flags::REMOTE)
    }

    /// Whether rxu executes it on a QP of type `t`.
    #[inline]
    pub const fn allowed_on(&self, t: QpType) -> bool {
        self.rxu.contains(t)
    }
}

/// A work-request opcode (`enum ibv_wr_opcode`). Unknown values are
/// representable; [`WrOpcode::info`] returns `None` for them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct WrOpcode(pub u32);

use wr_flags::{IMM, INLINE, INV, REMOTE};
use WrKind::*;

const NONE: QpTypes = QpTypes::NONE;
const RC: QpTypes = QpTypes::RC;
const RC_UC: QpTypes = QpTypes(QpTypes::RC.0 | QpTypes::UC.0);
const ALL: QpTypes = QpTypes(QpTypes::RC.0 | QpTypes::UC.0 | QpTypes::UD.0);
const UD: QpTypes = QpTypes::UD;

macro_rules! wr_opcodes {
    ($( $konst:ident = $val:expr, $name:expr, $kind:expr, $wc:expr, $iba:expr, $rxu:expr, $flags:expr; )*) => {
        impl WrOpcode {
            $( #[doc = $name] pub const $konst: WrOpcode = WrOpcode($val); )*
        }
        /// Every WR opcode of `enum ibv_wr_opcode`, in table order.
        pub const ALL_WR_OPCODES: &[WrOpcode] = &[ $( WrOpcode($val), )* ];
        const fn lookup(v: u32) -> Option<WrOpcodeInfo> {
            match v {
                $( $val => Some(WrOpcodeInfo {
                    name: $name, kind: $kind, wc_opcode: $wc, iba: $iba, rxu: $rxu, flags: $flags,
                }), )*
                _ => None,
            }
        }
    };
}

use WcOpcode as Wc;

wr_opcodes! {
    RDMA_WRITE = 0, "IBV_WR_RDMA_WRITE", Write, Some(Wc::RdmaWrite), RC_UC, RC_UC, INLINE | REMOTE;
    RDMA_WRITE_WITH_IMM = 1, "IBV_WR_RDMA_WRITE_WITH_IMM", Write, Some(Wc::RdmaWrite), RC_UC, RC_UC, INLINE | REMOTE | IMM;
    SEND = 2, "IBV_WR_SEND", Send, Some(Wc::Send), ALL, ALL, INLINE;
    SEND_WITH_IMM = 3, "IBV_WR_SEND_WITH_IMM", Send, Some(Wc::Send), ALL, ALL, INLINE | IMM;
    RDMA_READ = 4, "IBV_WR_RDMA_READ", Read, Some(Wc::RdmaRead), RC, RC, REMOTE;
    ATOMIC_CMP_AND_SWP = 5, "IBV_WR_ATOMIC_CMP_AND_SWP", Atomic, Some(Wc::CompSwap), RC, RC, REMOTE;
    ATOMIC_FETCH_AND_ADD = 6, "IBV_WR_ATOMIC_FETCH_AND_ADD", Atomic, Some(Wc::FetchAdd), RC, RC, REMOTE;
    LOCAL_INV = 7, "IBV_WR_LOCAL_INV", LocalOp, Some(Wc::LocalInv), RC_UC, RC_UC, 0;
    BIND_MW = 8, "IBV_WR_BIND_MW", LocalOp, Some(Wc::BindMw), RC_UC, RC_UC, 0;
    SEND_WITH_INV = 9, "IBV_WR_SEND_WITH_INV", Send, Some(Wc::Send), RC, RC, INLINE | INV;
    TSO = 10, "IBV_WR_TSO", Other, Some(Wc::Tso), UD, NONE, 0;
    DRIVER1 = 11, "IBV_WR_DRIVER1", Other, None, NONE, NONE, 0;
    FLUSH = 14, "IBV_WR_FLUSH", Flush, Some(Wc::Flush), RC, RC, REMOTE;
    ATOMIC_WRITE = 15, "IBV_WR_ATOMIC_WRITE", AtomicWrite, Some(Wc::AtomicWrite), RC, RC, INLINE | REMOTE;
}

impl WrOpcode {
    /// Facts about this opcode, or `None` if libibverbs does not define it.
    #[inline]
    pub const fn info(self) -> Option<WrOpcodeInfo> {
        lookup(self.0)
    }

    /// Whether rxu executes this opcode on a QP of type `t` (false for
    /// unknown values).
    #[inline]
    pub const fn allowed_on(self, t: QpType) -> bool {
        match lookup(self.0) {
            Some(i) => i.allowed_on(t),
            None => false,
        }
    }

    /// The completion opcode of a WR with this opcode. Error completions
    /// need one even for opcodes that have none (unknown or provider
    /// defined): those complete as a SEND.
    #[inline]
    pub const fn wc_opcode(self) -> WcOpcode {
        match lookup(self.0) {
            Some(WrOpcodeInfo {
                wc_opcode: Some(w), ..
            }) => w,
            _ => WcOpcode::Send,
        }
    }

    /// Name for printing; `UNKNOWN` for values not in the table.
    pub const fn name(self) -> &'static str {
        match lookup(self.0) {
            Some(i) => i.name,
            None => "UNKNOWN",
        }
    }
}

impl fmt::Debug for WrOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl fmt::Display for WrOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::opcode::{flags as pf, Service, ALL_OPCODES};

    const TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];

    fn service(t: QpType) -> Service {
        match t {
            QpType::Rc => Service::Rc,
            QpType::Uc => Service::Uc,
            QpType::Ud => Service::Ud,
        }
    }

    /// Packet-table flags a request packet of this WR carries.
    fn packet_flags(i: &WrOpcodeInfo) -> u32 {
        let family = match i.kind {
            Send => pf::SEND,
            Write => pf::WRITE,
            Read => pf::READ,
            Atomic => pf::ATOMIC,
            AtomicWrite => pf::ATOMIC_WRITE,
            Flush => pf::FLUSH,
            LocalOp | Other => 0,
        };
        let mut f = pf::REQUEST | family;
        if i.has(IMM) {
            f |= pf::IMM;
        }
        if i.has(INV) {
            f |= pf::IETH;
        }
        f
    }

    #[test]
    fn table_is_consistent() {
        let mut seen = std::collections::BTreeSet::new();
        for &op in ALL_WR_OPCODES {
            let i = op.info().unwrap();
            assert!(seen.insert(op.0), "{op:?} listed twice");
            assert!(i.name.starts_with("IBV_WR_"), "{op:?} name");
            // rxu executes an opcode only where the verbs define it.
            assert!(i.iba.includes(i.rxu), "{op:?} rxu beyond the verbs");
            // The completion opcode follows the kind.
            let wc = match i.kind {
                Send => Some(WcOpcode::Send),
                Write => Some(WcOpcode::RdmaWrite),
                Read => Some(WcOpcode::RdmaRead),
                AtomicWrite => Some(WcOpcode::AtomicWrite),
                Flush => Some(WcOpcode::Flush),
                Atomic | LocalOp | Other => i.wc_opcode,
            };
            assert_eq!(i.wc_opcode, wc, "{op:?} completion opcode");
            // Remote operations name remote memory; the others do not.
            let remote = matches!(i.kind, Write | Read | Atomic | AtomicWrite | Flush);
            assert_eq!(i.needs_rkey(), remote, "{op:?} rkey");
            // Only what carries local data to the peer can be inline.
            if i.inline_ok() {
                assert!(
                    matches!(i.kind, Send | Write | AtomicWrite),
                    "{op:?} inline"
                );
            }
            assert!(!(i.has(IMM) && i.has(INV)), "{op:?} imm and inv");
            // rxu executes an operation on exactly the QP types where the
            // verbs define it and the packet table has request opcodes for
            // it (UC has no SEND_INV packets); local ones (no packet)
            // wherever the verbs define them, offload ones nowhere.
            for t in TYPES {
                let want = packet_flags(&i);
                let has_packet = ALL_OPCODES.iter().any(|p| {
                    let pi = p.info().unwrap();
                    p.service() == service(t)
                        && pi.has(want)
                        && pi.has(pf::IMM) == i.has(IMM)
                        && pi.has(pf::IETH) == i.has(INV)
                });
                let executes = match i.kind {
                    LocalOp => true,
                    Other => false,
                    _ => has_packet,
                };
                assert_eq!(
                    i.allowed_on(t),
                    executes && i.iba.contains(t),
                    "{op:?} on {t:?}"
                );
            }
        }
        assert_eq!(ALL_WR_OPCODES.len(), 14);
    }

    #[test]
    fn numbered_as_libibverbs() {
        // enum ibv_wr_opcode in rdma-core's verbs.h.
        let want = [
            (0, "IBV_WR_RDMA_WRITE"),
            (1, "IBV_WR_RDMA_WRITE_WITH_IMM"),
            (2, "IBV_WR_SEND"),
            (3, "IBV_WR_SEND_WITH_IMM"),
            (4, "IBV_WR_RDMA_READ"),
            (5, "IBV_WR_ATOMIC_CMP_AND_SWP"),
            (6, "IBV_WR_ATOMIC_FETCH_AND_ADD"),
            (7, "IBV_WR_LOCAL_INV"),
            (8, "IBV_WR_BIND_MW"),
            (9, "IBV_WR_SEND_WITH_INV"),
            (10, "IBV_WR_TSO"),
            (11, "IBV_WR_DRIVER1"),
            (14, "IBV_WR_FLUSH"),
            (15, "IBV_WR_ATOMIC_WRITE"),
        ];
        for (v, name) in want {
            assert_eq!(WrOpcode(v).name(), name);
        }
        for v in [12, 13, 16, 100, u32::MAX] {
            assert!(WrOpcode(v).info().is_none());
            assert_eq!(WrOpcode(v).name(), "UNKNOWN");
            assert_eq!(WrOpcode(v).wc_opcode(), WcOpcode::Send);
            assert!(TYPES.iter().all(|&t| !WrOpcode(v).allowed_on(t)));
        }
    }

    /// What each QP type accepts, spelled out: the table's rxu column.
    #[test]
    fn allowed_per_qp_type() {
        let allowed = |t| {
            ALL_WR_OPCODES
                .iter()
                .filter(|o| o.allowed_on(t))
                .map(|o| o.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(allowed(QpType::Rc), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 15]);
        assert_eq!(allowed(QpType::Uc), [0, 1, 2, 3, 7, 8]);
        assert_eq!(allowed(QpType::Ud), [2, 3]);
        assert!(!WrOpcode::SEND_WITH_INV.allowed_on(QpType::Uc));
    }

    #[test]
    fn rd_atomic_kinds() {
        assert!(!Send.is_rd_atomic() && !Write.is_rd_atomic());
        assert!(Read.is_rd_atomic() && Atomic.is_rd_atomic());
        assert!(AtomicWrite.is_rd_atomic() && Flush.is_rd_atomic());
    }
}
