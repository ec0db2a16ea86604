//! Turning ring slots into work requests, after checking every field.
//!
//! A slot is whatever bytes the client (or a bug, or an attacker) left in
//! shared memory. A slot that is not a valid work request for its queue
//! is not executed: it completes with an error status (see
//! [`BadWqe`]) and the QP moves to ERR, as an HCA does with a malformed
//! WQE.

use std::net::IpAddr;

use transport::qp::{send_flags, Payload, RecvWqe, SendOp, SendWqe, Sge, UdDest, WcOpcode};
use transport::verbs::WrOpcode;

use crate::proto::abi::{self, RecvSlot, SendSlot};
use crate::proto::QpType;
use crate::verbs;

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

/// Decodes and checks one SQ slot.
pub fn send_wqe(slot: &[u8], lim: &SqLimits) -> Result<SendWqe, BadWqe> {
    // wr_id and opcode sit in the fixed header; read them even when the
    // rest is bad so the error completion names the right request.
    let head = |why| {
        let wr_id = slot
            .get(0..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
        let op = slot.get(8..12).map_or(u32::MAX, |b| {
            u32::from_le_bytes(b.try_into().unwrap_or([0xff; 4]))
        });
        BadWqe {
            wr_id,
            opcode: WrOpcode(op).wc_opcode(),
            why,
        }
    };
    let s =
        SendSlot::decode(slot).map_err(|_| head("SGE list or inline data overflows the slot"))?;
    let bad = |why| BadWqe {
        wr_id: s.wr_id,
        opcode: s.opcode.wc_opcode(),
        why,
    };
    if s.send_flags & !KNOWN_SEND_FLAGS != 0 {
        return Err(bad("unknown send flags"));
    }
    let inline = s.send_flags & send_flags::INLINE != 0;
    let num_sge = slot
        .get(20..22)
        .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
    if u32::from(num_sge) > lim.max_sge {
        return Err(bad("more SGEs than the QP's max_send_sge"));
    }
    let payload = if inline {
        if s.inline.len() > lim.max_inline as usize {
            return Err(bad("inline data above the QP's max_inline_data"));
        }
        Payload::Inline(s.inline)
    } else {
        if !s.inline.is_empty() {
            return Err(bad("inline data without IBV_SEND_INLINE"));
        }
        Payload::Sges(
            s.sges
                .iter()
                .map(|g| Sge {
                    addr: g.addr,
                    length: g.length,
                    lkey: g.lkey,
                })
                .collect(),
        )
    };
    let (ra, rkey) = (s.remote_addr, s.rkey);
    let op = match s.opcode {
        WrOpcode::SEND => SendOp::Send,
        WrOpcode::SEND_WITH_IMM => SendOp::SendImm { imm: s.imm_or_inv },
        WrOpcode::SEND_WITH_INV => SendOp::SendInv { rkey: s.imm_or_inv },
        WrOpcode::RDMA_WRITE => SendOp::Write {
            remote_addr: ra,
            rkey,
        },
        WrOpcode::RDMA_WRITE_WITH_IMM => SendOp::WriteImm {
            remote_addr: ra,
            rkey,
            imm: s.imm_or_inv,
        },
        WrOpcode::RDMA_READ => SendOp::Read {
            remote_addr: ra,
            rkey,
        },
        WrOpcode::ATOMIC_CMP_AND_SWP => SendOp::CmpSwap {
            remote_addr: ra,
            rkey,
            compare: s.compare_add,
            swap: s.swap,
        },
        WrOpcode::ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote_addr: ra,
            rkey,
            add: s.compare_add,
        },
        WrOpcode::ATOMIC_WRITE => SendOp::AtomicWrite {
            remote_addr: ra,
            rkey,
        },
        WrOpcode::FLUSH => SendOp::Flush {
            remote_addr: ra,
            rkey,
            // abi: FLUSH carries its length in compare_add.
            len: u32::try_from(s.compare_add).map_err(|_| bad("FLUSH length above 4 GiB"))?,
            plt: (s.flush & 0xff) as u8,
            sel: ((s.flush >> 8) & 0xff) as u8,
        },
        _ if s.opcode.info().is_some() => {
            return Err(bad("opcode not supported (memory windows, LOCAL_INV, TSO)"))
        }
        _ => return Err(bad("unknown opcode")),
    };
    let ud = if lim.qp_type == QpType::Ud {
        if s.ud_qpn > 0xFF_FFFF {
            return Err(bad("UD remote QPN above 2^24-1"));
        }
        if s.ud_flow_label > 0xF_FFFF {
            return Err(bad("flow label above 2^20-1"));
        }
        let addr = verbs::addr_of_gid(&s.ud_gid);
        if (addr.is_ipv6() != lim.ipv6 && !lim.dual) || addr.is_unspecified() || is_multicast(addr)
        {
            return Err(bad("UD destination GID not reachable from this device"));
        }
        let qkey = if s.ud_qkey & 0x8000_0000 != 0 {
            lim.qkey
        } else {
            s.ud_qkey
        };
        Some(UdDest {
            addr,
            qpn: s.ud_qpn,
            qkey,
        })
    } else {
        None
    };
    Ok(SendWqe {
        wr_id: s.wr_id,
        op,
        flags: s.send_flags
            & (send_flags::FENCE
                | send_flags::SIGNALED
                | send_flags::SOLICITED
                | send_flags::INLINE),
        payload,
        ud,
    })
}

fn is_multicast(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.is_multicast() || v.is_broadcast(),
        IpAddr::V6(v) => v.is_multicast(),
    }
}

/// Decodes and checks one RQ or SRQ slot.
pub fn recv_wqe(slot: &[u8], max_sge: u32) -> Result<RecvWqe, BadWqe> {
    let wr_id = slot
        .get(0..8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let bad = |why| BadWqe {
        wr_id,
        opcode: WcOpcode::Recv,
        why,
    };
    let n = slot.get(8..12).map_or(u32::MAX, |b| {
        u32::from_le_bytes(b.try_into().unwrap_or([0xff; 4]))
    });
    if n > max_sge {
        return Err(bad("more SGEs than the queue's max_recv_sge"));
    }
    let r = RecvSlot::decode(slot).map_err(|_| bad("SGE list overflows the slot"))?;
    Ok(RecvWqe {
        wr_id: r.wr_id,
        sges: r
            .sges
            .iter()
            .map(|g| Sge {
                addr: g.addr,
                length: g.length,
                lkey: g.lkey,
            })
            .collect(),
    })
}

/// Bytes a send slot needs for these limits (the ring's slot size).
pub fn send_slot_size(max_sge: u32, max_inline: u32) -> u32 {
    abi::send_slot_size(max_sge, max_inline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::abi::Sge as AbiSge;
    use proptest::prelude::*;

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

    fn enc(s: &SendSlot, size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        s.encode(&mut b).unwrap();
        b
    }

    #[test]
    fn good_send_and_write() {
        let l = lim(QpType::Rc);
        let size = send_slot_size(2, 64) as usize;
        let s = SendSlot {
            wr_id: 7,
            opcode: WrOpcode::RDMA_WRITE_WITH_IMM,
            send_flags: send_flags::SIGNALED,
            imm_or_inv: 0xabcd,
            remote_addr: 0x1000,
            rkey: 42,
            sges: vec![AbiSge {
                addr: 1,
                length: 2,
                lkey: 3,
            }],
            ..Default::default()
        };
        let w = send_wqe(&enc(&s, size), &l).unwrap();
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
        let s = SendSlot {
            wr_id: 8,
            opcode: WrOpcode::SEND,
            send_flags: send_flags::INLINE,
            inline: vec![9; 64],
            ..Default::default()
        };
        let w = send_wqe(&enc(&s, size), &l).unwrap();
        assert_eq!(w.payload, Payload::Inline(vec![9; 64]));
    }

    #[test]
    fn bad_slots_name_their_wr_id() {
        let l = lim(QpType::Rc);
        let size = send_slot_size(4, 128) as usize;
        let cases = [
            SendSlot {
                wr_id: 1,
                opcode: WrOpcode(99),
                ..Default::default()
            },
            SendSlot {
                wr_id: 2,
                opcode: WrOpcode::SEND,
                send_flags: 1 << 9,
                ..Default::default()
            },
            SendSlot {
                wr_id: 3,
                opcode: WrOpcode::SEND,
                sges: vec![AbiSge::default(); 3],
                ..Default::default()
            },
            SendSlot {
                wr_id: 4,
                opcode: WrOpcode::SEND,
                send_flags: send_flags::INLINE,
                inline: vec![0; 65],
                ..Default::default()
            },
            SendSlot {
                wr_id: 5,
                opcode: WrOpcode::RDMA_READ,
                inline: vec![0; 8],
                ..Default::default()
            },
            SendSlot {
                wr_id: 6,
                opcode: WrOpcode::BIND_MW,
                ..Default::default()
            },
        ];
        for s in cases {
            let e = send_wqe(&enc(&s, size), &l).unwrap_err();
            assert_eq!(e.wr_id, s.wr_id, "{}", e.why);
        }
        // num_sge larger than the slot can hold: the decode fails.
        let mut b = enc(
            &SendSlot {
                wr_id: 9,
                opcode: WrOpcode::RDMA_WRITE,
                ..Default::default()
            },
            128,
        );
        b[20..22].copy_from_slice(&200u16.to_le_bytes());
        let e = send_wqe(&b, &lim(QpType::Rc)).unwrap_err();
        assert_eq!((e.wr_id, e.opcode), (9, WcOpcode::RdmaWrite));
    }

    #[test]
    fn ud_destination_checked() {
        let l = lim(QpType::Ud);
        let size = send_slot_size(2, 64) as usize;
        let mut s = SendSlot {
            wr_id: 1,
            opcode: WrOpcode::SEND,
            ud_qpn: 0x12,
            ud_qkey: 0x8000_0000,
            ud_gid: verbs::gid_of("127.0.0.1".parse().unwrap()),
            ..Default::default()
        };
        let w = send_wqe(&enc(&s, size), &l).unwrap();
        let ud = w.ud.unwrap();
        assert_eq!((ud.qpn, ud.qkey), (0x12, 0x1111), "top bit: QP's qkey");
        s.ud_qpn = 1 << 24;
        assert!(send_wqe(&enc(&s, size), &l).is_err());
        s.ud_qpn = 3;
        s.ud_gid = verbs::gid_of("::1".parse().unwrap());
        assert!(send_wqe(&enc(&s, size), &l).is_err(), "family mismatch");
        s.ud_gid = [0; 16];
        assert!(send_wqe(&enc(&s, size), &l).is_err(), "unspecified");
    }

    #[test]
    fn recv_slots() {
        let r = RecvSlot {
            wr_id: 5,
            sges: vec![AbiSge::default(); 2],
        };
        let mut b = vec![0u8; abi::recv_slot_size(4) as usize];
        r.encode(&mut b).unwrap();
        assert_eq!(recv_wqe(&b, 2).unwrap().sges.len(), 2);
        assert_eq!(recv_wqe(&b, 1).unwrap_err().wr_id, 5);
        b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
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
