//! The intra-device shortcut: two RC QPs of one engine (perftest's server
//! and client on one device) move WRITEs and SENDs through the driver's
//! own queue instead of its socket. The counters show which path the
//! packets took, the bytes land exactly, and with `loopback` off the same
//! traffic goes through the socket. With faults injected the packets on
//! the shortcut are still dropped, duplicated, reordered and corrupted,
//! and the receive-side ICRC check still catches the corruption.

mod common;

use common::*;
use std::time::Duration;
use transport::engine::fault::{FaultConfig, FaultCounters};
use transport::engine::EngineCounters;
use transport::qp::{access, send_flags, Payload, QpType, RecvWqe, SendOp, SendWqe, Sge, WcStatus};

const VA: u64 = 0x4000_0000;
/// Source, WRITE target, SEND target: one region, three parts.
const PART: usize = if cfg!(debug_assertions) {
    1 << 20
} else {
    4 << 20
};
/// WRITEs of this size fill the WRITE target; then one SEND of it.
const MSG: usize = 64 << 10;

/// What a [`transfer`] did.
struct Outcome {
    c: EngineCounters,
    /// Send-path and receive-path injectors.
    faults: (FaultCounters, FaultCounters),
    /// Packets the requester sent again.
    retransmitted: u64,
    /// Both targets hold the source's bytes.
    exact: bool,
}

fn sg(off: usize, len: usize, key: u32) -> Vec<Sge> {
    vec![Sge {
        addr: VA + off as u64,
        length: len as u32,
        lkey: key,
    }]
}

/// QP `a` WRITEs the source into the WRITE target and SENDs its first
/// `MSG` bytes to QP `b`, one engine on `addr:port`.
fn transfer(addr: &str, port: u16, loopback: bool, faults: Option<FaultConfig>) -> Outcome {
    let e = engine(addr, |c| {
        c.port = port;
        c.peer_port = port;
        c.loopback = loopback;
        c.fault_tx = faults;
        c.fault_rx = faults.map(|f| FaultConfig {
            seed: f.seed + 1,
            ..f
        });
    });
    transfer_on(e, addr, false)
}

/// [`transfer`] on engine `e`, the QPs addressing each other at `addr`;
/// `pin`: both send from `addr` (a wildcard-bound engine, as rxud pins
/// each QP's source to its GID's address).
fn transfer_on(mut e: Eng, addr: &str, pin: bool) -> Outcome {
    let src = Rng(7).bytes(PART);
    let mut mem = src.clone();
    mem.resize(3 * PART, 0);
    let all = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let key = e.memory_mut().register(PD, VA, mem, all);
    let a = e.create_qp(spec(QpType::Rc)).unwrap();
    let b = e.create_qp(spec(QpType::Rc)).unwrap();
    let conn = Conn {
        // Lost packets are retransmitted soon (4.096 us * 2^10 ~ 4 ms).
        timeout: 10,
        ..Conn::default()
    };
    connect(&mut e, a, QpType::Rc, Some((b, ip(addr))), &conn);
    connect(&mut e, b, QpType::Rc, Some((a, ip(addr))), &conn);
    if pin {
        e.set_qp_source(a, ip(addr)).unwrap();
        e.set_qp_source(b, ip(addr)).unwrap();
    }
    e.post_recv(
        b,
        RecvWqe {
            wr_id: 1,
            sges: sg(2 * PART, MSG, key),
        },
    )
    .unwrap();
    let writes = PART / MSG;
    for i in 0..writes {
        let op = SendOp::Write {
            remote_addr: VA + (PART + i * MSG) as u64,
            rkey: key,
        };
        let w = SendWqe {
            wr_id: i as u64,
            op,
            flags: 0,
            payload: Payload::Sges(sg(i * MSG, MSG, key)),
            ud: None,
        };
        e.post_send(a, w).unwrap();
    }
    let w = SendWqe {
        wr_id: 1000,
        op: SendOp::Send,
        flags: send_flags::SIGNALED,
        payload: Payload::Sges(sg(0, MSG, key)),
        ud: None,
    };
    e.post_send(a, w).unwrap();
    let end = Deadline::after(Duration::from_secs(60));
    let (mut sent, mut rcvd) = (false, false);
    while !(sent && rcvd) {
        end.check(|| format!("transfer not done: {:?}", e.counters()));
        e.run_once(Some(Duration::from_millis(1))).unwrap();
        for c in e.poll_cq(SEND_CQ, 16) {
            let what = format!("{addr}: {c:?} {:?}", e.counters());
            assert_eq!((c.status, c.wr_id), (WcStatus::Success, 1000), "{what}");
            sent = true;
        }
        for c in e.poll_cq(RECV_CQ, 16) {
            assert_eq!((c.status, c.byte_len), (WcStatus::Success, MSG as u32));
            rcvd = true;
        }
    }
    let m = &e.memory().region(key).unwrap().data;
    Outcome {
        c: e.counters(),
        faults: e.fault_counters(),
        retransmitted: e.qp(a).unwrap().counters().retransmitted_pkts,
        exact: m[PART..2 * PART] == src[..] && m[2 * PART..2 * PART + MSG] == src[..MSG],
    }
}

#[test]
fn qps_of_one_engine_take_the_shortcut_and_data_is_exact() {
    let _g = heavy_lock();
    let Outcome { c, exact, .. } = transfer("127.0.0.83", 4805, true, None);
    assert!(exact, "bytes differ: {c:?}");
    assert!(c.loop_sent_pkts > 0, "{c:?}");
    // Every packet, both ways (WRITEs, SEND, ACKs), went by the shortcut:
    // counted as sent and received RoCE packets, no system call.
    assert_eq!(c.loop_sent_pkts, c.sent_pkts, "{c:?}");
    assert_eq!(c.loop_rcvd_pkts, c.rcvd_pkts, "{c:?}");
    assert_eq!(c.loop_rcvd_pkts, c.loop_sent_pkts, "{c:?}");
    assert_eq!((c.tx_syscalls, c.rx_syscalls), (0, 0), "{c:?}");
    assert_eq!(c.icrc_errors + c.parse_errors + c.unknown_qp, 0, "{c:?}");
}

#[test]
fn forced_udp_sends_the_same_traffic_through_the_socket() {
    let _g = heavy_lock();
    let Outcome { c, exact, .. } = transfer("127.0.0.83", 4806, false, None);
    assert!(exact, "bytes differ: {c:?}");
    assert_eq!((c.loop_sent_pkts, c.loop_rcvd_pkts), (0, 0), "{c:?}");
    assert!(c.tx_syscalls > 0 && c.rx_syscalls > 0, "{c:?}");
    assert!(c.sent_pkts > (PART / 4096) as u64, "{c:?}");
}

#[test]
fn faults_apply_on_the_shortcut_and_rc_recovers_exactly() {
    let _g = heavy_lock();
    let f = FaultConfig {
        seed: 77,
        drop: 0.02,
        duplicate: 0.01,
        reorder: 0.01,
        corrupt: 0.01,
    };
    let o = transfer("127.0.0.83", 4807, true, Some(f));
    let (c, (ft, fr)) = (o.c, o.faults);
    let what = format!("{c:?} tx {ft:?} rx {fr:?}");
    assert!(o.exact, "bytes differ: {what}");
    assert!(c.loop_sent_pkts > 0 && c.tx_syscalls == 0, "{what}");
    // Both injectors saw the shortcut's packets and did their work.
    assert!(ft.dropped > 0 && fr.dropped > 0, "{what}");
    assert!(ft.corrupted + fr.corrupted > 0 && ft.duplicated + fr.duplicated > 0);
    // Corrupted packets on the shortcut fail the receive ICRC check, and
    // the losses were recovered by retransmission.
    assert!(c.icrc_errors > 0, "{what}");
    assert!(o.retransmitted > 0, "{what}");
}

/// A wildcard-bound engine (0.0.0.0 and [::] on lo, as `rxud --all-addrs`)
/// takes the shortcut for the addresses it was told it serves, IPv4 and
/// IPv6, and not before it was told.
#[test]
fn wildcard_engine_takes_the_shortcut_for_the_addresses_it_serves() {
    let _g = heavy_lock();
    let port = 4808;
    let wild = |served: &[&str]| {
        let mut e = engine("0.0.0.0", |c| {
            c.port = port;
            c.peer_port = port;
            c.also_v6 = true;
            c.bind_device = Some("lo".into());
        });
        if !served.is_empty() {
            let addrs: Vec<_> = served.iter().map(|a| ip(a)).collect();
            e.set_local_addrs(Some(&addrs));
        }
        e
    };
    for addr in ["127.0.0.84", "::1"] {
        let o = transfer_on(wild(&["127.0.0.84", "::1"]), addr, true);
        let c = o.c;
        assert!(o.exact, "{addr}: bytes differ: {c:?}");
        assert!(c.loop_sent_pkts > 0, "{addr}: {c:?}");
        assert_eq!(c.loop_sent_pkts, c.sent_pkts, "{addr}: {c:?}");
        assert_eq!((c.tx_syscalls, c.rx_syscalls), (0, 0), "{addr}: {c:?}");
        assert_eq!(c.icrc_errors + c.not_local, 0, "{addr}: {c:?}");
    }
    // Not told which addresses it serves: all by UDP.
    let o = transfer_on(wild(&[]), "127.0.0.84", true);
    assert!(o.exact, "{:?}", o.c);
    assert_eq!(o.c.loop_sent_pkts, 0, "{:?}", o.c);
    assert!(o.c.tx_syscalls > 0, "{:?}", o.c);
}
