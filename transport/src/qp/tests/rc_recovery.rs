//! RC recovery: go-back-N, duplicates, reordering, READ replay, atomic
//! replay, RNR, timeouts, window and initiator depth.

use super::harness::*;
use crate::qp::*;
use crate::wire::packet::emit_packet;
use crate::wire::{Aeth, AethKind, Headers, NakCode, Opcode, MAX_PACKET};
use crate::Psn;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

const ALL: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

fn is_nak_seq(c: &Captured) -> bool {
    c.pkt()
        .hdr
        .aeth
        .is_some_and(|a| a.kind() == AethKind::Nak(NakCode::PsnSequence))
}

/// Drops the first transmission of A->B packets whose PSN satisfies `f`.
fn drop_first_tx(f: impl Fn(Psn) -> bool + 'static) -> Filter {
    let mut seen = std::collections::HashSet::new();
    Box::new(move |d, p| {
        if d == Dir::AtoB && f(p.hdr.bth.psn) && seen.insert(p.hdr.bth.psn.value()) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    })
}

fn write_setup(len: usize) -> (Harness, u32, u32) {
    let mut h = Harness::new(&Setup {
        mtu: Mtu::M256,
        ..Setup::default()
    });
    h.capture_on();
    let src = h.a.reg(0x1000, len, 0, pat(20));
    let dst = h.b.reg(0x1000, len, access::REMOTE_WRITE, |_| 0);
    (h, src, dst)
}

#[test]
fn go_back_n_after_a_lost_packet() {
    let (mut h, src, dst) = write_setup(40 * 256);
    h.filter = Some(drop_first_tx(|p| p == Psn::new(103)));
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 40 * 256, src)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1]);
    assert_eq!(h.b.bytes(dst), h.a.bytes(src));
    // One sequence NAK (sent once until the expected PSN came), naming 103.
    let naks: Vec<_> = h.captured().iter().filter(|c| is_nak_seq(c)).collect();
    assert_eq!(naks.len(), 1);
    assert_eq!(naks[0].pkt().hdr.bth.psn, Psn::new(103));
    // The resend starts at the NAKed PSN, as a MIDDLE packet.
    let a: Vec<_> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| c.pkt().hdr.bth)
        .collect();
    let first_re = a.iter().position(|b| b.psn == Psn::new(103)).unwrap();
    let second = a
        .iter()
        .skip(first_re + 1)
        .position(|b| b.psn == Psn::new(103))
        .unwrap();
    assert_eq!(a[first_re + 1 + second].opcode, Opcode::RC_WRITE_MIDDLE);
    let ca = h.a.qp.counters();
    let cb = h.b.qp.counters();
    assert_eq!(ca.rcvd_seq_err, 1);
    assert_eq!(ca.completer_retry_err, 1);
    assert!(ca.retransmitted_pkts >= 1);
    assert!(cb.out_of_seq_request >= 1);
    assert_eq!(ca.local_ack_timeout_err, 0);
}

#[test]
fn tail_loss_recovered_by_ack_timeout() {
    let (mut h, src, dst) = write_setup(10 * 256);
    // Lose the last packet: no later packet triggers a NAK.
    h.filter = Some(drop_first_tx(|p| p == Psn::new(109)));
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 10 * 256, src)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1]);
    assert_eq!(h.b.bytes(dst), h.a.bytes(src));
    let t = timers::ack_timeout(14).unwrap();
    assert!(h.elapsed() >= t && h.elapsed() < 2 * t, "{:?}", h.elapsed());
    assert_eq!(h.a.qp.counters().local_ack_timeout_err, 1);
}

#[test]
fn partially_acked_write_resumes_at_first_unacked_packet() {
    let (mut h, src, dst) = write_setup(100 * 256);
    // AckReq at packet 64 gets through; everything from PSN 100+70 on is
    // lost the first time, so only the timer can recover.
    h.filter = Some(drop_first_tx(|p| p.diff(Psn::new(170)) >= 0));
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 100 * 256, src)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1]);
    assert_eq!(h.b.bytes(dst), h.a.bytes(src));
    let a: Vec<_> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| c.pkt().hdr.bth)
        .collect();
    // After the timeout one packet probes (164, a duplicate B re-ACKs up
    // to 169), then the window doubles per ACK over 170..199.
    assert_eq!(
        a.len(),
        100 + 1 + 30,
        "resent from the first unacked PSN only"
    );
    let resent = a[100];
    assert_eq!(
        resent.psn,
        Psn::new(164),
        "first packet after the ACKed one"
    );
    assert_eq!(resent.opcode, Opcode::RC_WRITE_MIDDLE);
}

#[test]
fn lost_acks_give_duplicates_that_are_reacked() {
    let (mut h, src, dst) = write_setup(4 * 256);
    let drops = Rc::new(Cell::new(0));
    let d2 = drops.clone();
    h.filter = Some(Box::new(move |d, _| {
        if d == Dir::BtoA && d2.get() < 1 {
            d2.set(d2.get() + 1);
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 4 * 256, src)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1]);
    // The timeout resends one packet (slow start); its re-ACK covers all.
    assert_eq!(h.b.qp.counters().duplicate_request, 1);
    // Re-ACKs name the last PSN already acknowledged (expected - 1).
    let acks: Vec<Psn> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::BtoA)
        .map(|c| c.pkt().hdr.bth.psn)
        .collect();
    assert!(acks.iter().all(|&p| p == Psn::new(103)), "{acks:?}");
}

#[test]
fn read_replay_from_the_middle() {
    let mut h = Harness::new(&Setup {
        mtu: Mtu::M512,
        ..Setup::default()
    });
    h.capture_on();
    const N: usize = 10 * 512 - 100;
    let src = h.b.reg(0x8000, N, access::REMOTE_READ, pat(21));
    let dst = h.a.reg(0x1000, N, access::LOCAL_WRITE, |_| 0);
    // Lose the 4th READ response (PSN 103) the first time.
    let lost = Rc::new(Cell::new(false));
    let l2 = lost.clone();
    h.filter = Some(Box::new(move |d, p| {
        if d == Dir::BtoA && p.hdr.bth.psn == Psn::new(103) && !l2.get() {
            l2.set(true);
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Read {
                remote_addr: 0x8000,
                rkey: src,
            },
            vec![sge(0x1000, N as u32, dst)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::Read {
                remote_addr: 0x8000,
                rkey: src,
            },
            vec![sge(0x1000, 8, dst)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2]);
    assert_eq!(h.a.bytes(dst), h.b.bytes(src));
    let reqs: Vec<_> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| c.pkt().hdr)
        .collect();
    // Original, the second READ, then the re-issue for what was missing.
    let reissue = reqs
        .iter()
        .find(|r| r.bth.psn == Psn::new(103))
        .expect("re-issued READ");
    let reth = reissue.reth.unwrap();
    assert_eq!(reth.va, 0x8000 + 3 * 512);
    assert_eq!(reth.dma_len as usize, N - 3 * 512);
    assert_eq!(reth.rkey, src);
    // The responder replayed from that PSN.
    let resp: Vec<_> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::BtoA)
        .map(|c| c.pkt().hdr.bth)
        .collect();
    let replay = resp.iter().filter(|b| b.psn == Psn::new(103)).count();
    assert_eq!(replay, 2, "PSN 103 answered twice (lost, replayed)");
    assert!(h.b.qp.counters().duplicate_request >= 1);
    assert_eq!(h.a.qp.counters().completer_retry_err, 1);
}

#[test]
fn read_replay_after_timeout_of_last_response() {
    let mut h = Harness::rc();
    h.capture_on();
    let src = h.b.reg(0x8000, 3000, access::REMOTE_READ, pat(22));
    let dst = h.a.reg(0x1000, 3000, access::LOCAL_WRITE, |_| 0);
    h.filter = Some(Box::new({
        let mut once = true;
        move |d, p| {
            if d == Dir::BtoA && p.opcode() == Opcode::RC_READ_RESPONSE_LAST && once {
                once = false;
                Fate::Drop
            } else {
                Fate::Deliver
            }
        }
    }));
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Read {
                remote_addr: 0x8000,
                rkey: src,
            },
            vec![sge(0x1000, 3000, dst)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1]);
    assert_eq!(h.a.bytes(dst), h.b.bytes(src));
    let last_req = h
        .captured()
        .iter()
        .rfind(|c| c.dir == Dir::AtoB)
        .unwrap()
        .pkt();
    assert_eq!(last_req.hdr.bth.psn, Psn::new(102));
    assert_eq!(last_req.hdr.reth.unwrap().dma_len, 3000 - 2048);
    assert_eq!(h.a.qp.counters().local_ack_timeout_err, 1);
}

#[test]
fn atomic_replay_answers_from_saved_value() {
    let mut h = Harness::rc();
    h.capture_on();
    let tgt = h.b.reg(0x7000, 8, access::REMOTE_ATOMIC, |_| 0);
    h.b.mem
        .region_mut(tgt)
        .unwrap()
        .data
        .copy_from_slice(&40u64.to_ne_bytes());
    let res = h.a.reg(0x100, 16, access::LOCAL_WRITE, |_| 0);
    // Lose the atomic ACK the first time: the requester resends.
    h.filter = Some(Box::new({
        let mut once = true;
        move |d, p| {
            if d == Dir::BtoA && p.opcode() == Opcode::RC_ATOMIC_ACK && once {
                once = false;
                Fate::Drop
            } else {
                Fate::Deliver
            }
        }
    }));
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::FetchAdd {
                remote_addr: 0x7000,
                rkey: tgt,
                add: 2,
            },
            vec![sge(0x100, 8, res)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::CmpSwap {
                remote_addr: 0x7000,
                rkey: tgt,
                compare: 42,
                swap: 1,
            },
            vec![sge(0x108, 8, res)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2]);
    let word = |d: &[u8], o: usize| u64::from_ne_bytes(d[o..o + 8].try_into().unwrap());
    // Executed once: 40 + 2, then swapped.
    assert_eq!(word(h.a.bytes(res), 0), 40);
    assert_eq!(word(h.a.bytes(res), 8), 42);
    assert_eq!(word(h.b.bytes(tgt), 0), 1);
    let acks: Vec<u64> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::BtoA)
        .filter_map(|c| c.pkt().hdr.atomic_ack)
        .map(|a| a.orig)
        .collect();
    // The lost ACK shows up as a gap at the CmpSwap's ACK: both are
    // resent and both duplicates are answered from the saved values.
    assert_eq!(
        acks,
        vec![40, 42, 40, 42],
        "duplicates answered from the saved values"
    );
    assert!(h.b.qp.counters().duplicate_request >= 1);
}

#[test]
fn rnr_backs_off_then_succeeds() {
    let mut h = Harness::new(&Setup {
        min_rnr_timer: 14,
        ..Setup::default()
    });
    h.capture_on();
    let src = h.a.reg(0x1000, 100, 0, pat(23));
    let dst = h.b.reg(0x1000, 100, access::LOCAL_WRITE, |_| 0);
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 100, src)]))
        .unwrap();
    // Three RNR NAKs, then a receive appears.
    assert!(h.run_until(|h| h.a.qp.counters().rcvd_rnr_err >= 3));
    h.b.qp
        .post_recv(recv(5, vec![sge(0x1000, 100, dst)]))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1]);
    assert_ok_in_order(&h.b.cq(CqSide::Recv), &[5]);
    assert_eq!(h.b.bytes(dst), h.a.bytes(src));
    let sends: Vec<_> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| c.at)
        .collect();
    assert!(sends.len() >= 4);
    let rnr = timers::rnr_timeout(14);
    for w in sends.windows(2) {
        assert!(w[1] - w[0] >= rnr, "no retry before the RNR timer fired");
    }
    let naks: Vec<_> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::BtoA)
        .filter_map(|c| c.pkt().hdr.aeth)
        .collect();
    assert_eq!(naks[0].kind(), AethKind::RnrNak { timer: 14 });
    assert_eq!(h.b.qp.counters().send_rnr_err, 3);
    assert_eq!(h.a.qp.counters().local_ack_timeout_err, 0);
}

#[test]
fn rnr_retry_zero_fails() {
    let mut h = Harness::new(&Setup {
        rnr_retry: 0,
        ..Setup::default()
    });
    let src = h.a.reg(0x1000, 100, 0, pat(24));
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 100, src)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(2, SendOp::Send, vec![sge(0x1000, 100, src)]))
        .unwrap();
    h.run();
    let s = h.a.cq(CqSide::Send);
    let st: Vec<_> = s.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        st,
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(h.a.qp.state(), QpState::Err);
    assert_eq!(h.a.qp.counters().rnr_nak_retry_err, 1);
    assert!(h.a.events.contains(&QpEvent::Fatal));
}

#[test]
fn rnr_retry_limited_then_exhausted() {
    let mut h = Harness::new(&Setup {
        rnr_retry: 3,
        min_rnr_timer: 1,
        ..Setup::default()
    });
    let src = h.a.reg(0x1000, 100, 0, pat(25));
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 100, src)]))
        .unwrap();
    h.run();
    assert_eq!(h.a.cq(CqSide::Send)[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(h.a.qp.counters().rcvd_rnr_err, 4);
}

#[test]
fn dead_peer_retry_exceeded_then_flush() {
    let mut h = Harness::new(&Setup {
        timeout: 10,
        retry_cnt: 3,
        ..Setup::default()
    });
    h.cut_a_to_b = true;
    let src = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, pat(26));
    let dst = h.b.reg(0x1000, 4096, ALL, |_| 0);
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 4096, src)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::Read {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 100, src)],
        ))
        .unwrap();
    let mut unsig = wqe(3, SendOp::Send, vec![sge(0x1000, 10, src)]);
    unsig.flags = 0;
    h.a.qp.post_send(unsig).unwrap();
    h.a.qp.post_recv(recv(9, vec![])).unwrap();
    h.run();
    let t = timers::ack_timeout(10).unwrap();
    let e = h.elapsed();
    assert!(
        e >= 4 * t && e < 4 * t + Duration::from_millis(1),
        "{e:?} vs 4 x {t:?}"
    );
    let st: Vec<_> = h.a.cqes.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        st,
        vec![
            (1, WcStatus::RetryExcErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr),
            (9, WcStatus::WrFlushErr)
        ]
    );
    let c = h.a.qp.counters();
    assert_eq!(
        (
            c.retry_exceeded_err,
            c.completer_retry_err,
            c.local_ack_timeout_err
        ),
        (1, 3, 4)
    );
    assert_eq!(h.a.qp.state(), QpState::Err);
    // Nothing is sent in ERR and no timer stays armed.
    assert!(!h.a.qp.has_transmit());
    assert_eq!(h.a.qp.poll_timeout(), None);
}

#[test]
fn infinite_timeout_never_fires() {
    let mut h = Harness::new(&Setup {
        timeout: 0,
        ..Setup::default()
    });
    h.cut_a_to_b = true;
    let src = h.a.reg(0x1000, 64, 0, pat(27));
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 64, src)]))
        .unwrap();
    h.run();
    assert!(h.a.cqes.is_empty());
    assert_eq!(h.a.qp.poll_timeout(), None);
    assert_eq!(h.a.qp.state(), QpState::Rts);
}

#[test]
fn window_limits_unacked_psns() {
    let (mut h, src, dst) = write_setup(100 * 256);
    h.a.qp.set_tuning(QpTuning {
        max_unacked_psns: 16,
        ack_req_interval: 8,
        ..QpTuning::default()
    });
    h.cut_b_to_a = true;
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: dst,
            },
            vec![sge(0x1000, 100 * 256, src)],
        ))
        .unwrap();
    for _ in 0..10 {
        h.step();
    }
    let sent: Vec<_> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| c.pkt().hdr.bth)
        .collect();
    let distinct: std::collections::HashSet<u32> = sent.iter().map(|b| b.psn.value()).collect();
    assert_eq!(distinct.len(), 16);
    assert!(
        sent[15].ack_req,
        "the packet that fills the window asks for an ACK"
    );
    assert!(sent[7].ack_req);
    h.cut_b_to_a = false;
    let healed = h.captured().len();
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1]);
    assert_eq!(h.b.bytes(dst), h.a.bytes(src));
    let most_ahead = {
        // Never more than 16 PSNs past the last ACK delivered.
        let mut acked = Psn::new(99);
        let mut worst = 0;
        for c in &h.captured()[healed..] {
            let b = c.pkt().hdr.bth;
            match c.dir {
                Dir::BtoA => acked = b.psn,
                Dir::AtoB => worst = worst.max(b.psn.distance_from(acked)),
            }
        }
        worst
    };
    assert!(most_ahead <= 16, "{most_ahead}");
}

#[test]
fn initiator_depth_and_fence() {
    let mut h = Harness::new(&Setup {
        max_rd_atomic: 2,
        ..Setup::default()
    });
    h.capture_on();
    let src = h.b.reg(0x8000, 4096, ALL, pat(28));
    let dst = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, |_| 0);
    for i in 0..4u64 {
        h.a.qp
            .post_send(wqe(
                i,
                SendOp::Read {
                    remote_addr: 0x8000,
                    rkey: src,
                },
                vec![sge(0x1000 + i * 8, 8, dst)],
            ))
            .unwrap();
    }
    let mut fenced = wqe(
        4,
        SendOp::Write {
            remote_addr: 0x8100,
            rkey: src,
        },
        vec![sge(0x1000, 8, dst)],
    );
    fenced.flags |= send_flags::FENCE;
    h.a.qp.post_send(fenced).unwrap();
    h.cut_b_to_a = true;
    for _ in 0..10 {
        h.step();
    }
    let reqs: std::collections::HashSet<u32> = h
        .captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .map(|c| c.pkt().hdr.bth.psn.value())
        .collect();
    assert_eq!(reqs.len(), 2, "two READs outstanding at most");
    h.cut_b_to_a = false;
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[0, 1, 2, 3, 4]);
    // The fenced WRITE went out only after every READ was answered.
    let cap = h.captured();
    let write_at = cap
        .iter()
        .position(|c| c.pkt().opcode() == Opcode::RC_WRITE_ONLY)
        .unwrap();
    let last_resp = cap
        .iter()
        .rposition(|c| c.pkt().opcode() == Opcode::RC_READ_RESPONSE_ONLY)
        .unwrap();
    assert!(write_at > last_resp);
}

fn ack_from_b(psn: Psn, aeth: Aeth, mig: bool) -> Vec<u8> {
    let mut hdr = Headers::default();
    hdr.bth.opcode = Opcode::RC_ACK;
    hdr.bth.dest_qpn = QPN_A;
    hdr.bth.psn = psn;
    hdr.bth.mig_req = mig;
    hdr.aeth = Some(aeth);
    let mut buf = vec![0u8; MAX_PACKET];
    let n = emit_packet(&hdr, &[], &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn credit_zero_acks_and_migreq_do_not_stall() {
    let mut h = Harness::rc();
    h.cut_a_to_b = true;
    let src = h.a.reg(0x1000, 64, 0, pat(29));
    for i in 0..3 {
        h.a.qp
            .post_send(wqe(i, SendOp::Send, vec![sge(0x1000, 8, src)]))
            .unwrap();
    }
    h.step();
    // ConnectX style: credit 0, MigReq set.
    h.inject(false, &ack_from_b(Psn::new(100), Aeth::ack(0, 1), true));
    h.inject(false, &ack_from_b(Psn::new(102), Aeth::ack(0, 3), true));
    assert_ok_in_order(&h.a.cqes, &[0, 1, 2]);
}

#[test]
fn rxe_remote_operational_nak_maps_to_rem_op_err() {
    let mut h = Harness::rc();
    h.cut_a_to_b = true;
    let src = h.a.reg(0x1000, 64, 0, pat(30));
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 8, src)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(2, SendOp::Send, vec![sge(0x1000, 8, src)]))
        .unwrap();
    h.step();
    h.inject(
        false,
        &ack_from_b(
            Psn::new(100),
            Aeth::nak(NakCode::RemoteOperational, 0),
            false,
        ),
    );
    let st: Vec<_> = h.a.cqes.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(1, WcStatus::RemOpErr), (2, WcStatus::WrFlushErr)]);
    // A NAK for the second WQE implicitly ACKs the first.
    let mut h = Harness::rc();
    h.cut_a_to_b = true;
    let src = h.a.reg(0x1000, 64, 0, pat(30));
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 8, src)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(2, SendOp::Send, vec![sge(0x1000, 8, src)]))
        .unwrap();
    h.step();
    h.inject(
        false,
        &ack_from_b(Psn::new(101), Aeth::nak(NakCode::InvalidRequest, 0), false),
    );
    let st: Vec<_> = h.a.cqes.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        st,
        vec![(1, WcStatus::Success), (2, WcStatus::RemInvReqErr)]
    );
}

#[test]
fn duplicates_and_reordering_tolerated() {
    for seed in 1..6 {
        let mut h = Harness::new(&Setup {
            mtu: Mtu::M256,
            ..Setup::default()
        });
        h.rng = Rng::new(seed);
        h.faults = Faults {
            loss: 0,
            dup: 100_000,
            reorder: 100_000,
        };
        let a = h.a.reg(0x1000, 1 << 16, access::LOCAL_WRITE, pat(31));
        let b = h.b.reg(0x1000, 1 << 16, ALL, pat(32));
        let orig_b = h.b.bytes(b).to_vec();
        for i in 0..8 {
            h.b.qp
                .post_recv(recv(i, vec![sge(0x1000 + i * 2048, 2048, b)]))
                .unwrap();
        }
        for i in 0..8u64 {
            h.a.qp
                .post_send(wqe(i, SendOp::Send, vec![sge(0x1000 + i * 100, 1500, a)]))
                .unwrap();
        }
        h.a.qp
            .post_send(wqe(
                8,
                SendOp::Read {
                    remote_addr: 0x8000,
                    rkey: b,
                },
                vec![sge(0x8000, 8000, a)],
            ))
            .unwrap();
        h.a.qp
            .post_send(wqe(
                9,
                SendOp::FetchAdd {
                    remote_addr: 0xF000,
                    rkey: b,
                    add: 1,
                },
                vec![sge(0xF000, 8, a)],
            ))
            .unwrap();
        h.run();
        assert_ok_in_order(&h.a.cq(CqSide::Send), &(0..10).collect::<Vec<_>>());
        assert_ok_in_order(&h.b.cq(CqSide::Recv), &(0..8).collect::<Vec<_>>());
        for i in 0..8usize {
            let o = i * 2048;
            assert_eq!(
                &h.b.bytes(b)[o..o + 1500],
                &h.a.bytes(a)[i * 100..i * 100 + 1500]
            );
        }
        assert_eq!(
            &h.a.bytes(a)[0x7000..0x7000 + 8000],
            &orig_b[0x7000..0x7000 + 8000]
        );
        let w = u64::from_ne_bytes(orig_b[0xE000..0xE008].try_into().unwrap());
        assert_eq!(
            u64::from_ne_bytes(h.b.bytes(b)[0xE000..0xE008].try_into().unwrap()),
            w + 1
        );
    }
}
