//! A device whose daemon goes away under open contexts: killed outright
//! (SIGKILL: it says nothing) or stopped (`rxu down --force`: it says
//! DEVICE_FATAL itself). Either way every context gets exactly one
//! IBV_EVENT_DEVICE_FATAL, blocked waits return, outstanding work comes
//! back as WR_FLUSH_ERR completions, and later calls fail with EIO.

use std::net::Ipv4Addr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rxu_client::*;
use rxu_testkit::verbs::{Pair, ALL_ACCESS};
use rxu_testkit::Daemon;

const WAIT: Duration = Duration::from_secs(5);

/// Work left outstanding on `p.a`: three receives nobody sends to, and
/// three sends `b` has no receive for (RNR-retried forever).
fn leave_work_outstanding(p: &Pair) -> MrBuf {
    let buf = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    let sge = [buf.sge(0, 64)];
    for i in 0..3 {
        p.a.post_recv(&[RecvWr::new(100 + i, &sge)]).unwrap();
    }
    p.a.post_send(&[
        SendWr::send(1, &sge).signaled(),
        SendWr::send(2, &sge),
        SendWr::send(3, &sge).signaled(),
    ])
    .unwrap();
    // Let the daemon take them into the engine.
    std::thread::sleep(Duration::from_millis(100));
    let mut wc = [Wc::default()];
    assert_eq!(p.cq_a.poll(&mut wc).unwrap(), 0, "{:?}", wc[0]);
    buf
}

/// Polls `cq` until it fails; returns what came before.
fn poll_until_error(cq: &Cq) -> (Vec<Wc>, Error) {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut wc = [Wc::default(); 4];
    loop {
        match cq.poll(&mut wc) {
            Ok(n) => got.extend_from_slice(&wc[..n]),
            Err(e) => return (got, e),
        }
        assert!(Instant::now() < deadline, "poll never failed: {got:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn sigkill_gives_device_fatal_flush_errors_and_eio() {
    let mut d = Daemon::start("rxuf1", Ipv4Addr::new(127, 0, 88, 1));
    let ctx = Context::open("rxuf1").unwrap();
    let ch = CompChannel::new().unwrap();
    let p = Pair::with(&ctx, QpType::Rc, None, Some(&ch));
    let _buf = leave_work_outstanding(&p);

    // One thread waits for an async event, one in get_cq_event.
    let (tx, rx) = mpsc::channel();
    let c2 = ctx.clone();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        let r = c2.get_async_event_timeout(Some(Duration::from_secs(30)));
        let _ = tx2.send(format!("async {:?}", r.map(|e| e.map(|e| e.event_type))));
    });
    p.cq_b.req_notify(false).unwrap();
    let ch2 = ch.clone();
    std::thread::spawn(move || {
        let r = ch2.get_cq_event_timeout(Some(Duration::from_secs(30)));
        let _ = tx.send(format!("channel ok={}", r.is_ok()));
    });
    std::thread::sleep(Duration::from_millis(50));

    let t0 = Instant::now();
    d.kill();
    let mut heard: Vec<String> = (0..2).map(|_| rx.recv_timeout(WAIT).unwrap()).collect();
    heard.sort();
    assert_eq!(
        heard,
        vec![
            format!("async Ok(Some({}))", event_type::DEVICE_FATAL),
            "channel ok=false".to_string()
        ]
    );
    assert!(t0.elapsed() < WAIT);
    // Exactly one DEVICE_FATAL, then the socket is closed.
    assert!(ctx.get_async_event_timeout(Some(WAIT)).is_err());
    assert!(ctx.is_dead());

    // Every outstanding WR comes back flushed, in posting order per queue.
    let (got, e) = poll_until_error(&p.cq_a);
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![1, 2, 3, 100, 101, 102], "{got:?}");
    assert!(got
        .iter()
        .all(|w| w.status == WcStatus::WrFlushErr as u32 && w.qp_num == p.a.qpn()));
    assert_eq!(got[0].opcode, WcOpcode::Send as u32);
    assert_eq!(got[5].opcode, WcOpcode::Recv as u32);
    assert_eq!(e.errno(), libc::EIO, "{e}");

    // Calls fail with EIO; releasing objects succeeds.
    let sge = [_buf.sge(0, 8)];
    let pe = p.a.post_send(&[SendWr::send(9, &sge)]).unwrap_err();
    assert_eq!(pe.error.errno(), libc::EIO);
    assert_eq!(Pd::alloc(&ctx).err().map(|e| e.errno()), Some(libc::EIO));
    assert_eq!(ctx.query_port(1).err().map(|e| e.errno()), Some(libc::EIO));
    let Pair {
        a, b, cq_a, cq_b, ..
    } = p;
    a.destroy().map_err(|(_, e)| e).unwrap();
    b.destroy().map_err(|(_, e)| e).unwrap();
    cq_a.destroy().map_err(|(_, e)| e).unwrap();
    cq_b.destroy().map_err(|(_, e)| e).unwrap();
}

#[test]
fn a_stopping_daemon_says_device_fatal_once() {
    let _d = Daemon::start("rxuf2", Ipv4Addr::new(127, 0, 88, 2));
    let ctx = Context::open("rxuf2").unwrap();
    let p = Pair::new(&ctx, QpType::Rc);
    let _buf = leave_work_outstanding(&p);
    Context::open_admin("rxuf2")
        .unwrap()
        .shutdown(true)
        .unwrap();
    let ev = ctx.get_async_event_timeout(Some(WAIT)).unwrap().unwrap();
    assert_eq!((ev.element, ev.event_type), (0, event_type::DEVICE_FATAL));
    assert!(ctx.get_async_event_timeout(Some(WAIT)).is_err(), "only one");
    let (got, e) = poll_until_error(&p.cq_a);
    assert_eq!(got.len(), 6, "{got:?}");
    assert_eq!(e.errno(), libc::EIO);
}
