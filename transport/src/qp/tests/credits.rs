//! End-to-end credits (IBA 9.7.7.2): what the responder promises in its
//! ACKs, the requester holding SENDs beyond the promise, the unsolicited
//! ACK when receives come, and the probe when they do not.

use super::harness::*;
use crate::qp::*;
use crate::wire::{credit, AethKind};
use std::time::Duration;

/// The credit codes of B's plain ACKs, in order.
fn ack_credits(h: &Harness) -> Vec<u8> {
    h.captured()
        .iter()
        .filter(|c| c.dir == Dir::BtoA)
        .filter_map(|c| match c.pkt().hdr.aeth?.kind() {
            AethKind::Ack { credit } => Some(credit),
            _ => None,
        })
        .collect()
}

/// A->B packets captured so far.
fn requests(h: &Harness) -> usize {
    h.captured().iter().filter(|c| c.dir == Dir::AtoB).count()
}

/// When the A->B packets after the first `before` went.
fn request_times_since(h: &Harness, before: usize) -> Vec<std::time::Instant> {
    h.captured()
        .iter()
        .filter(|c| c.dir == Dir::AtoB)
        .skip(before)
        .map(|c| c.at)
        .collect()
}

/// A side pair where B holds `recvs` receives of 64 bytes and A one
/// 64-byte source; returns (harness, A's source key, B's buffer key).
fn setup(s: &Setup, recvs: u64) -> (Harness, u32, u32) {
    let mut h = Harness::new(s);
    h.capture_on();
    let src = h.a.reg(0x1000, 64, 0, pat(31));
    let dst = h.b.reg(0x1000, 64 * 64, access::LOCAL_WRITE, |_| 0);
    for i in 0..recvs {
        post_recv_b(&mut h, 100 + i, dst);
    }
    (h, src, dst)
}

fn post_recv_b(h: &mut Harness, id: u64, dst: u32) {
    let i = id % 64;
    h.b.qp
        .post_recv(recv(id, vec![sge(0x1000 + i * 64, 64, dst)]))
        .unwrap();
}

fn send(h: &mut Harness, id: u64, src: u32) {
    h.a.qp
        .post_send(wqe(id, SendOp::Send, vec![sge(0x1000, 64, src)]))
        .unwrap();
}

#[test]
fn acks_carry_the_receive_queue_count() {
    let (mut h, src, _) = setup(&Setup::default(), 10);
    for id in 1..=3 {
        send(&mut h, id, src);
        h.run();
    }
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2, 3]);
    // 9, 8 and 7 receives left: codes 6 (8), 6 (8) and 5 (6).
    assert_eq!(ack_credits(&h), vec![6, 6, 5]);
    assert_eq!(credit::decode(5), Some(6));
}

#[test]
fn a_responder_with_an_srq_promises_nothing() {
    let mut h = Harness::new(&Setup {
        srq_b: true,
        ..Setup::default()
    });
    h.capture_on();
    let src = h.a.reg(0x1000, 64, 0, pat(32));
    let dst = h.b.reg(0x1000, 64, access::LOCAL_WRITE, |_| 0);
    if let Some(s) = h.b.srq.as_mut() {
        s.0.push_back(recv(7, vec![sge(0x1000, 64, dst)]));
    }
    send(&mut h, 1, src);
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1]);
    assert_eq!(ack_credits(&h), vec![credit::INVALID]);
}

/// Credits run out against a responder not known to send updates: one
/// SEND goes beyond them at once (as rdmavt sends it), meets the RNR
/// NAK, and the rest follow once receives are there.
#[test]
fn one_send_goes_beyond_the_credits() {
    let (mut h, src, dst) = setup(&Setup::default(), 1);
    send(&mut h, 1, src);
    assert!(h.run_until(|h| h.a.cq(CqSide::Send).len() == 1));
    assert_eq!(ack_credits(&h), vec![0]);
    let acked = h.now;
    let before = requests(&h);
    send(&mut h, 2, src);
    send(&mut h, 3, src);
    assert!(h.run_until(|h| h.a.qp.counters().rcvd_rnr_err == 1));
    let sent = request_times_since(&h, before);
    assert_eq!(sent, vec![acked], "one SEND, at once");
    assert_eq!(h.a.qp.counters().credit_probes, 1);
    post_recv_b(&mut h, 200, dst);
    post_recv_b(&mut h, 201, dst);
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2, 3]);
    assert_ok_in_order(&h.b.cq(CqSide::Recv), &[100, 200, 201]);
    // B announced the receives unasked (A was waiting out the RNR NAK).
    assert_eq!(h.b.qp.counters().credit_updates, 1);
    assert!(h.a.qp.sq.peer_updates);
}

/// A pair where A has seen B send a credit update and is out of credits
/// with nothing outstanding (as `one_send_goes_beyond_the_credits` ends).
fn taught() -> (Harness, u32, u32) {
    let (mut h, src, dst) = setup(&Setup::default(), 1);
    send(&mut h, 1, src);
    send(&mut h, 2, src);
    assert!(h.run_until(|h| h.a.qp.counters().rcvd_rnr_err == 1));
    post_recv_b(&mut h, 200, dst);
    // Not to quiet: that would run the clock past the probe delay.
    assert!(h.run_until(|h| h.a.cq(CqSide::Send).len() == 2));
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2]);
    assert!(h.a.qp.sq.peer_updates);
    assert_eq!(h.a.qp.sq.credits, Some(0));
    (h, src, dst)
}

/// Against a responder that sends updates, A holds its SENDs (no packet,
/// no RNR NAK) until B posts receives and says so.
#[test]
fn sends_wait_for_an_update_from_a_peer_that_sends_them() {
    let (mut h, src, dst) = taught();
    let before = requests(&h);
    let rnr_before = h.b.qp.counters().send_rnr_err;
    send(&mut h, 3, src);
    send(&mut h, 4, src);
    // Nothing to send until the probe delay has passed (a step now
    // would jump the clock to it).
    let waited = h.now;
    assert!(!h.a.qp.has_transmit(), "a SEND may go beyond the credits");
    let probe_at = h.a.qp.poll_timeout().expect("the probe deadline");
    assert!(probe_at - waited >= Duration::from_micros(500));
    post_recv_b(&mut h, 201, dst);
    assert!(h.b.qp.has_transmit(), "no credit update queued");
    post_recv_b(&mut h, 202, dst);
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2, 3, 4]);
    assert_ok_in_order(&h.b.cq(CqSide::Recv), &[100, 200, 201, 202]);
    assert_eq!(h.b.qp.counters().send_rnr_err, rnr_before);
    // Both SENDs left right after the update, not after a timer.
    let after = request_times_since(&h, before);
    assert_eq!(after, vec![waited, waited]);
}

/// No update comes: after the probe delay one SEND goes, meets the RNR
/// NAK, and the message completes once a receive is there.
#[test]
fn without_an_update_one_send_probes_after_the_delay() {
    let (mut h, src, dst) = taught();
    let idle = h.now;
    let probes = h.a.qp.counters().credit_probes;
    let before = requests(&h);
    send(&mut h, 3, src);
    send(&mut h, 4, src);
    assert!(h.run_until(|h| h.a.qp.counters().rcvd_rnr_err == 2));
    let sent = request_times_since(&h, before);
    assert_eq!(sent.len(), 1, "only the probe went");
    assert!(sent[0] - idle >= Duration::from_micros(500));
    assert_eq!(h.a.qp.counters().credit_probes, probes + 1);
    post_recv_b(&mut h, 201, dst);
    post_recv_b(&mut h, 202, dst);
    h.run();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &[1, 2, 3, 4]);
    assert_ok_in_order(&h.b.cq(CqSide::Recv), &[100, 200, 201, 202]);
}

/// Credits limit SENDs only: WRITEs and READs go on with none left.
#[test]
fn writes_need_no_credit() {
    let (mut h, src, _) = setup(&Setup::default(), 1);
    let dst = h.b.reg(0x9000, 64, access::REMOTE_WRITE, |_| 0);
    send(&mut h, 1, src);
    assert!(h.run_until(|h| h.a.cq(CqSide::Send).len() == 1));
    for id in 2..=4 {
        h.a.qp
            .post_send(wqe(
                id,
                SendOp::Write {
                    remote_addr: 0x9000,
                    rkey: dst,
                },
                vec![sge(0x1000, 64, src)],
            ))
            .unwrap();
    }
    assert!(h.run_until(|h| h.a.cq(CqSide::Send).len() == 4));
    assert!(h.elapsed() < Duration::from_micros(500));
    assert_eq!(h.a.qp.counters().credit_probes, 0);
    assert_eq!(h.b.bytes(dst), h.a.bytes(src));
}

/// Many SENDs through a small receive queue the responder refills as
/// receives complete, with loss: every message arrives once, in order.
#[test]
fn exactly_once_through_a_small_queue_with_loss() {
    let (mut h, src, dst) = setup(&Setup::default(), 4);
    h.faults.loss = 50_000;
    let n = 300u64;
    for id in 1..=n {
        send(&mut h, id, src);
    }
    let mut next_recv = 104u64;
    for _ in 0..200_000 {
        let done = h.b.cq(CqSide::Recv).len() as u64;
        // Keep four receives posted, as an application re-posting does.
        while next_recv < 100 + n && next_recv - 100 < done + 4 {
            post_recv_b(&mut h, next_recv, dst);
            next_recv += 1;
        }
        if !h.step() || h.a.cq(CqSide::Send).len() as u64 == n {
            break;
        }
    }
    let ids: Vec<u64> = (1..=n).collect();
    assert_ok_in_order(&h.a.cq(CqSide::Send), &ids);
    let rids: Vec<u64> = (100..100 + n).collect();
    assert_ok_in_order(&h.b.cq(CqSide::Recv), &rids);
}
