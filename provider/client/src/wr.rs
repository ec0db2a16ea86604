//! Work requests and their encoding into ring slots (layout in
//! [`rxu_abi::proto::abi`]).
//!
//! Encoding writes straight into the reserved slot, header first, then the
//! SGEs or inline bytes, with no allocation. Checks made here are the ones
//! `ibv_post_send` makes synchronously (EINVAL); everything about memory
//! and keys is the daemon's, reported in completions.

use super::ah::Ah;
use super::error::{Error, Result};
use rxu_abi::proto::abi::{RecvSlot, SendSlot, RECV_HDR, SEND_HDR, SGE_SIZE};
use rxu_abi::proto::QpType;
use transport::qp::{send_flags, MwBind};
use transport::verbs::{WrKind, WrOpcode};

pub use transport::verbs::Sge;

/// Where a UD send goes.
#[derive(Clone, Copy, Debug)]
pub struct UdDest<'a> {
    pub ah: &'a Ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// A send work request, as `struct ibv_send_wr` (one, not a list).
#[derive(Clone, Copy, Debug, Default)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    /// An `ibv_wr_opcode`.
    pub opcode: WrOpcode,
    /// `ibv_send_flags` bits ([`send_flags`]).
    pub send_flags: u32,
    pub sg_list: &'a [Sge],
    /// The bytes of an inline send, copied at post time. Setting it implies
    /// IBV_SEND_INLINE. With IBV_SEND_INLINE and no `inline_data`, the bytes
    /// are gathered from `sg_list` — only the unsafe post path can do that.
    pub inline_data: Option<&'a [u8]>,
    /// Immediate data as the wire word (the big-endian value of the four
    /// bytes on the wire; C's `__be32 imm_data` is `u32::from_be` of this),
    /// or the rkey to invalidate for SEND_WITH_INV.
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    /// CmpSwap: compare value; FetchAdd: the addend; FLUSH: the length.
    pub compare_add: u64,
    pub swap: u64,
    /// Required on UD QPs, ignored on others.
    pub ud: Option<UdDest<'a>>,
    /// FLUSH: placement type | selectivity level << 8.
    pub flush: u32,
    /// BIND_MW: what to bind (`imm_data`, `rkey` and the rest unused).
    pub bind: Option<MwBind>,
}

impl<'a> SendWr<'a> {
    fn op(wr_id: u64, opcode: WrOpcode, sg_list: &'a [Sge]) -> Self {
        SendWr {
            wr_id,
            opcode,
            sg_list,
            ..Default::default()
        }
    }

    pub fn send(wr_id: u64, sg_list: &'a [Sge]) -> Self {
        Self::op(wr_id, WrOpcode::SEND, sg_list)
    }

    pub fn send_imm(wr_id: u64, sg_list: &'a [Sge], imm: u32) -> Self {
        SendWr {
            imm_data: imm,
            ..Self::op(wr_id, WrOpcode::SEND_WITH_IMM, sg_list)
        }
    }

    pub fn write(wr_id: u64, sg_list: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
        SendWr {
            remote_addr,
            rkey,
            ..Self::op(wr_id, WrOpcode::RDMA_WRITE, sg_list)
        }
    }

    pub fn write_imm(
        wr_id: u64,
        sg_list: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Self {
        SendWr {
            remote_addr,
            rkey,
            imm_data: imm,
            ..Self::op(wr_id, WrOpcode::RDMA_WRITE_WITH_IMM, sg_list)
        }
    }

    pub fn read(wr_id: u64, sg_list: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
        SendWr {
            remote_addr,
            rkey,
            ..Self::op(wr_id, WrOpcode::RDMA_READ, sg_list)
        }
    }

    /// 8-byte compare-and-swap; the old value lands in `sg_list`.
    pub fn cmp_swap(
        wr_id: u64,
        sg_list: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Self {
        SendWr {
            remote_addr,
            rkey,
            compare_add: compare,
            swap,
            ..Self::op(wr_id, WrOpcode::ATOMIC_CMP_AND_SWP, sg_list)
        }
    }

    /// 8-byte fetch-and-add; the old value lands in `sg_list`.
    pub fn fetch_add(
        wr_id: u64,
        sg_list: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        add: u64,
    ) -> Self {
        SendWr {
            remote_addr,
            rkey,
            compare_add: add,
            ..Self::op(wr_id, WrOpcode::ATOMIC_FETCH_AND_ADD, sg_list)
        }
    }

    /// LOCAL_INV of `rkey`.
    pub fn local_inv(wr_id: u64, rkey: u32) -> Self {
        SendWr {
            imm_data: rkey,
            ..Self::op(wr_id, WrOpcode::LOCAL_INV, &[])
        }
    }

    /// SEND with invalidate of the peer's `rkey`.
    pub fn send_inv(wr_id: u64, sg_list: &'a [Sge], rkey: u32) -> Self {
        SendWr {
            imm_data: rkey,
            ..Self::op(wr_id, WrOpcode::SEND_WITH_INV, sg_list)
        }
    }

    /// BIND_MW (type 2 windows; type 1 is bound the same way underneath).
    pub fn bind_mw(wr_id: u64, bind: MwBind) -> Self {
        SendWr {
            bind: Some(bind),
            ..Self::op(wr_id, WrOpcode::BIND_MW, &[])
        }
    }

    /// Adds IBV_SEND_SIGNALED.
    pub fn signaled(mut self) -> Self {
        self.send_flags |= send_flags::SIGNALED;
        self
    }

    /// Adds IBV_SEND_SOLICITED.
    pub fn solicited(mut self) -> Self {
        self.send_flags |= send_flags::SOLICITED;
        self
    }

    /// Adds IBV_SEND_FENCE.
    pub fn fence(mut self) -> Self {
        self.send_flags |= send_flags::FENCE;
        self
    }

    /// Sends `data` inline (copied at post time; no lkey needed).
    pub fn inline(mut self, data: &'a [u8]) -> Self {
        self.send_flags |= send_flags::INLINE;
        self.inline_data = Some(data);
        self
    }

    /// The UD destination.
    pub fn ud(mut self, ah: &'a Ah, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.ud = Some(UdDest {
            ah,
            remote_qpn,
            remote_qkey,
        });
        self
    }
}

/// A receive work request, as `struct ibv_recv_wr` (one, not a list).
#[derive(Clone, Copy, Debug, Default)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sg_list: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    pub fn new(wr_id: u64, sg_list: &'a [Sge]) -> Self {
        RecvWr { wr_id, sg_list }
    }
}

/// What a send queue accepts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SqLimits {
    pub qp_type: QpType,
    pub max_sge: u32,
    pub max_inline: u32,
}

/// Sum of the SGE lengths, or None if it overflows u32.
pub(crate) fn sg_len(sges: &[Sge]) -> Option<u32> {
    sges.iter().try_fold(0u32, |a, s| a.checked_add(s.length))
}

/// Whether the WR asks for an inline send.
pub(crate) fn is_inline(wr: &SendWr<'_>) -> bool {
    wr.inline_data.is_some() || wr.send_flags & send_flags::INLINE != 0
}

/// The synchronous checks of `ibv_post_send`. `inline_len` is the length of
/// the inline payload when the WR is inline.
pub(crate) fn check_send(wr: &SendWr<'_>, lim: &SqLimits, inline_len: Option<usize>) -> Result<()> {
    let info = match wr.opcode.info() {
        Some(i) if i.allowed_on(lim.qp_type) => i,
        _ => return Err(Error::Invalid("opcode not supported on this QP type")),
    };
    if lim.qp_type == QpType::Ud && wr.ud.is_none() {
        return Err(Error::Invalid("UD send without an address handle"));
    }
    let len = match inline_len {
        Some(n) => {
            if !info.inline_ok() {
                return Err(Error::Invalid("opcode cannot be sent inline"));
            }
            if n > lim.max_inline as usize {
                return Err(Error::Invalid("inline data above max_inline_data"));
            }
            n as u64
        }
        None => {
            if wr.sg_list.len() > lim.max_sge as usize {
                return Err(Error::Invalid("more SGEs than max_send_sge"));
            }
            u64::from(sg_len(wr.sg_list).ok_or(Error::Invalid("message length overflows"))?)
        }
    };
    match info.kind {
        WrKind::Atomic => {
            if len != 8 {
                return Err(Error::Invalid("atomic operations move exactly 8 bytes"));
            }
            if !wr.remote_addr.is_multiple_of(8) {
                return Err(Error::Invalid("atomic remote address not 8-byte aligned"));
            }
        }
        WrKind::AtomicWrite if len != 8 => {
            return Err(Error::Invalid("ATOMIC_WRITE moves exactly 8 bytes"));
        }
        WrKind::LocalOp if len != 0 || !wr.sg_list.is_empty() => {
            return Err(Error::Invalid("local operations carry no data"));
        }
        _ => {}
    }
    if wr.opcode == WrOpcode::BIND_MW && wr.bind.is_none() {
        return Err(Error::Invalid("BIND_MW without a binding"));
    }
    Ok(())
}

/// The send slot header, written with the slot view's setters.
/// `inline_len` is the inline payload length (None for an SGE-based WR,
/// whose `num_sge` is then its SGE count).
pub(crate) fn send_header(wr: &SendWr<'_>, inline_len: Option<usize>) -> [u8; SEND_HDR] {
    let mut h = SendSlot::new_unchecked([0u8; SEND_HDR]);
    h.set_wr_id(wr.wr_id);
    h.set_opcode(wr.opcode);
    match inline_len {
        Some(n) => {
            // The daemon takes the slot as inline by this flag alone.
            h.set_send_flags(wr.send_flags | send_flags::INLINE);
            h.set_inline_len(n as u16);
        }
        None => {
            h.set_send_flags(wr.send_flags);
            h.set_num_sge(wr.sg_list.len() as u16);
        }
    }
    h.set_imm_data(wr.imm_data);
    h.set_remote_addr(wr.remote_addr);
    h.set_rkey(wr.rkey);
    h.set_compare_add(wr.compare_add);
    h.set_swap(wr.swap);
    h.set_flush(wr.flush);
    if let Some(b) = &wr.bind {
        // abi: the window's key in rkey, the new one in imm_data, the
        // length in compare_add.
        h.set_rkey(b.mw_rkey);
        h.set_imm_data(b.new_rkey);
        h.set_remote_addr(b.addr);
        h.set_compare_add(b.len);
        h.set_bind_lkey(b.mr_lkey);
        h.set_bind_access(b.access);
    }
    if let Some(ud) = &wr.ud {
        let av = ud.ah.attr();
        h.set_ud_qpn(ud.remote_qpn);
        h.set_ud_qkey(ud.remote_qkey);
        h.set_ud_gid(&av.dgid);
        h.set_ud_flow_label(av.flow_label);
    }
    h.into_inner()
}

/// The receive slot header.
pub(crate) fn recv_header(wr: &RecvWr<'_>) -> [u8; RECV_HDR] {
    let mut h = RecvSlot::new_unchecked([0u8; RECV_HDR]);
    h.set_wr_id(wr.wr_id);
    h.set_num_sge(wr.sg_list.len() as u32);
    h.into_inner()
}

/// Bytes a send WR takes in its slot.
pub(crate) fn send_slot_bytes(wr: &SendWr<'_>, inline_len: Option<usize>) -> usize {
    SEND_HDR + inline_len.unwrap_or(wr.sg_list.len() * SGE_SIZE)
}

/// Copies the bytes the SGEs point at into `out` (cleared first).
///
/// # Safety
/// Every SGE must describe `length` readable bytes at `addr` in this
/// process — the promise a C caller makes for IBV_SEND_INLINE.
pub(crate) unsafe fn gather(sges: &[Sge], out: &mut Vec<u8>) {
    out.clear();
    for s in sges {
        if s.length == 0 {
            continue;
        }
        // SAFETY: the caller promises `length` readable bytes at `addr`.
        let src =
            unsafe { std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize) };
        out.extend_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxu_abi::proto::abi::{self, emit_sge};
    use rxu_abi::proto::AhAttr;

    const RC: SqLimits = SqLimits {
        qp_type: QpType::Rc,
        max_sge: 4,
        max_inline: 64,
    };

    /// The whole slot as the send queue writes it.
    fn encode(wr: &SendWr<'_>, inline: Option<&[u8]>) -> Vec<u8> {
        let il = inline.map(|d| d.len());
        let mut b = vec![0u8; send_slot_bytes(wr, il)];
        b[..SEND_HDR].copy_from_slice(&send_header(wr, il));
        match inline {
            Some(d) => b[SEND_HDR..].copy_from_slice(d),
            None => {
                for (i, s) in wr.sg_list.iter().enumerate() {
                    let o = SEND_HDR + i * SGE_SIZE;
                    b[o..o + SGE_SIZE].copy_from_slice(&emit_sge(s));
                }
            }
        }
        b
    }

    #[test]
    fn send_encoding_matches_the_abi() {
        let sges = [
            Sge {
                addr: 0x1000,
                length: 100,
                lkey: 7,
            },
            Sge {
                addr: 0x2000,
                length: 4,
                lkey: 8,
            },
        ];
        let wr = SendWr::cmp_swap(42, &sges[..1], 0x8000, 99, 5, 6).signaled();
        let b = encode(&wr, None);
        let got = SendSlot::new_checked(&b[..]).unwrap();
        assert_eq!(got.wr_id(), 42);
        assert_eq!(got.opcode(), WrOpcode::ATOMIC_CMP_AND_SWP);
        assert_eq!(got.send_flags(), send_flags::SIGNALED);
        assert_eq!((got.remote_addr(), got.rkey()), (0x8000, 99));
        assert_eq!((got.compare_add(), got.swap()), (5, 6));
        assert_eq!((got.imm_data(), got.inline_len(), got.ud_qpn()), (0, 0, 0));
        assert_eq!(got.sges().collect::<Vec<_>>(), &sges[..1]);
        let wr = SendWr::write_imm(1, &sges, 0x10, 3, 0xdead_beef);
        let b = encode(&wr, None);
        let got = SendSlot::new_checked(&b[..]).unwrap();
        assert_eq!(got.imm_data(), 0xdead_beef);
        assert_eq!(got.sges().collect::<Vec<_>>(), sges);
    }

    #[test]
    fn inline_and_ud_encoding() {
        let ah = Ah::for_tests(AhAttr {
            dgid: [9; 16],
            flow_label: 0x12345,
            is_global: true,
            ..Default::default()
        });
        let data = b"hello, inline";
        let wr = SendWr::send_imm(3, &[], 0x0102_0304)
            .inline(data)
            .ud(&ah, 0x11, 0x2222);
        let b = encode(&wr, Some(data));
        let got = SendSlot::new_checked(&b[..]).unwrap();
        assert_eq!(got.inline_data(), data);
        assert_eq!(got.num_sge(), 0);
        assert_eq!(got.send_flags(), send_flags::INLINE);
        assert_eq!((got.ud_qpn(), got.ud_qkey()), (0x11, 0x2222));
        assert_eq!(got.ud_gid(), [9; 16]);
        assert_eq!(got.ud_flow_label(), 0x12345);
        assert_eq!(got.imm_data(), 0x0102_0304);
    }

    #[test]
    fn bind_and_local_inv_encoding() {
        let b = MwBind {
            mw_rkey: 0x1234_5600,
            new_rkey: 0x1234_5601,
            mr_lkey: 0xabcd,
            addr: 0x7000,
            len: 4096,
            access: 6,
        };
        let wr = SendWr::bind_mw(8, b).signaled();
        assert!(check_send(&wr, &RC, None).is_ok());
        let bytes = encode(&wr, None);
        let got = SendSlot::new_checked(&bytes[..]).unwrap();
        assert_eq!(got.opcode(), WrOpcode::BIND_MW);
        assert_eq!((got.rkey(), got.imm_data()), (0x1234_5600, 0x1234_5601));
        assert_eq!((got.remote_addr(), got.compare_add()), (0x7000, 4096));
        assert_eq!((got.bind_lkey(), got.bind_access()), (0xabcd, 6));
        assert_eq!(got.num_sge(), 0);
        let inv = SendWr::local_inv(9, 0x55);
        assert!(check_send(&inv, &RC, None).is_ok());
        let got = encode(&inv, None);
        let got = SendSlot::new_checked(&got[..]).unwrap();
        assert_eq!((got.opcode(), got.imm_data()), (WrOpcode::LOCAL_INV, 0x55));
        let ud = SqLimits {
            qp_type: QpType::Ud,
            ..RC
        };
        assert!(check_send(&inv, &ud, None).is_err(), "no local ops on UD");
        let mut nobind = SendWr::bind_mw(1, b);
        nobind.bind = None;
        assert!(check_send(&nobind, &RC, None).is_err());
        let one = [Sge::default()];
        let mut with_data = SendWr::local_inv(1, 2);
        with_data.sg_list = &one;
        assert!(check_send(&with_data, &RC, None).is_err());
    }

    #[test]
    fn recv_encoding_matches_the_abi() {
        let sges = [Sge {
            addr: 5,
            length: 6,
            lkey: 7,
        }; 3];
        let wr = RecvWr::new(77, &sges);
        let mut b = [0u8; RECV_HDR + 3 * SGE_SIZE];
        b[..RECV_HDR].copy_from_slice(&recv_header(&wr));
        for (i, s) in sges.iter().enumerate() {
            let o = RECV_HDR + i * SGE_SIZE;
            b[o..o + SGE_SIZE].copy_from_slice(&emit_sge(s));
        }
        let got = RecvSlot::new_checked(&b[..]).unwrap();
        assert_eq!(got.wr_id(), 77);
        assert_eq!(got.sges().collect::<Vec<_>>(), sges);
        assert_eq!(abi::recv_slot_size(3), 64);
    }

    #[test]
    fn synchronous_checks() {
        let one = [Sge {
            addr: 0,
            length: 8,
            lkey: 1,
        }];
        let five = [one[0]; 5];
        let ok = |wr: SendWr<'_>, lim: &SqLimits, il| check_send(&wr, lim, il).is_ok();
        assert!(ok(SendWr::send(1, &one), &RC, None));
        assert!(!ok(SendWr::send(1, &five), &RC, None), "too many SGEs");
        assert!(
            ok(SendWr::send(1, &five), &RC, Some(64)),
            "inline ignores SGE count"
        );
        assert!(!ok(SendWr::send(1, &[]), &RC, Some(65)), "inline too long");
        assert!(
            !ok(SendWr::read(1, &one, 0, 0), &RC, Some(8)),
            "READ inline"
        );
        assert!(ok(SendWr::fetch_add(1, &one, 16, 2, 1), &RC, None));
        assert!(
            !ok(SendWr::fetch_add(1, &one, 12, 2, 1), &RC, None),
            "misaligned"
        );
        let two = [one[0]; 2];
        assert!(
            !ok(SendWr::cmp_swap(1, &two, 16, 2, 1, 1), &RC, None),
            "16 bytes"
        );
        let mut bad = SendWr::send(1, &one);
        bad.opcode = WrOpcode(12345);
        assert!(!ok(bad, &RC, None), "unknown opcode");
        let uc = SqLimits {
            qp_type: QpType::Uc,
            ..RC
        };
        assert!(!ok(SendWr::read(1, &one, 0, 0), &uc, None), "READ on UC");
        assert!(ok(SendWr::write(1, &one, 0, 0), &uc, None));
        let ud = SqLimits {
            qp_type: QpType::Ud,
            ..RC
        };
        assert!(!ok(SendWr::send(1, &one), &ud, None), "UD without AH");
        assert!(!ok(SendWr::write(1, &one, 0, 0), &ud, None), "WRITE on UD");
        let huge = [Sge {
            addr: 0,
            length: u32::MAX,
            lkey: 1,
        }; 2];
        assert!(!ok(SendWr::send(1, &huge), &RC, None), "length overflow");
    }

    #[test]
    fn gather_copies_in_order() {
        let a = *b"abc";
        let b = *b"defg";
        let sges = [
            Sge {
                addr: a.as_ptr() as u64,
                length: 3,
                lkey: 0,
            },
            Sge {
                addr: 0,
                length: 0,
                lkey: 0,
            },
            Sge {
                addr: b.as_ptr() as u64,
                length: 4,
                lkey: 0,
            },
        ];
        let mut out = vec![1, 2];
        // SAFETY: the SGEs point at the live arrays above (or are empty).
        unsafe { gather(&sges, &mut out) };
        assert_eq!(out, b"abcdefg");
    }
}
