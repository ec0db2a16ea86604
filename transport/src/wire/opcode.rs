//! The BTH opcode table: which transport, which operation, which extension
//! headers follow the BTH and where the packet sits in its message.
//!
//! Values are those of the IBA opcode space (bits 7:5 transport, 4:0
//! operation), as listed in the kernel's `ib_pack.h`. Header order follows
//! the IBA (DETH, XRCETH, RETH/AtomicETH/FETH, AETH, AtomicAckETH,
//! ImmDt/IETH). XRC (101) mirrors RC's operations at +0xA0; its requests
//! carry an XRCETH (the target XRC SRQ), its responses do not.

use std::fmt;

/// Transport service encoded in opcode bits 7:5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Service {
    /// Reliable connected (000).
    Rc,
    /// Unreliable connected (001).
    Uc,
    /// Reliable datagram (010): not implemented by rxe or mlx5 verbs.
    Rd,
    /// Unreliable datagram (011).
    Ud,
    /// Congestion notification packet (0x81).
    Cnp,
    /// Extended reliable connected (101).
    Xrc,
    /// Manufacturer specific (110, 111).
    Other,
}

/// Flags describing an opcode. Combine with `|`.
pub mod flags {
    /// RETH follows the BTH.
    pub const RETH: u32 = 1 << 0;
    /// AETH follows.
    pub const AETH: u32 = 1 << 1;
    /// AtomicETH follows.
    pub const ATOMIC_ETH: u32 = 1 << 2;
    /// AtomicAckETH follows.
    pub const ATOMIC_ACK_ETH: u32 = 1 << 3;
    /// Immediate data follows.
    pub const IMM: u32 = 1 << 4;
    /// IETH (rkey to invalidate) follows.
    pub const IETH: u32 = 1 << 5;
    /// DETH follows.
    pub const DETH: u32 = 1 << 6;
    /// FETH follows (before the RETH).
    pub const FETH: u32 = 1 << 7;
    /// The packet may carry payload.
    pub const PAYLOAD: u32 = 1 << 8;
    /// First packet of a multi-packet message.
    pub const FIRST: u32 = 1 << 9;
    /// Middle packet.
    pub const MIDDLE: u32 = 1 << 10;
    /// Last packet of a multi-packet message.
    pub const LAST: u32 = 1 << 11;
    /// The whole message in one packet.
    pub const ONLY: u32 = 1 << 12;
    /// Request (sent by a requester).
    pub const REQUEST: u32 = 1 << 13;
    /// Response (sent by a responder: ACK, atomic ACK, READ response).
    pub const RESPONSE: u32 = 1 << 14;
    /// SEND family.
    pub const SEND: u32 = 1 << 15;
    /// RDMA WRITE family.
    pub const WRITE: u32 = 1 << 16;
    /// RDMA READ request.
    pub const READ: u32 = 1 << 17;
    /// RDMA READ response.
    pub const READ_RESPONSE: u32 = 1 << 18;
    /// Atomic (CmpSwap or FetchAdd).
    pub const ATOMIC: u32 = 1 << 19;
    /// Plain ACK/NAK.
    pub const ACK: u32 = 1 << 20;
    /// FLUSH.
    pub const FLUSH: u32 = 1 << 21;
    /// ATOMIC WRITE.
    pub const ATOMIC_WRITE: u32 = 1 << 22;
    /// CNP.
    pub const CNP: u32 = 1 << 23;
    /// XRCETH follows (after DETH, before RETH/AtomicETH/ImmDt/IETH).
    pub const XRCETH: u32 = 1 << 24;
}

/// Static facts about one opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Name as Wireshark and rxe print it, e.g. `RC_SEND_ONLY`.
    pub name: &'static str,
    /// Bitwise or of [`flags`].
    pub flags: u32,
}

impl OpcodeInfo {
    /// True when every bit of `f` is set.
    #[inline]
    pub const fn has(&self, f: u32) -> bool {
        self.flags & f == f
    }

    /// Bytes of extension headers between the BTH and the payload.
    pub const fn ext_len(&self) -> usize {
        let f = self.flags;
        let mut n = 0;
        if f & flags::DETH != 0 {
            n += 8;
        }
        if f & flags::XRCETH != 0 {
            n += 4;
        }
        if f & flags::FETH != 0 {
            n += 4;
        }
        if f & flags::RETH != 0 {
            n += 16;
        }
        if f & flags::ATOMIC_ETH != 0 {
            n += 28;
        }
        if f & flags::AETH != 0 {
            n += 4;
        }
        if f & flags::ATOMIC_ACK_ETH != 0 {
            n += 8;
        }
        if f & flags::IMM != 0 {
            n += 4;
        }
        if f & flags::IETH != 0 {
            n += 4;
        }
        n
    }
}

/// A BTH opcode byte. Unknown values are representable; [`Opcode::info`]
/// returns `None` for them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

use flags::*;

const SEND_F: u32 = REQUEST | SEND | PAYLOAD;
const WRITE_F: u32 = REQUEST | WRITE | PAYLOAD;
const XSEND_F: u32 = SEND_F | XRCETH;
const XWRITE_F: u32 = WRITE_F | XRCETH;

macro_rules! opcodes {
    ($( $konst:ident = $val:expr, $name:expr, $flags:expr; )*) => {
        impl Opcode {
            $( #[doc = $name] pub const $konst: Opcode = Opcode($val); )*
        }
        /// Every opcode this implementation knows, in table order.
        pub const ALL_OPCODES: &[Opcode] = &[ $( Opcode($val), )* ];
        const fn lookup(v: u8) -> Option<OpcodeInfo> {
            match v {
                $( $val => Some(OpcodeInfo { name: $name, flags: $flags }), )*
                _ => None,
            }
        }
    };
}

opcodes! {
    RC_SEND_FIRST = 0x00, "RC_SEND_FIRST", SEND_F | FIRST;
    RC_SEND_MIDDLE = 0x01, "RC_SEND_MIDDLE", SEND_F | MIDDLE;
    RC_SEND_LAST = 0x02, "RC_SEND_LAST", SEND_F | LAST;
    RC_SEND_LAST_IMM = 0x03, "RC_SEND_LAST_WITH_IMMEDIATE", SEND_F | LAST | IMM;
    RC_SEND_ONLY = 0x04, "RC_SEND_ONLY", SEND_F | ONLY;
    RC_SEND_ONLY_IMM = 0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", SEND_F | ONLY | IMM;
    RC_WRITE_FIRST = 0x06, "RC_RDMA_WRITE_FIRST", WRITE_F | FIRST | RETH;
    RC_WRITE_MIDDLE = 0x07, "RC_RDMA_WRITE_MIDDLE", WRITE_F | MIDDLE;
    RC_WRITE_LAST = 0x08, "RC_RDMA_WRITE_LAST", WRITE_F | LAST;
    RC_WRITE_LAST_IMM = 0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", WRITE_F | LAST | IMM;
    RC_WRITE_ONLY = 0x0a, "RC_RDMA_WRITE_ONLY", WRITE_F | ONLY | RETH;
    RC_WRITE_ONLY_IMM = 0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", WRITE_F | ONLY | RETH | IMM;
    RC_READ_REQUEST = 0x0c, "RC_RDMA_READ_REQUEST", REQUEST | READ | ONLY | RETH;
    RC_READ_RESPONSE_FIRST = 0x0d, "RC_RDMA_READ_RESPONSE_FIRST", RESPONSE | READ_RESPONSE | PAYLOAD | FIRST | AETH;
    RC_READ_RESPONSE_MIDDLE = 0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", RESPONSE | READ_RESPONSE | PAYLOAD | MIDDLE;
    RC_READ_RESPONSE_LAST = 0x0f, "RC_RDMA_READ_RESPONSE_LAST", RESPONSE | READ_RESPONSE | PAYLOAD | LAST | AETH;
    RC_READ_RESPONSE_ONLY = 0x10, "RC_RDMA_READ_RESPONSE_ONLY", RESPONSE | READ_RESPONSE | PAYLOAD | ONLY | AETH;
    RC_ACK = 0x11, "RC_ACKNOWLEDGE", RESPONSE | ACK | ONLY | AETH;
    RC_ATOMIC_ACK = 0x12, "RC_ATOMIC_ACKNOWLEDGE", RESPONSE | ACK | ONLY | AETH | ATOMIC_ACK_ETH;
    RC_CMP_SWAP = 0x13, "RC_COMPARE_SWAP", REQUEST | ATOMIC | ONLY | ATOMIC_ETH;
    RC_FETCH_ADD = 0x14, "RC_FETCH_ADD", REQUEST | ATOMIC | ONLY | ATOMIC_ETH;
    RC_SEND_LAST_INV = 0x16, "RC_SEND_LAST_WITH_INVALIDATE", SEND_F | LAST | IETH;
    RC_SEND_ONLY_INV = 0x17, "RC_SEND_ONLY_WITH_INVALIDATE", SEND_F | ONLY | IETH;
    RC_FLUSH = 0x1c, "RC_FLUSH", REQUEST | FLUSH | ONLY | FETH | RETH;
    RC_ATOMIC_WRITE = 0x1d, "RC_ATOMIC_WRITE", REQUEST | ATOMIC_WRITE | ONLY | RETH | PAYLOAD;
    UC_SEND_FIRST = 0x20, "UC_SEND_FIRST", SEND_F | FIRST;
    UC_SEND_MIDDLE = 0x21, "UC_SEND_MIDDLE", SEND_F | MIDDLE;
    UC_SEND_LAST = 0x22, "UC_SEND_LAST", SEND_F | LAST;
    UC_SEND_LAST_IMM = 0x23, "UC_SEND_LAST_WITH_IMMEDIATE", SEND_F | LAST | IMM;
    UC_SEND_ONLY = 0x24, "UC_SEND_ONLY", SEND_F | ONLY;
    UC_SEND_ONLY_IMM = 0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", SEND_F | ONLY | IMM;
    UC_WRITE_FIRST = 0x26, "UC_RDMA_WRITE_FIRST", WRITE_F | FIRST | RETH;
    UC_WRITE_MIDDLE = 0x27, "UC_RDMA_WRITE_MIDDLE", WRITE_F | MIDDLE;
    UC_WRITE_LAST = 0x28, "UC_RDMA_WRITE_LAST", WRITE_F | LAST;
    UC_WRITE_LAST_IMM = 0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", WRITE_F | LAST | IMM;
    UC_WRITE_ONLY = 0x2a, "UC_RDMA_WRITE_ONLY", WRITE_F | ONLY | RETH;
    UC_WRITE_ONLY_IMM = 0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", WRITE_F | ONLY | RETH | IMM;
    UD_SEND_ONLY = 0x64, "UD_SEND_ONLY", SEND_F | ONLY | DETH;
    UD_SEND_ONLY_IMM = 0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", SEND_F | ONLY | DETH | IMM;
    XRC_SEND_FIRST = 0xa0, "XRC_SEND_FIRST", XSEND_F | FIRST;
    XRC_SEND_MIDDLE = 0xa1, "XRC_SEND_MIDDLE", XSEND_F | MIDDLE;
    XRC_SEND_LAST = 0xa2, "XRC_SEND_LAST", XSEND_F | LAST;
    XRC_SEND_LAST_IMM = 0xa3, "XRC_SEND_LAST_WITH_IMMEDIATE", XSEND_F | LAST | IMM;
    XRC_SEND_ONLY = 0xa4, "XRC_SEND_ONLY", XSEND_F | ONLY;
    XRC_SEND_ONLY_IMM = 0xa5, "XRC_SEND_ONLY_WITH_IMMEDIATE", XSEND_F | ONLY | IMM;
    XRC_WRITE_FIRST = 0xa6, "XRC_RDMA_WRITE_FIRST", XWRITE_F | FIRST | RETH;
    XRC_WRITE_MIDDLE = 0xa7, "XRC_RDMA_WRITE_MIDDLE", XWRITE_F | MIDDLE;
    XRC_WRITE_LAST = 0xa8, "XRC_RDMA_WRITE_LAST", XWRITE_F | LAST;
    XRC_WRITE_LAST_IMM = 0xa9, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", XWRITE_F | LAST | IMM;
    XRC_WRITE_ONLY = 0xaa, "XRC_RDMA_WRITE_ONLY", XWRITE_F | ONLY | RETH;
    XRC_WRITE_ONLY_IMM = 0xab, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", XWRITE_F | ONLY | RETH | IMM;
    XRC_READ_REQUEST = 0xac, "XRC_RDMA_READ_REQUEST", REQUEST | READ | ONLY | XRCETH | RETH;
    XRC_READ_RESPONSE_FIRST = 0xad, "XRC_RDMA_READ_RESPONSE_FIRST", RESPONSE | READ_RESPONSE | PAYLOAD | FIRST | AETH;
    XRC_READ_RESPONSE_MIDDLE = 0xae, "XRC_RDMA_READ_RESPONSE_MIDDLE", RESPONSE | READ_RESPONSE | PAYLOAD | MIDDLE;
    XRC_READ_RESPONSE_LAST = 0xaf, "XRC_RDMA_READ_RESPONSE_LAST", RESPONSE | READ_RESPONSE | PAYLOAD | LAST | AETH;
    XRC_READ_RESPONSE_ONLY = 0xb0, "XRC_RDMA_READ_RESPONSE_ONLY", RESPONSE | READ_RESPONSE | PAYLOAD | ONLY | AETH;
    XRC_ACK = 0xb1, "XRC_ACKNOWLEDGE", RESPONSE | ACK | ONLY | AETH;
    XRC_ATOMIC_ACK = 0xb2, "XRC_ATOMIC_ACKNOWLEDGE", RESPONSE | ACK | ONLY | AETH | ATOMIC_ACK_ETH;
    XRC_CMP_SWAP = 0xb3, "XRC_COMPARE_SWAP", REQUEST | ATOMIC | ONLY | XRCETH | ATOMIC_ETH;
    XRC_FETCH_ADD = 0xb4, "XRC_FETCH_ADD", REQUEST | ATOMIC | ONLY | XRCETH | ATOMIC_ETH;
    XRC_SEND_LAST_INV = 0xb6, "XRC_SEND_LAST_WITH_INVALIDATE", XSEND_F | LAST | IETH;
    XRC_SEND_ONLY_INV = 0xb7, "XRC_SEND_ONLY_WITH_INVALIDATE", XSEND_F | ONLY | IETH;
    CNP = 0x81, "CNP", CNP;
}

impl Opcode {
    /// Facts about this opcode, or `None` if it is not one we know.
    #[inline]
    pub const fn info(self) -> Option<OpcodeInfo> {
        lookup(self.0)
    }

    /// Transport service from bits 7:5 (0x81 is the CNP).
    pub const fn service(self) -> Service {
        if self.0 == 0x81 {
            return Service::Cnp;
        }
        match self.0 >> 5 {
            0 => Service::Rc,
            1 => Service::Uc,
            2 => Service::Rd,
            3 => Service::Ud,
            5 => Service::Xrc,
            _ => Service::Other,
        }
    }

    /// Name for printing; `UNKNOWN` for opcodes not in the table.
    pub const fn name(self) -> &'static str {
        match lookup(self.0) {
            Some(i) => i.name,
            None => "UNKNOWN",
        }
    }

    /// Operation bits 4:0.
    #[inline]
    pub const fn operation(self) -> u8 {
        self.0 & 0x1f
    }

    /// The same operation on `service` (RC, UC or XRC: they share the
    /// operation numbers; XRC adds an XRCETH to requests). Others are
    /// returned unchanged.
    #[inline]
    pub const fn on_service(self, service: Service) -> Opcode {
        let base = match service {
            Service::Rc => 0x00,
            Service::Uc => 0x20,
            Service::Xrc => 0xa0,
            _ => return self,
        };
        Opcode(base | (self.0 & 0x1f))
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(0x{:02x})", self.name(), self.0)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for &op in ALL_OPCODES {
            let i = op.info().unwrap();
            let pos = [FIRST, MIDDLE, LAST, ONLY]
                .iter()
                .filter(|&&f| i.has(f))
                .count();
            assert!(pos == 1 || op == Opcode::CNP, "{op:?} position flags");
            assert!(
                i.has(REQUEST) ^ i.has(RESPONSE) || op == Opcode::CNP,
                "{op:?} direction"
            );
            // UC opcodes mirror RC ones at +0x20 with the same headers.
            if op.service() == Service::Uc {
                let rc = Opcode(op.0 - 0x20).info().unwrap();
                assert_eq!(rc.flags, i.flags, "{op:?} mirrors RC");
            }
            // XRC opcodes mirror RC ones at +0xA0; requests add XRCETH.
            if op.service() == Service::Xrc {
                let rc = op.on_service(Service::Rc).info().unwrap();
                let want = if i.has(REQUEST) {
                    rc.flags | XRCETH
                } else {
                    rc.flags
                };
                assert_eq!(i.flags, want, "{op:?} mirrors RC");
                assert_eq!(op.on_service(Service::Rc).on_service(Service::Xrc), op);
            }
        }
    }

    #[test]
    fn ext_lengths() {
        assert_eq!(Opcode::RC_WRITE_ONLY_IMM.info().unwrap().ext_len(), 20);
        assert_eq!(Opcode::RC_CMP_SWAP.info().unwrap().ext_len(), 28);
        assert_eq!(Opcode::RC_ATOMIC_ACK.info().unwrap().ext_len(), 12);
        assert_eq!(Opcode::UD_SEND_ONLY_IMM.info().unwrap().ext_len(), 12);
        assert_eq!(Opcode::RC_FLUSH.info().unwrap().ext_len(), 20);
        assert_eq!(Opcode::RC_READ_RESPONSE_MIDDLE.info().unwrap().ext_len(), 0);
        assert!(Opcode(0x15).info().is_none());
        assert_eq!(Opcode(0x15).name(), "UNKNOWN");
        assert_eq!(Opcode::CNP.service(), Service::Cnp);
        assert_eq!(Opcode::XRC_SEND_ONLY.info().unwrap().ext_len(), 4);
        assert_eq!(Opcode::XRC_WRITE_ONLY_IMM.info().unwrap().ext_len(), 24);
        assert_eq!(Opcode::XRC_CMP_SWAP.info().unwrap().ext_len(), 32);
        assert_eq!(Opcode::XRC_ACK.info().unwrap().ext_len(), 4);
        assert_eq!(Opcode::XRC_SEND_ONLY.service(), Service::Xrc);
        assert_eq!(Opcode(0xb5).name(), "UNKNOWN");
    }
}
