//! QPs of one engine talking to each other, as perftest's server and
//! client do on one rxu device: the engine sends into its own receive
//! buffer. A round sends far more than a round receives, so unbounded
//! traffic (UC, UD: no window, no ACKs) used to overflow that buffer and
//! lose packets — `ib_send_bw -c UC` then hung, its server waiting for
//! messages that never came. The engine now receives before it sends more
//! when its receive queue is over half full: a burst much larger than the
//! socket buffer arrives whole. These bursts force the UDP path (the
//! intra-device shortcut off, as `rxu up --force-udp`); the same bursts on
//! the shortcut, whose bounded queue holds the QPs back instead, arrive
//! whole too.

mod common;

use common::*;
use std::time::{Duration, Instant};
use transport::qp::{
    access, send_flags, Payload, QpType, RecvWqe, SendOp, SendWqe, Sge, UdDest, WcStatus,
};

const VA: u64 = 0x4000_0000;
const PORT: u16 = 4803;

fn sg(off: usize, len: usize, key: u32) -> Vec<Sge> {
    vec![Sge {
        addr: VA + off as u64,
        length: len as u32,
        lkey: key,
    }]
}

/// Posts `n` receives of `len` and `n` SENDs of `len` from QP `from` to
/// QP `to` of one engine, then runs it until every message arrived (or
/// nothing arrived for a while). Returns the receive completions.
fn burst(t: QpType, n: usize, len: usize, loopback: bool) -> (usize, Eng) {
    let addr = "127.0.0.82";
    let mut e = engine(addr, |c| {
        c.port = PORT;
        c.peer_port = PORT;
        c.loopback = loopback;
        // The engine's default buffer: the burst is many times larger.
        c.socket_buffer = 4 << 20;
        // Sending 8 GSO datagrams (128 packets) a round, receiving 32
        // packets a round without GRO: the engine's own traffic outruns
        // its receiving (with GRO both are about 128 and it rarely does).
        c.gro = false;
    });
    // Receive buffers have room for UD's 40-byte GRH.
    let rlen = len + 64;
    let key = e
        .memory_mut()
        .register(PD, VA, Rng(9).bytes(len + rlen), access::LOCAL_WRITE);
    let a = e.create_qp(spec(t)).unwrap();
    let b = e.create_qp(spec(t)).unwrap();
    let conn = Conn::default();
    connect(&mut e, a, t, Some((b, ip(addr))), &conn);
    connect(&mut e, b, t, Some((a, ip(addr))), &conn);
    let mut recvs = 0;
    let mut posted = 0;
    let mut got = 0;
    let mut last_news = Instant::now();
    let end = Instant::now() + Duration::from_secs(60);
    while got < n && Instant::now() < end && last_news.elapsed() < Duration::from_secs(2) {
        // Keep both queues full, as perftest's server and client do.
        while recvs < n && e.qp(b).is_some_and(|q| q.recv_queue_len() < 1000) {
            let r = RecvWqe {
                wr_id: recvs as u64,
                sges: sg(len, rlen, key),
            };
            e.post_recv(b, r).unwrap();
            recvs += 1;
        }
        while posted < n && e.qp(a).is_some_and(|q| q.send_queue_len() < 512) {
            let ud = (t == QpType::Ud).then(|| UdDest {
                addr: ip(addr),
                qpn: b,
                qkey: QKEY,
            });
            let w = SendWqe {
                wr_id: posted as u64,
                op: SendOp::Send,
                flags: send_flags::SIGNALED,
                payload: Payload::Sges(sg(0, len, key)),
                ud,
            };
            e.post_send(a, w).unwrap();
            posted += 1;
        }
        e.run_once(Some(Duration::from_millis(1))).unwrap();
        let _ = e.poll_cq(SEND_CQ, 1024);
        for c in e.poll_cq(RECV_CQ, 1024) {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            assert_eq!(c.wr_id, got as u64, "in order, once each");
            got += 1;
            last_news = Instant::now();
        }
    }
    (got, e)
}

#[test]
fn uc_burst_to_a_qp_of_the_same_engine_is_not_lost() {
    let _g = heavy_lock();
    // 48 MiB of 64 KiB messages against an 8 MiB receive buffer.
    let n = if cfg!(debug_assertions) { 256 } else { 768 };
    let (got, e) = burst(QpType::Uc, n, 64 << 10, false);
    let c = e.counters();
    assert_eq!(got, n, "UC messages lost: {c:?}");
    assert!(
        c.tx_paused > 0,
        "the burst never filled half the buffer: {c:?}"
    );
    assert_eq!(c.loop_sent_pkts, 0, "{c:?}");
}

/// UD through the same path (one packet per message).
#[test]
fn ud_burst_to_a_qp_of_the_same_engine_is_not_lost() {
    let _g = heavy_lock();
    let n = if cfg!(debug_assertions) { 2000 } else { 8000 };
    let (got, e) = burst(QpType::Ud, n, 4096, false);
    assert_eq!(got, n, "UD messages lost: {:?}", e.counters());
}

/// The same bursts on the shortcut: its bounded queue holds the QPs back
/// (a send batch has room only while the queue has); nothing is lost.
#[test]
fn uc_and_ud_bursts_on_the_shortcut_are_not_lost() {
    let _g = heavy_lock();
    let n = if cfg!(debug_assertions) { 256 } else { 768 };
    let (got, e) = burst(QpType::Uc, n, 64 << 10, true);
    let c = e.counters();
    assert_eq!(got, n, "UC messages lost: {c:?}");
    assert!(c.loop_sent_pkts >= (n * 16) as u64, "{c:?}");
    assert_eq!((c.tx_syscalls, c.tx_paused), (0, 0), "{c:?}");
    drop(e);
    let n = if cfg!(debug_assertions) { 2000 } else { 8000 };
    let (got, e) = burst(QpType::Ud, n, 4096, true);
    let c = e.counters();
    assert_eq!(got, n, "UD messages lost: {c:?}");
    assert_eq!(c.loop_rcvd_pkts, n as u64, "{c:?}");
}
