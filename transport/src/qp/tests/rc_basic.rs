//! RC, lossless: every opcode byte-exact at several MTUs and sizes, the
//! packets on the wire (segmentation, AckReq, MSN), completions.

use super::harness::*;
use crate::qp::*;
use crate::wire::opcode::flags;
use crate::wire::{AethKind, Opcode};
use crate::Psn;

const ALL: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

fn setup(mtu: Mtu) -> Harness {
    let mut h = Harness::new(&Setup {
        mtu,
        ..Setup::default()
    });
    h.capture_on();
    h
}

/// Sizes that hit every segmentation edge.
fn sizes(mtu: usize) -> Vec<usize> {
    vec![0, 1, mtu - 1, mtu, mtu + 1, 2 * mtu, 3 * mtu + 7]
}

const MTUS: [Mtu; 3] = [Mtu::M256, Mtu::M1024, Mtu::M4096];

/// Checks the request packets A sent: PSNs consecutive (READ requests
/// consume their response PSNs), segmentation lengths, AckReq on the
/// last packet of every message.
fn check_requests(h: &Harness, mtu: usize) {
    let mut expect: Option<Psn> = None;
    for c in h.captured().iter().filter(|c| c.dir == Dir::AtoB) {
        let p = c.pkt();
        let info = p.opcode().info().unwrap();
        if let Some(e) = expect {
            assert_eq!(p.hdr.bth.psn, e, "PSNs consecutive");
        }
        let n = p.payload.len();
        if info.has(flags::FIRST) || info.has(flags::MIDDLE) {
            assert_eq!(n, mtu, "{:?} carries exactly the PMTU", p.opcode());
            assert!(!p.hdr.bth.se);
        } else if info.has(flags::LAST) {
            assert!((1..=mtu).contains(&n));
        } else {
            assert!(n <= mtu);
        }
        if info.has(flags::LAST) || info.has(flags::ONLY) {
            assert!(p.hdr.bth.ack_req, "AckReq on the last packet");
        }
        assert_eq!(p.hdr.bth.pad as usize, (4 - n % 4) % 4);
        assert!(!p.hdr.bth.mig_req);
        assert_eq!(p.hdr.bth.pkey, 0xFFFF);
        let consumed = match p.hdr.reth {
            Some(r) if p.opcode() == Opcode::RC_READ_REQUEST => {
                (r.dma_len as usize).div_ceil(mtu).max(1) as u32
            }
            _ => 1,
        };
        expect = Some(p.hdr.bth.psn.add(consumed));
    }
}

#[test]
fn send_every_size_and_mtu() {
    for mtu in MTUS {
        let m = mtu.bytes();
        let mut h = setup(mtu);
        let mut ids = vec![];
        let src = h.a.reg(0x10_0000, 4 * m + 64, 0, pat(1));
        let dst =
            h.b.reg(0x20_0000, 8 * (4 * m + 64), access::LOCAL_WRITE, |_| 0);
        for (i, &n) in sizes(m).iter().enumerate() {
            let slot = 0x20_0000 + (i * (4 * m + 64)) as u64;
            h.b.qp
                .post_recv(recv(
                    100 + i as u64,
                    vec![sge(slot, (4 * m + 64) as u32, dst)],
                ))
                .unwrap();
            let off = 0x10_0000 + i as u64;
            h.a.qp
                .post_send(wqe(i as u64, SendOp::Send, vec![sge(off, n as u32, src)]))
                .unwrap();
            ids.push(i as u64);
        }
        h.run();
        assert_ok_in_order(&h.a.cq(CqSide::Send), &ids);
        let rc = h.b.cq(CqSide::Recv);
        assert_eq!(rc.len(), ids.len());
        for (i, &n) in sizes(m).iter().enumerate() {
            let c = rc[i];
            assert_eq!(
                (c.wr_id, c.status, c.opcode),
                (100 + i as u64, WcStatus::Success, WcOpcode::Recv)
            );
            assert_eq!(c.byte_len as usize, n);
            assert_eq!(c.wc_flags, wc_flags::GRH, "as rxe: GRH on every receive");
            let slot = i * (4 * m + 64);
            assert_eq!(
                &h.b.bytes(dst)[slot..slot + n],
                &h.a.bytes(src)[i..i + n],
                "mtu {m} size {n}"
            );
            // Nothing past the message was touched.
            assert!(h.b.bytes(dst)[slot + n..slot + 4 * m + 64]
                .iter()
                .all(|&b| b == 0));
        }
        check_requests(&h, m);
    }
}

#[test]
fn send_with_imm_and_invalidate() {
    let mut h = setup(Mtu::M256);
    let src = h.a.reg(0x1000, 1000, 0, pat(2));
    let dst = h.b.reg(0x8000, 4096, access::LOCAL_WRITE, |_| 0);
    let victim = h.b.reg(0x40000, 64, access::REMOTE_WRITE, |_| 0);
    for i in 0..3 {
        h.b.qp
            .post_recv(recv(10 + i, vec![sge(0x8000 + i * 1024, 1024, dst)]))
            .unwrap();
    }
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::SendImm { imm: 0xDEADBEEF },
            vec![sge(0x1000, 700, src)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::SendInv { rkey: victim },
            vec![sge(0x1000, 10, src)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            3,
            SendOp::SendInv {
                rkey: victim ^ 0x55,
            },
            vec![sge(0x1000, 300, src)],
        ))
        .unwrap();
    h.run();
    let s = h.a.cq(CqSide::Send);
    assert_ok_in_order(&s[..2], &[1, 2]);
    // rxe flags the sender's completion of a SEND_WITH_IMM too.
    assert_eq!((s[0].wc_flags, s[1].wc_flags), (wc_flags::WITH_IMM, 0));
    // Invalidating a key that does not exist fails at the responder.
    assert_eq!(s[2].status, WcStatus::RemInvReqErr);
    assert_eq!(s[2].wc_flags, 0);
    let r = h.b.cq(CqSide::Recv);
    assert_eq!(r[0].wc_flags, wc_flags::GRH | wc_flags::WITH_IMM);
    assert_eq!(r[0].imm, 0xDEADBEEF);
    assert_eq!(r[0].byte_len, 700);
    assert_eq!(r[1].wc_flags, wc_flags::GRH | wc_flags::WITH_INV);
    assert_eq!(r[1].invalidated_rkey, victim);
    assert!(!h.b.mem.region(victim).unwrap().valid);
    assert_eq!(r[2].status, WcStatus::RemInvReqErr);
    assert_eq!(&h.b.bytes(dst)[..700], &h.a.bytes(src)[..700]);
    let ops: Vec<Opcode> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| c.pkt().opcode())
        .collect();
    assert_eq!(
        &ops[..5],
        &[
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST_IMM,
            Opcode::RC_SEND_ONLY_INV,
            Opcode::RC_SEND_FIRST,
        ]
    );
    assert_eq!(ops[5], Opcode::RC_SEND_LAST_INV);
    assert_eq!(h.b.qp.state(), QpState::Err);
}

#[test]
fn write_every_size_and_mtu() {
    for mtu in MTUS {
        let m = mtu.bytes();
        let mut h = setup(mtu);
        let src = h.a.reg(0x1000, 4 * m, 0, pat(3));
        let dst = h.b.reg(0x10_0000, 40 * m, access::REMOTE_WRITE, |_| 0xEE);
        let mut ids = vec![];
        let mut at = 0x10_0000u64;
        let mut spots = vec![];
        for (i, &n) in sizes(m).iter().enumerate() {
            h.a.qp
                .post_send(wqe(
                    i as u64,
                    SendOp::Write {
                        remote_addr: at + 8,
                        rkey: dst,
                    },
                    vec![sge(0x1000, n as u32, src)],
                ))
                .unwrap();
            ids.push(i as u64);
            spots.push((at + 8, n));
            at += (n + 64) as u64;
        }
        h.run();
        assert_ok_in_order(&h.a.cq(CqSide::Send), &ids);
        assert!(
            h.b.cq(CqSide::Recv).is_empty(),
            "plain WRITE consumes no receive"
        );
        let d = h.b.bytes(dst);
        let mut touched = vec![false; d.len()];
        for (va, n) in spots {
            let o = (va - 0x10_0000) as usize;
            assert_eq!(&d[o..o + n], &h.a.bytes(src)[..n]);
            touched[o..o + n].iter_mut().for_each(|t| *t = true);
        }
        assert!(d.iter().zip(&touched).all(|(&b, &t)| t || b == 0xEE));
        check_requests(&h, m);
        let ops: Vec<Opcode> = h
            .captured()
            .iter()
            .filter(|c| c.dir == Dir::AtoB)
            .map(|c| c.pkt().opcode())
            .collect();
        assert_eq!(ops[0], Opcode::RC_WRITE_ONLY);
        assert!(ops.contains(&Opcode::RC_WRITE_FIRST));
        assert!(ops.contains(&Opcode::RC_WRITE_MIDDLE));
        assert!(ops.contains(&Opcode::RC_WRITE_LAST));
    }
}

#[test]
fn write_with_imm() {
    let mut h = setup(Mtu::M512);
    let src = h.a.reg(0x1000, 2000, 0, pat(4));
    let dst = h.b.reg(0x9000, 2000, access::REMOTE_WRITE, |_| 0);
    h.b.qp.post_recv(recv(50, vec![])).unwrap();
    h.b.qp.post_recv(recv(51, vec![])).unwrap();
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::WriteImm {
                remote_addr: 0x9000,
                rkey: dst,
                imm: 7,
            },
            vec![sge(0x1000, 1500, src)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::WriteImm {
                remote_addr: 0x9000,
                rkey: dst,
                imm: 8,
            },
            vec![],
        ))
        .unwrap();
    h.run();
    let s = h.a.cq(CqSide::Send);
    assert_ok_in_order(&s, &[1, 2]);
    assert!(s.iter().all(|c| c.wc_flags == wc_flags::WITH_IMM));
    let r = h.b.cq(CqSide::Recv);
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].imm, r[0].byte_len),
        (50, WcOpcode::RecvRdmaWithImm, 7, 1500)
    );
    assert_eq!(r[0].wc_flags, wc_flags::GRH | wc_flags::WITH_IMM);
    assert_eq!((r[1].wr_id, r[1].imm, r[1].byte_len), (51, 8, 0));
    assert_eq!(&h.b.bytes(dst)[..1500], &h.a.bytes(src)[..1500]);
    let ops: Vec<Opcode> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| c.pkt().opcode())
        .collect();
    assert_eq!(
        ops,
        vec![
            Opcode::RC_WRITE_FIRST,
            Opcode::RC_WRITE_MIDDLE,
            Opcode::RC_WRITE_LAST_IMM,
            Opcode::RC_WRITE_ONLY_IMM
        ]
    );
}

#[test]
fn read_every_size_and_mtu() {
    for mtu in MTUS {
        let m = mtu.bytes();
        let mut h = setup(mtu);
        let src = h.b.reg(0x50_0000, 4 * m, access::REMOTE_READ, pat(5));
        let dst = h.a.reg(0x1000, 40 * m, access::LOCAL_WRITE, |_| 0xEE);
        let mut ids = vec![];
        let mut at = 0x1000u64;
        let mut spots = vec![];
        for (i, &n) in sizes(m).iter().enumerate() {
            h.a.qp
                .post_send(wqe(
                    i as u64,
                    SendOp::Read {
                        remote_addr: 0x50_0000 + 3,
                        rkey: src,
                    },
                    vec![sge(at, n as u32, dst)],
                ))
                .unwrap();
            ids.push(i as u64);
            spots.push((at, n));
            at += (n + 64) as u64;
        }
        h.run();
        let s = h.a.cq(CqSide::Send);
        assert_ok_in_order(&s, &ids);
        for (c, &n) in s.iter().zip(sizes(m).iter()) {
            assert_eq!((c.opcode, c.byte_len as usize), (WcOpcode::RdmaRead, n));
        }
        let d = h.a.bytes(dst);
        for (va, n) in spots {
            let o = (va - 0x1000) as usize;
            assert_eq!(&d[o..o + n], &h.b.bytes(src)[3..3 + n]);
            assert_eq!(d[o + n], 0xEE);
        }
        check_requests(&h, m);
        // Responses: FIRST (AETH) MIDDLE (none) LAST (AETH) or ONLY, PSNs
        // from the request's.
        let mut resp_ops = vec![];
        for c in h.captured().iter().filter(|c| c.dir == Dir::BtoA) {
            let p = c.pkt();
            let info = p.opcode().info().unwrap();
            assert!(info.has(flags::READ_RESPONSE));
            assert_eq!(p.hdr.aeth.is_some(), !info.has(flags::MIDDLE));
            if info.has(flags::FIRST) || info.has(flags::MIDDLE) {
                assert_eq!(p.payload.len(), m);
            }
            resp_ops.push(p.opcode());
        }
        assert_eq!(resp_ops[0], Opcode::RC_READ_RESPONSE_ONLY);
        assert!(resp_ops.contains(&Opcode::RC_READ_RESPONSE_MIDDLE));
    }
}

#[test]
fn atomics() {
    let mut h = setup(Mtu::M1024);
    let tgt = h.b.reg(
        0x7000,
        64,
        access::REMOTE_ATOMIC | access::REMOTE_WRITE,
        |_| 0,
    );
    h.b.mem.region_mut(tgt).unwrap().data[..8].copy_from_slice(&5u64.to_ne_bytes());
    let res = h.a.reg(0x100, 64, access::LOCAL_WRITE, |_| 0);
    let cas = |id, cmp, swap, at| {
        wqe(
            id,
            SendOp::CmpSwap {
                remote_addr: 0x7000,
                rkey: tgt,
                compare: cmp,
                swap,
            },
            vec![sge(at, 8, res)],
        )
    };
    h.a.qp.post_send(cas(1, 5, 9, 0x100)).unwrap();
    h.a.qp.post_send(cas(2, 5, 11, 0x108)).unwrap();
    h.a.qp
        .post_send(wqe(
            3,
            SendOp::FetchAdd {
                remote_addr: 0x7000,
                rkey: tgt,
                add: 100,
            },
            vec![sge(0x110, 8, res)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            4,
            SendOp::FetchAdd {
                remote_addr: 0x7008,
                rkey: tgt,
                add: u64::MAX,
            },
            vec![sge(0x118, 8, res)],
        ))
        .unwrap();
    h.run();
    let s = h.a.cq(CqSide::Send);
    assert_ok_in_order(&s, &[1, 2, 3, 4]);
    assert_eq!(s[0].opcode, WcOpcode::CompSwap);
    assert_eq!(s[2].opcode, WcOpcode::FetchAdd);
    let word = |d: &[u8], o: usize| u64::from_ne_bytes(d[o..o + 8].try_into().unwrap());
    let r = h.a.bytes(res);
    assert_eq!(
        [word(r, 0), word(r, 8), word(r, 16), word(r, 24)],
        [5, 9, 9, 0]
    );
    let t = h.b.bytes(tgt);
    assert_eq!(word(t, 0), 109);
    assert_eq!(word(t, 8), u64::MAX);
    let ack = h
        .captured()
        .iter()
        .find(|c| c.dir == Dir::BtoA)
        .unwrap()
        .pkt();
    assert_eq!(ack.opcode(), Opcode::RC_ATOMIC_ACK);
    assert_eq!(ack.hdr.atomic_ack.unwrap().orig, 5);
}

#[test]
fn atomic_write_and_flush() {
    const FLUSH_GLOBAL: u32 = 1 << 8;
    let mut h = setup(Mtu::M1024);
    let tgt =
        h.b.reg(0x7000, 64, access::REMOTE_WRITE | FLUSH_GLOBAL, |_| 0);
    let src = h.a.reg(0x100, 8, 0, |i| i as u8 + 1);
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::AtomicWrite {
                remote_addr: 0x7010,
                rkey: tgt,
            },
            vec![sge(0x100, 8, src)],
        ))
        .unwrap();
    let mut inl = wqe(
        2,
        SendOp::AtomicWrite {
            remote_addr: 0x7018,
            rkey: tgt,
        },
        vec![],
    );
    inl.payload = Payload::Inline(vec![9, 8, 7, 6, 5, 4, 3, 2]);
    h.a.qp.post_send(inl).unwrap();
    h.a.qp
        .post_send(wqe(
            3,
            SendOp::Flush {
                remote_addr: 0x7000,
                rkey: tgt,
                len: 64,
                plt: 1,
                sel: 0,
            },
            vec![],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            4,
            SendOp::Flush {
                remote_addr: 0,
                rkey: tgt,
                len: 0,
                plt: 1,
                sel: 1,
            },
            vec![],
        ))
        .unwrap();
    h.run();
    let s = h.a.cq(CqSide::Send);
    assert_ok_in_order(&s, &[1, 2, 3, 4]);
    assert_eq!(s[0].opcode, WcOpcode::AtomicWrite);
    assert_eq!(s[2].opcode, WcOpcode::Flush);
    assert_eq!(
        &h.b.bytes(tgt)[0x10..0x20],
        &[1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 7, 6, 5, 4, 3, 2]
    );
    // Answers: READ RESPONSE ONLY with no payload, as rxe.
    for c in h.captured().iter().filter(|c| c.dir == Dir::BtoA) {
        let p = c.pkt();
        assert_eq!(p.opcode(), Opcode::RC_READ_RESPONSE_ONLY);
        assert!(p.payload.is_empty());
    }
    let req: Vec<Opcode> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| c.pkt().opcode())
        .collect();
    assert_eq!(
        req,
        vec![
            Opcode::RC_ATOMIC_WRITE,
            Opcode::RC_ATOMIC_WRITE,
            Opcode::RC_FLUSH,
            Opcode::RC_FLUSH
        ]
    );
    // FLUSH needs the MR's flush access.
    let nf = h.b.reg(0x9000, 64, access::REMOTE_WRITE, |_| 0);
    h.a.qp
        .post_send(wqe(
            5,
            SendOp::Flush {
                remote_addr: 0x9000,
                rkey: nf,
                len: 8,
                plt: 1,
                sel: 0,
            },
            vec![],
        ))
        .unwrap();
    h.run();
    assert_eq!(h.a.cq(CqSide::Send)[4].status, WcStatus::RemAccessErr);
}

#[test]
fn multi_megabyte_messages() {
    let mut h = setup(Mtu::M4096);
    const N: usize = 3 << 20;
    let a_src = h.a.reg(0x1000_0000, N, access::LOCAL_WRITE, pat(6));
    let a_dst = h.a.reg(0x2000_0000, N, access::LOCAL_WRITE, |_| 0);
    let b_mem = h.b.reg(0x3000_0000, N, ALL, pat(7));
    let b_rcv = h.b.reg(0x4000_0000, N, access::LOCAL_WRITE, |_| 0);
    h.b.qp
        .post_recv(recv(9, vec![sge(0x4000_0000, N as u32, b_rcv)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Send,
            vec![sge(0x1000_0000, N as u32, a_src)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::Read {
                remote_addr: 0x3000_0000,
                rkey: b_mem,
            },
            vec![sge(0x2000_0000, N as u32, a_dst)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            3,
            SendOp::Write {
                remote_addr: 0x3000_0000,
                rkey: b_mem,
            },
            vec![sge(0x1000_0000, N as u32, a_src)],
        ))
        .unwrap();
    let orig_b = h.b.bytes(b_mem).to_vec();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2, 3]);
    assert_eq!(h.b.bytes(b_rcv), h.a.bytes(a_src));
    assert_eq!(h.a.bytes(a_dst), &orig_b[..]);
    assert_eq!(h.b.bytes(b_mem), h.a.bytes(a_src));
    assert_eq!(h.a.qp.counters().retransmitted_pkts, 0);
    check_requests(&h, 4096);
}

#[test]
fn ack_req_interval_and_coalescing() {
    let mut h = setup(Mtu::M256);
    let src = h.a.reg(0x1000, 1 << 16, 0, pat(8));
    let dst = h.b.reg(0x1000, 1 << 16, access::REMOTE_WRITE, |_| 0);
    // 256 packets in one WRITE.
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 1 << 16, src)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1]);
    let reqs: Vec<_> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| c.pkt().hdr.bth)
        .collect();
    assert_eq!(reqs.len(), 256);
    let mut since = 0;
    for b in &reqs {
        since += 1;
        assert!(since <= 64, "AckReq at least every 64 packets");
        if b.ack_req {
            since = 0;
        }
    }
    // The responder ACKs only what asked, and coalesces: never more ACKs
    // than AckReq packets.
    let acks = h.captured().iter().filter(|c| c.dir == Dir::BtoA).count();
    let asked = reqs.iter().filter(|b| b.ack_req).count();
    assert!(
        acks <= asked && acks >= 1,
        "{acks} ACKs for {asked} AckReqs"
    );
    let last = h
        .captured()
        .iter()
        .rfind(|c| c.dir == Dir::BtoA)
        .unwrap()
        .pkt();
    assert_eq!(
        last.hdr.bth.psn,
        reqs.last().unwrap().psn,
        "final ACK covers the last PSN"
    );
}

#[test]
fn msn_counts_messages() {
    let mut h = setup(Mtu::M256);
    h.burst = 1;
    let src = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, pat(9));
    let dst = h.b.reg(0x1000, 4096, ALL, |_| 0);
    for i in 0..3 {
        h.b.qp
            .post_recv(recv(i, vec![sge(0x1000, 4096, dst)]))
            .unwrap();
    }
    // SEND (3 pkts), READ, WRITE, atomic: MSN 1, 2, 3, 4.
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 600, src)]))
        .unwrap();
    h.run();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::Read {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 600, src)],
        ))
        .unwrap();
    h.run();
    h.a.qp
        .post_send(wqe(
            3,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 10, src)],
        ))
        .unwrap();
    h.run();
    h.a.qp
        .post_send(wqe(
            4,
            SendOp::FetchAdd {
                remote_addr: 0x1008,
                rkey: dst,
                add: 1,
            },
            vec![sge(0x1000, 8, src)],
        ))
        .unwrap();
    h.run();
    let msns: Vec<u32> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::BtoA)
        .filter_map(|c| c.pkt().hdr.aeth)
        .map(|a| a.msn)
        .collect();
    assert_eq!(msns.first(), Some(&1), "{msns:?}");
    assert_eq!(msns.last(), Some(&4));
    assert!(msns.windows(2).all(|w| w[0] <= w[1]));
    // Every AETH is an ACK with B's credits: the two receives left after
    // the SEND (code 2), in the READ response and atomic ACK as well.
    for c in h.captured().iter().filter(|c| c.dir == Dir::BtoA) {
        if let Some(a) = c.pkt().hdr.aeth {
            assert_eq!(a.kind(), AethKind::Ack { credit: 2 });
        }
    }
}

#[test]
fn psn_wraps_around() {
    let mut h = Harness::new(&Setup {
        mtu: Mtu::M256,
        psn_a: Psn::MASK - 5,
        psn_b: Psn::MASK - 1,
        ..Setup::default()
    });
    let src = h.a.reg(0x1000, 8192, ALL, pat(10));
    let dst = h.b.reg(0x1000, 8192, ALL, pat(11));
    h.b.qp
        .post_recv(recv(1, vec![sge(0x1000, 8192, dst)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 3000, src)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::Read {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 3000, src)],
        ))
        .unwrap();
    h.b.qp
        .post_send(wqe(
            3,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: src,
            },
            vec![sge(0x1000, 3000, dst)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2]);
    assert_ok_in_order(&h.b.cq(CqSide::Send), &[3]);
}

#[test]
fn unsignaled_and_sq_sig_all() {
    let mut h = Harness::new(&Setup {
        sq_sig_all: false,
        ..Setup::default()
    });
    let src = h.a.reg(0x1000, 64, 0, pat(12));
    let dst = h.b.reg(0x1000, 64, access::REMOTE_WRITE, |_| 0);
    for i in 0..6u64 {
        let mut w = wqe(
            i,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 64, src)],
        );
        if i % 3 != 2 {
            w.flags = 0;
        }
        h.a.qp.post_send(w).unwrap();
    }
    // An unsignaled WQE that fails is still reported.
    let mut bad = wqe(
        6,
        SendOp::Write {
            remote_addr: 0x1000,
            rkey: dst ^ 1,
        },
        vec![sge(0x1000, 64, src)],
    );
    bad.flags = 0;
    h.a.qp.post_send(bad).unwrap();
    h.run();
    let s = h.a.cq(CqSide::Send);
    let got: Vec<(u64, WcStatus)> = s.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![
            (2, WcStatus::Success),
            (5, WcStatus::Success),
            (6, WcStatus::RemAccessErr)
        ]
    );
}

#[test]
fn sge_lists_and_inline() {
    let mut h = setup(Mtu::M256);
    let a = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, pat(13));
    let b = h.b.reg(0x1000, 4096, ALL, |_| 0);
    let sges = vec![
        sge(0x1000, 100, a),
        sge(0x2000, 0, a),
        sge(0x1200, 300, a),
        sge(0x1800, 7, a),
    ];
    h.b.qp
        .post_recv(recv(
            1,
            vec![sge(0x1000, 5, b), sge(0x1100, 250, b), sge(0x1400, 1000, b)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(1, SendOp::Send, sges.clone()))
        .unwrap();
    let mut w = wqe(
        2,
        SendOp::Write {
            remote_addr: 0x1800,
            rkey: b,
        },
        vec![],
    );
    w.payload = Payload::Inline(b"inline data".to_vec());
    h.a.qp.post_send(w).unwrap();
    // READ scattered into several local SGEs.
    h.a.qp
        .post_send(wqe(
            3,
            SendOp::Read {
                remote_addr: 0x1000,
                rkey: b,
            },
            vec![sge(0x1900, 3, a), sge(0x1a00, 600, a)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2, 3]);
    let src: Vec<u8> = {
        let d = h.a.bytes(a);
        [&d[0..100], &d[0x200..0x200 + 300], &d[0x800..0x807]].concat()
    };
    let d = h.b.bytes(b).to_vec();
    let got: Vec<u8> = [&d[0..5], &d[0x100..0x100 + 250], &d[0x400..0x400 + 152]].concat();
    assert_eq!(got, src);
    assert_eq!(&d[0x800..0x80b], b"inline data");
    let ad = h.a.bytes(a);
    assert_eq!(&ad[0x900..0x903], &d[0..3]);
    assert_eq!(&ad[0xa00..0xa00 + 600], &d[3..603]);
}

#[test]
fn rc_over_ipv6() {
    let mut h = Harness::new(&Setup {
        v6: true,
        ..Setup::default()
    });
    let a = h.a.reg(0x1000, 8192, access::LOCAL_WRITE, pat(14));
    let b = h.b.reg(0x1000, 8192, ALL, pat(15));
    h.b.qp
        .post_recv(recv(1, vec![sge(0x1000, 8192, b)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 5000, a)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::Read {
                remote_addr: 0x1800,
                rkey: b,
            },
            vec![sge(0x1800, 100, a)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2]);
    assert_ok_in_order(&h.b.cq(CqSide::Recv), &[1]);
    assert_eq!(h.b.qp.counters().dropped_pkts, 0);
}

#[test]
fn responder_back_pressure_drops_and_recovers() {
    let mut h = Harness::new(&Setup {
        timeout: 8,
        ..Setup::default()
    });
    h.b.qp.set_tuning(QpTuning {
        max_pending_responses: 2,
        ..QpTuning::default()
    });
    let a = h.a.reg(0x1000, 8192, access::LOCAL_WRITE, |_| 0);
    let b = h.b.reg(0x1000, 8192, ALL, pat(16));
    for i in 0..6u64 {
        h.a.qp
            .post_send(wqe(
                i,
                SendOp::Read {
                    remote_addr: 0x1000 + i * 512,
                    rkey: b,
                },
                vec![sge(0x1000 + i * 512, 512, a)],
            ))
            .unwrap();
    }
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &(0..6).collect::<Vec<_>>());
    assert_eq!(&h.a.bytes(a)[..3072], &h.b.bytes(b)[..3072]);
    assert!(h.b.qp.counters().dropped_pkts > 0);
}

/// The solicited-event bit: set on the last packet of a SEND or
/// WRITE_WITH_IMM posted with IBV_SEND_SOLICITED (only there), and the
/// responder's receive completion says so (what wakes a CQ armed for
/// solicited completions); a message without it, and every send
/// completion, is not solicited.
#[test]
fn solicited_bit_reaches_the_receive_completion() {
    let mut h = setup(Mtu::M256);
    let src = h.a.reg(0x1000, 1000, 0, pat(3));
    let dst = h.b.reg(
        0x8000,
        4096,
        access::LOCAL_WRITE | access::REMOTE_WRITE,
        |_| 0,
    );
    for i in 0..3 {
        h.b.qp
            .post_recv(recv(10 + i, vec![sge(0x8000 + i * 1024, 1024, dst)]))
            .unwrap();
    }
    let solicited = |mut w: SendWqe| {
        w.flags |= send_flags::SOLICITED;
        w
    };
    h.a.qp
        .post_send(solicited(wqe(1, SendOp::Send, vec![sge(0x1000, 600, src)])))
        .unwrap();
    h.a.qp
        .post_send(wqe(2, SendOp::Send, vec![sge(0x1000, 600, src)]))
        .unwrap();
    h.a.qp
        .post_send(solicited(wqe(
            3,
            SendOp::WriteImm {
                remote_addr: 0x8000 + 3 * 1024,
                rkey: dst,
                imm: 9,
            },
            vec![sge(0x1000, 300, src)],
        )))
        .unwrap();
    h.run();
    let s = h.a.cq(CqSide::Send);
    assert_ok_in_order(&s, &[1, 2, 3]);
    assert!(s.iter().all(|c| !c.solicited), "send completions never are");
    let r = h.b.cq(CqSide::Recv);
    let got: Vec<(u64, WcOpcode, bool)> =
        r.iter().map(|c| (c.wr_id, c.opcode, c.solicited)).collect();
    assert_eq!(
        got,
        [
            (10, WcOpcode::Recv, true),
            (11, WcOpcode::Recv, false),
            (12, WcOpcode::RecvRdmaWithImm, true)
        ]
    );
    // On the wire: SE on the last packets of messages 1 and 3 only.
    let se: Vec<(Opcode, bool)> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| (c.pkt().opcode(), c.pkt().hdr.bth.se))
        .collect();
    assert_eq!(
        se,
        [
            (Opcode::RC_SEND_FIRST, false),
            (Opcode::RC_SEND_MIDDLE, false),
            (Opcode::RC_SEND_LAST, true),
            (Opcode::RC_SEND_FIRST, false),
            (Opcode::RC_SEND_MIDDLE, false),
            (Opcode::RC_SEND_LAST, false),
            (Opcode::RC_WRITE_FIRST, false),
            (Opcode::RC_WRITE_LAST_IMM, true),
        ]
    );
}
