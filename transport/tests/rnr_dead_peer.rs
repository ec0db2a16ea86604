//! Receiver-not-ready and dead-peer behaviour over real UDP on loopback:
//! the RNR NAK timer paces the sender until a receive is posted; with
//! rnr_retry 0 the first RNR NAK fails the WQE; a peer that is not there
//! fails the WQE after (retry_cnt + 1) local ACK timeouts and flushes the
//! rest.

mod common;

use common::*;
use std::time::{Duration, Instant};
use transport::qp::{
    access, send_flags, Completion, Payload, QpState, QpType, RecvWqe, SendOp, SendWqe, Sge,
    WcStatus,
};

const VA: u64 = 0x1000_0000;
const LEN: usize = 1000;

fn send_wqe(wr_id: u64, key: u32) -> SendWqe {
    SendWqe {
        wr_id,
        op: SendOp::Send,
        flags: send_flags::SIGNALED,
        payload: Payload::Sges(vec![Sge {
            addr: VA,
            length: LEN as u32,
            lkey: key,
        }]),
        ud: None,
        xrc_srqn: None,
    }
}

/// Runs `e` until CQ `cq` holds `n` completions (or `limit` passes).
fn wait_completions(e: &mut Eng, cq: u32, n: usize, limit: Duration) -> Vec<(Completion, Instant)> {
    let d = Deadline::after(limit);
    let mut v = Vec::new();
    while v.len() < n {
        e.run_once(Some(Duration::from_millis(5)))
            .expect("run_once");
        let now = Instant::now();
        v.extend(e.poll_cq(cq, n).into_iter().map(|c| (c, now)));
        d.check(|| format!("{} of {n} completions: {v:?}", v.len()));
    }
    v
}

#[test]
fn rnr_nak_paces_the_sender_until_a_receive_is_posted() {
    let (a_ip, b_ip) = ("127.0.0.21", "127.0.0.22");
    // 5.12 ms RNR timer: about 20 RNR NAKs in the 100 ms without a receive.
    let conn = Conn {
        min_rnr_timer: 18,
        rnr_retry: 7,
        ..Conn::default()
    };
    const NO_RECV_FOR: Duration = Duration::from_millis(100);
    let (a, b) = pair(
        |link| {
            let mut e = engine(a_ip, |_| {});
            let key = e
                .memory_mut()
                .register(PD, VA, (0..LEN).map(|i| i as u8).collect(), 0);
            let qpn = e.create_qp(spec(QpType::Rc)).expect("qp");
            link.send(u64::from(qpn));
            let peer = link.recv() as u32;
            connect(&mut e, qpn, QpType::Rc, Some((peer, ip(b_ip))), &conn);
            link.recv(); // the responder is ready
            let t0 = Instant::now();
            e.post_send(qpn, send_wqe(1, key)).expect("post_send");
            let c = wait_completions(&mut e, SEND_CQ, 1, Duration::from_secs(10));
            (c[0].0, c[0].1 - t0, *e.qp(qpn).unwrap().counters())
        },
        |link| {
            let mut e = engine(b_ip, |_| {});
            let key = e
                .memory_mut()
                .register(PD, VA, vec![0; LEN], access::LOCAL_WRITE);
            let qpn = e.create_qp(spec(QpType::Rc)).expect("qp");
            let peer = link.recv() as u32;
            link.send(u64::from(qpn));
            connect(&mut e, qpn, QpType::Rc, Some((peer, ip(a_ip))), &conn);
            link.send(0);
            let t0 = Instant::now();
            while t0.elapsed() < NO_RECV_FOR {
                e.run_once(Some(Duration::from_millis(5)))
                    .expect("run_once");
            }
            let nak_sent = e.qp(qpn).unwrap().counters().send_rnr_err;
            let wqe = RecvWqe {
                wr_id: 7,
                sges: vec![Sge {
                    addr: VA,
                    length: LEN as u32,
                    lkey: key,
                }],
            };
            e.post_recv(qpn, wqe).expect("post_recv");
            let c = wait_completions(&mut e, RECV_CQ, 1, Duration::from_secs(10));
            while !link.stopped() {
                e.run_once(Some(Duration::from_millis(5)))
                    .expect("run_once");
            }
            let data = e.memory().region(key).unwrap().data.clone();
            (c[0].0, nak_sent, data)
        },
    );
    let (sc, elapsed, counters) = a;
    let (rc, nak_sent, data) = b;
    eprintln!("rnr: completed after {elapsed:?}; requester {counters:?}; responder sent {nak_sent} RNR NAKs before the receive");
    assert_eq!(sc.status, WcStatus::Success, "{sc:?}");
    assert_eq!(rc.status, WcStatus::Success, "{rc:?}");
    assert_eq!(rc.byte_len as usize, LEN);
    assert_eq!(data, (0..LEN).map(|i| i as u8).collect::<Vec<_>>());
    assert!(
        elapsed >= NO_RECV_FOR - Duration::from_millis(20),
        "{elapsed:?}"
    );
    // Paced by the 5.12 ms timer: ~20 NAKs, not hundreds (no busy retry)
    // and not a handful (no giving up on the timer).
    // (Lower bounds loose: a loaded CI machine may run the threads late.)
    assert!(counters.rcvd_rnr_err >= 4, "{counters:?}");
    assert!(counters.rcvd_rnr_err <= 40, "{counters:?}");
    assert!((4..=40).contains(&nak_sent), "{nak_sent}");
}

#[test]
fn rnr_retry_zero_fails_on_the_first_rnr_nak() {
    let (a_ip, b_ip) = ("127.0.0.25", "127.0.0.26");
    let conn = Conn {
        min_rnr_timer: 1,
        rnr_retry: 0,
        ..Conn::default()
    };
    let (a, _) = pair(
        |link| {
            let mut e = engine(a_ip, |_| {});
            let key = e.memory_mut().register(PD, VA, vec![1; LEN], 0);
            let qpn = e.create_qp(spec(QpType::Rc)).expect("qp");
            link.send(u64::from(qpn));
            let peer = link.recv() as u32;
            connect(&mut e, qpn, QpType::Rc, Some((peer, ip(b_ip))), &conn);
            link.recv();
            for i in 0..3 {
                e.post_send(qpn, send_wqe(i, key)).expect("post_send");
            }
            let c = wait_completions(&mut e, SEND_CQ, 3, Duration::from_secs(10));
            (
                c,
                e.qp(qpn).unwrap().state(),
                *e.qp(qpn).unwrap().counters(),
            )
        },
        |link| {
            let mut e = engine(b_ip, |_| {});
            let qpn = e.create_qp(spec(QpType::Rc)).expect("qp");
            let peer = link.recv() as u32;
            link.send(u64::from(qpn));
            connect(&mut e, qpn, QpType::Rc, Some((peer, ip(a_ip))), &conn);
            link.send(0);
            // Never posts a receive.
            while !link.stopped() {
                e.run_once(Some(Duration::from_millis(5)))
                    .expect("run_once");
            }
        },
    );
    let (c, state, counters) = a;
    eprintln!("rnr_retry 0: {c:?}; {counters:?}");
    assert_eq!(c[0].0.wr_id, 0);
    assert_eq!(c[0].0.status, WcStatus::RnrRetryExcErr, "{:?}", c[0].0);
    for (k, (x, _)) in c.iter().enumerate().skip(1) {
        assert_eq!(x.wr_id, k as u64);
        assert_eq!(x.status, WcStatus::WrFlushErr, "{x:?}");
    }
    assert_eq!(state, QpState::Err);
}

#[test]
fn dead_peer_retry_exceeded_then_flush() {
    // Nothing listens on 127.0.0.24.
    let mut e = engine("127.0.0.23", |_| {});
    let key = e.memory_mut().register(PD, VA, vec![1; LEN], 0);
    let qpn = e.create_qp(spec(QpType::Rc)).expect("qp");
    // 4.096 us * 2^14 = 67.1 ms local ACK timeout, 3 retries.
    let conn = Conn {
        timeout: 14,
        retry_cnt: 3,
        ..Conn::default()
    };
    connect(
        &mut e,
        qpn,
        QpType::Rc,
        Some((0x77, ip("127.0.0.24"))),
        &conn,
    );
    let t0 = Instant::now();
    for i in 0..3 {
        e.post_send(qpn, send_wqe(i, key)).expect("post_send");
    }
    let c = wait_completions(&mut e, SEND_CQ, 3, Duration::from_secs(10));
    let elapsed = c[0].1 - t0;
    let expect = Duration::from_nanos(4096 << 14) * 4;
    let counters = *e.qp(qpn).unwrap().counters();
    eprintln!(
        "dead peer: RETRY_EXC_ERR after {elapsed:?} (expected about {expect:?}); {counters:?}"
    );
    assert_eq!(c[0].0.wr_id, 0);
    assert_eq!(c[0].0.status, WcStatus::RetryExcErr, "{:?}", c[0].0);
    for (k, (x, _)) in c.iter().enumerate().skip(1) {
        assert_eq!(x.wr_id, k as u64);
        assert_eq!(x.status, WcStatus::WrFlushErr, "{x:?}");
    }
    assert!(elapsed >= expect.mul_f64(0.9), "gave up early: {elapsed:?}");
    assert!(
        elapsed <= expect.mul_f64(2.5) + Duration::from_millis(200),
        "gave up late: {elapsed:?}"
    );
    assert_eq!(e.qp(qpn).unwrap().state(), QpState::Err);
    assert!(counters.retransmitted_pkts >= 3, "{counters:?}");
    // Every retry went out on the wire (and nobody answered).
    assert!(e.counters().sent_pkts >= 4, "{:?}", e.counters());
    assert_eq!(e.counters().rcvd_pkts, 0);
}
