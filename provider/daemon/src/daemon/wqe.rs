//! Turning ring slots into work requests, after checking every field.
//!
//! A slot is whatever bytes the client (or a bug, or an attacker) left in
//! shared memory. A slot that is not a valid work request for its queue
//! is not executed: it completes with an error status (see
//! [`BadWqe`]) and the QP moves to ERR, as an HCA does with a malformed
//! WQE.

use std::net::IpAddr;

use transport::qp::{send_flags, MwBind, Payload, RecvWqe, SendOp, SendWqe, UdDest, WcOpcode};
use transport::verbs::WrOpcode;

use crate::verbs;
use rxu_abi::proto::abi::{self, recv_field, send_field, RecvSlot, SendSlot};
use rxu_abi::proto::QpType;

/// Send flags a client may set (IBV_SEND_IP_CSUM is for raw packet QPs
/// and tolerated as a no-op).
const KNOWN_SEND_FLAGS: u32 = send_flags::FENCE
    | send_flags::SIGNALED
    | send_flags::SOLICITED
    | send_flags::INLINE
    | send_flags::IP_CSUM;

/// What the send queue checks a slot against.
#[derive(Clone, Copy, Debug)]
pub struct SqLimits {
    pub qp_type: QpType,
    pub max_sge: u32,
    pub max_inline: u32,
    /// The QP's Q_Key (UD sends whose Q_Key has the top bit set use it).
    pub qkey: u32,
    /// The engine speaks IPv6 (UD destinations must match its family).
    pub ipv6: bool,
    /// The engine speaks both families (a device serving its netdev).
    pub dual: bool,
}

/// A slot that cannot be executed: enough to write its error completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadWqe {
    pub wr_id: u64,
    pub opcode: WcOpcode,
    pub why: &'static str,
}

/// A little-endian field of a slot that may be too short for it.
fn field_or<const N: usize>(slot: &[u8], f: std::ops::Range<usize>, or: [u8; N]) -> [u8; N] {
    slot.get(f)
        .and_then(|b| <[u8; N]>::try_from(b).ok())
        .unwrap_or(or)
}

/// Decodes and checks one SQ slot. Reads the slot in place: the only
/// allocation is the transport WQE's SGE list (or inline copy).
pub fn send_wqe(slot: &[u8], lim: &SqLimits) -> Result<SendWqe, BadWqe> {
    // wr_id and opcode sit in the fixed header; read them even when the
    // rest is bad so the error completion names the right request.
    let head = |why| BadWqe {
        wr_id: u64::from_le_bytes(field_or(slot, send_field::WR_ID, [0; 8])),
        opcode: WrOpcode(u32::from_le_bytes(field_or(
            slot,
            send_field::OPCODE,
            [0xff; 4],
        )))
        .wc_opcode(),
        why,
    };
    let s = SendSlot::new_checked(slot)
        .map_err(|_| head("SGE list or inline data overflows the slot"))?;
    let bad = |why| BadWqe {
        wr_id: s.wr_id(),
        opcode: s.opcode().wc_opcode(),
        why,
    };
    let flags = s.send_flags();
    if flags & !KNOWN_SEND_FLAGS != 0 {
        return Err(bad("unknown send flags"));
    }
    if u32::from(s.num_sge()) > lim.max_sge {
        return Err(bad("more SGEs than the QP's max_send_sge"));
    }
    let payload = if flags & send_flags::INLINE != 0 {
        let data = s.inline_data();
        if data.len() > lim.max_inline as usize {
            return Err(bad("inline data above the QP's max_inline_data"));
        }
        Payload::Inline(data.to_vec())
    } else {
        if s.inline_len() != 0 {
            return Err(bad("inline data without IBV_SEND_INLINE"));
        }
        Payload::Sges(s.sges().collect())
    };
    let (ra, rkey, imm) = (s.remote_addr(), s.rkey(), s.imm_data());
    let op = match s.opcode() {
        WrOpcode::SEND => SendOp::Send,
        WrOpcode::SEND_WITH_IMM => SendOp::SendImm { imm },
        WrOpcode::SEND_WITH_INV => SendOp::SendInv { rkey: imm },
        WrOpcode::RDMA_WRITE => SendOp::Write {
            remote_addr: ra,
            rkey,
        },
        WrOpcode::RDMA_WRITE_WITH_IMM => SendOp::WriteImm {
            remote_addr: ra,
            rkey,
            imm,
        },
        WrOpcode::RDMA_READ => SendOp::Read {
            remote_addr: ra,
            rkey,
        },
        WrOpcode::ATOMIC_CMP_AND_SWP => SendOp::CmpSwap {
            remote_addr: ra,
            rkey,
            compare: s.compare_add(),
            swap: s.swap(),
        },
        WrOpcode::ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote_addr: ra,
            rkey,
            add: s.compare_add(),
        },
        WrOpcode::ATOMIC_WRITE => SendOp::AtomicWrite {
            remote_addr: ra,
            rkey,
        },
        WrOpcode::FLUSH => SendOp::Flush {
            remote_addr: ra,
            rkey,
            // abi: FLUSH carries its length in compare_add.
            len: u32::try_from(s.compare_add()).map_err(|_| bad("FLUSH length above 4 GiB"))?,
            plt: (s.flush() & 0xff) as u8,
            sel: ((s.flush() >> 8) & 0xff) as u8,
        },
        // abi: LOCAL_INV carries the key in imm_data.
        WrOpcode::LOCAL_INV => SendOp::LocalInv { rkey: imm },
        WrOpcode::BIND_MW => {
            if s.num_sge() != 0 || s.inline_len() != 0 {
                return Err(bad("BIND_MW carries no data"));
            }
            SendOp::BindMw(MwBind {
                mw_rkey: rkey,
                new_rkey: imm,
                mr_lkey: s.bind_lkey(),
                addr: ra,
                len: s.compare_add(),
                access: s.bind_access(),
            })
        }
        _ if s.opcode().info().is_some() => return Err(bad("opcode not supported (TSO)")),
        _ => return Err(bad("unknown opcode")),
    };
    let ud = if lim.qp_type == QpType::Ud {
        if s.ud_qpn() > 0xFF_FFFF {
            return Err(bad("UD remote QPN above 2^24-1"));
        }
        // The flow label is not checked: the kernel keeps its low 20 bits
        // (and rxe does not use it for UD), and UCX sets all 32 on purpose.
        let addr = verbs::addr_of_gid(&s.ud_gid());
        if (addr.is_ipv6() != lim.ipv6 && !lim.dual) || addr.is_unspecified() || unsendable(addr) {
            return Err(bad("UD destination GID not reachable from this device"));
        }
        let qkey = match s.ud_qkey() {
            q if q & 0x8000_0000 != 0 => lim.qkey,
            q => q,
        };
        Some(UdDest {
            addr,
            qpn: s.ud_qpn(),
            qkey,
        })
    } else {
        None
    };
    Ok(SendWqe {
        wr_id: s.wr_id(),
        op,
        flags: flags
            & (send_flags::FENCE
                | send_flags::SIGNALED
                | send_flags::SOLICITED
                | send_flags::INLINE),
        payload,
        ud,
    })
}

/// Destinations a UD send cannot have: broadcast, and IPv6 multicast
/// (RoCEv2 maps only IPv4 groups). IPv4 groups are sent to.
fn unsendable(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.is_broadcast(),
        IpAddr::V6(v) => v.is_multicast(),
    }
}

/// Decodes and checks one RQ or SRQ slot.
pub fn recv_wqe(slot: &[u8], max_sge: u32) -> Result<RecvWqe, BadWqe> {
    let wr_id = u64::from_le_bytes(field_or(slot, recv_field::WR_ID, [0; 8]));
    let bad = |why| BadWqe {
        wr_id,
        opcode: WcOpcode::Recv,
        why,
    };
    let n = u32::from_le_bytes(field_or(slot, recv_field::NUM_SGE, [0xff; 4]));
    if n > max_sge {
        return Err(bad("more SGEs than the queue's max_recv_sge"));
    }
    let r = RecvSlot::new_checked(slot).map_err(|_| bad("SGE list overflows the slot"))?;
    Ok(RecvWqe {
        wr_id,
        sges: r.sges().collect(),
    })
}

/// Bytes a send slot needs for these limits (the ring's slot size).
pub fn send_slot_size(max_sge: u32, max_inline: u32) -> u32 {
    abi::send_slot_size(max_sge, max_inline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::tests::spec::{RecvSpec, SendSpec};
    use proptest::prelude::*;
    use transport::verbs::Sge;

    fn lim(qp_type: QpType) -> SqLimits {
        SqLimits {
            qp_type,
            max_sge: 2,
            max_inline: 64,
            qkey: 0x1111,
            ipv6: false,
            dual: false,
        }
    }

    #[test]
    fn good_send_and_write() {
        let l = lim(QpType::Rc);
        let size = send_slot_size(2, 64) as usize;
        let s = SendSpec {
            wr_id: 7,
            opcode: WrOpcode::RDMA_WRITE_WITH_IMM,
            send_flags: send_flags::SIGNALED,
            imm_data: 0xabcd,
            remote_addr: 0x1000,
            rkey: 42,
            sges: vec![Sge {
                addr: 1,
                length: 2,
                lkey: 3,
            }],
            ..Default::default()
        };
        let w = send_wqe(&s.slot(size), &l).unwrap();
        assert_eq!(w.wr_id, 7);
        assert_eq!(
            w.op,
            SendOp::WriteImm {
                remote_addr: 0x1000,
                rkey: 42,
                imm: 0xabcd
            }
        );
        assert_eq!(w.payload.len(), 2);
        let s = SendSpec {
            wr_id: 8,
            opcode: WrOpcode::SEND,
            send_flags: send_flags::INLINE,
            inline: vec![9; 64],
            ..Default::default()
        };
        let w = send_wqe(&s.slot(size), &l).unwrap();
        assert_eq!(w.payload, Payload::Inline(vec![9; 64]));
    }

    #[test]
    fn local_operations_decode() {
        let l = lim(QpType::Rc);
        let size = send_slot_size(2, 64) as usize;
        let s = SendSpec {
            wr_id: 3,
            opcode: WrOpcode::BIND_MW,
            rkey: 0x1234_5600,
            imm_data: 0x1234_5601,
            remote_addr: 0x4000,
            compare_add: 512,
            bind_lkey: 77,
            bind_access: 6,
            ..Default::default()
        };
        let w = send_wqe(&s.slot(size), &l).unwrap();
        assert_eq!(
            w.op,
            SendOp::BindMw(MwBind {
                mw_rkey: 0x1234_5600,
                new_rkey: 0x1234_5601,
                mr_lkey: 77,
                addr: 0x4000,
                len: 512,
                access: 6,
            })
        );
        let s = SendSpec {
            wr_id: 4,
            opcode: WrOpcode::LOCAL_INV,
            imm_data: 0x55,
            ..Default::default()
        };
        let w = send_wqe(&s.slot(size), &l).unwrap();
        assert_eq!(w.op, SendOp::LocalInv { rkey: 0x55 });
    }

    #[test]
    fn bad_slots_name_their_wr_id() {
        let l = lim(QpType::Rc);
        let size = send_slot_size(4, 128) as usize;
        let cases = [
            SendSpec {
                wr_id: 1,
                opcode: WrOpcode(99),
                ..Default::default()
            },
            SendSpec {
                wr_id: 2,
                opcode: WrOpcode::SEND,
                send_flags: 1 << 9,
                ..Default::default()
            },
            SendSpec {
                wr_id: 3,
                opcode: WrOpcode::SEND,
                sges: vec![Sge::default(); 3],
                ..Default::default()
            },
            SendSpec {
                wr_id: 4,
                opcode: WrOpcode::SEND,
                send_flags: send_flags::INLINE,
                inline: vec![0; 65],
                ..Default::default()
            },
            SendSpec {
                wr_id: 5,
                opcode: WrOpcode::RDMA_READ,
                inline: vec![0; 8],
                ..Default::default()
            },
            SendSpec {
                wr_id: 6,
                opcode: WrOpcode::TSO,
                ..Default::default()
            },
            SendSpec {
                wr_id: 7,
                opcode: WrOpcode::BIND_MW,
                sges: vec![Sge::default(); 1],
                ..Default::default()
            },
        ];
        for s in cases {
            let e = send_wqe(&s.slot(size), &l).unwrap_err();
            assert_eq!(e.wr_id, s.wr_id, "{}", e.why);
        }
        // num_sge larger than the slot can hold: the decode fails.
        let mut b = SendSpec {
            wr_id: 9,
            opcode: WrOpcode::RDMA_WRITE,
            ..Default::default()
        }
        .slot(128);
        SendSlot::new_unchecked(&mut b[..]).set_num_sge(200);
        let e = send_wqe(&b, &lim(QpType::Rc)).unwrap_err();
        assert_eq!((e.wr_id, e.opcode), (9, WcOpcode::RdmaWrite));
    }

    #[test]
    fn ud_destination_checked() {
        let l = lim(QpType::Ud);
        let size = send_slot_size(2, 64) as usize;
        let mut s = SendSpec {
            wr_id: 1,
            opcode: WrOpcode::SEND,
            ud_qpn: 0x12,
            ud_qkey: 0x8000_0000,
            ud_gid: verbs::gid_of("127.0.0.1".parse().unwrap()),
            ..Default::default()
        };
        let w = send_wqe(&s.slot(size), &l).unwrap();
        let ud = w.ud.unwrap();
        assert_eq!((ud.qpn, ud.qkey), (0x12, 0x1111), "top bit: QP's qkey");
        s.ud_qpn = 1 << 24;
        assert!(send_wqe(&s.slot(size), &l).is_err());
        s.ud_qpn = 3;
        s.ud_gid = verbs::gid_of("::1".parse().unwrap());
        assert!(send_wqe(&s.slot(size), &l).is_err(), "family mismatch");
        s.ud_gid = [0; 16];
        assert!(send_wqe(&s.slot(size), &l).is_err(), "unspecified");
    }

    /// UCX sets a UD AH's flow label to 0xFFFFFFFF; the kernel takes the
    /// low 20 bits and rxe's UD path does not use it at all.
    #[test]
    fn ud_flow_label_above_20_bits_is_accepted() {
        let s = SendSpec {
            wr_id: 4,
            opcode: WrOpcode::SEND,
            ud_qpn: 0x12,
            ud_qkey: 0x1111,
            ud_gid: verbs::gid_of("127.0.0.1".parse().unwrap()),
            ud_flow_label: 0xFFFF_FFFF,
            ..Default::default()
        };
        let w = send_wqe(&s.slot(send_slot_size(2, 64) as usize), &lim(QpType::Ud)).unwrap();
        assert_eq!(w.ud.map(|u| u.qpn), Some(0x12));
    }

    #[test]
    fn recv_slots() {
        let r = RecvSpec {
            wr_id: 5,
            sges: vec![Sge::default(); 2],
        };
        let mut b = vec![0u8; abi::recv_slot_size(4) as usize];
        r.write(&mut b);
        assert_eq!(recv_wqe(&b, 2).unwrap().sges.len(), 2);
        assert_eq!(recv_wqe(&b, 1).unwrap_err().wr_id, 5);
        RecvSlot::new_unchecked(&mut b[..]).set_num_sge(u32::MAX);
        assert!(recv_wqe(&b, u32::MAX).is_err());
    }

    proptest! {
        #[test]
        fn garbage_slots_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400),
                                     max_sge in 0u32..8, ud in any::<bool>()) {
            let l = SqLimits { max_sge, ..lim(if ud { QpType::Ud } else { QpType::Rc }) };
            let _ = send_wqe(&b, &l);
            let _ = recv_wqe(&b, max_sge);
        }
    }
}
