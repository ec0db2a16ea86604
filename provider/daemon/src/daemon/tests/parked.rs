//! Rings idle for `ready::PARK_AFTER` are parked (the loop stops reading
//! them, their sleeping flag stays up): nothing posted to them is lost.
//! A receive posted to a parked RQ is there for the next packet; a send
//! posted to a parked SQ is taken once the client's doorbell is seen,
//! by the loop or before the client's next control request.

use std::time::{Duration, Instant};

use transport::qp::send_flags;

use super::spec::SendSpec;
use crate::daemon::device::Device;
use crate::daemon::ready::PARK_AFTER;
use crate::verbs;
use rxu_abi::proto::{QpType, Request};
use transport::verbs::{Sge, WrOpcode};

use super::harness::*;

/// Lets the watched rings of `dev` go idle and parks them.
fn park_all(dev: &mut Device) {
    std::thread::sleep(PARK_AFTER + Duration::from_millis(10));
    dev.consume();
}

#[test]
fn nothing_posted_to_a_parked_ring_is_lost() {
    let UdLink {
        mut tx,
        mut rx,
        ct,
        cr,
        src,
        dst,
        skey,
        dkey,
        mut tring,
        mut rring,
        mut a,
        mut b,
    } = ud_link(12, 0x5a, 32);
    park_all(&mut tx);
    park_all(&mut rx);
    assert!(!tx.objects.ready.qps.contains(&(ct.id, a.qpn)));
    assert!(!rx.objects.ready.qps.contains(&(cr.id, b.qpn)));
    assert!(a.sq.wake_needed(), "a parked SQ's producer rings");
    assert!(b.rq.as_ref().unwrap().wake_needed());
    assert_eq!(rx.objects.ready.parked_recv, 1);

    // A receive to the parked RQ (its doorbell not looked at).
    post_recv(&mut b, 7, &[sge_of(&dst[..512], dkey)]);

    let send = |a: &mut TestQp, wr_id: u64| {
        post_send(
            a,
            &SendSpec {
                wr_id,
                opcode: WrOpcode::SEND,
                send_flags: send_flags::SIGNALED,
                ud_qpn: b.qpn,
                ud_qkey: 0x1111_1111,
                ud_gid: verbs::gid_of(addr(13)),
                sges: vec![Sge {
                    addr: src.as_ptr() as u64,
                    length: 64,
                    lkey: skey,
                }],
                ..Default::default()
            },
        )
    };
    // A send to the parked SQ: not read until the doorbell is seen.
    send(&mut a, 1);
    for _ in 0..20 {
        tx.pump().unwrap();
    }
    assert_eq!(tx.endpoint.qp(a.qpn).unwrap().counters().sent_pkts, 0);
    // The client rang (the flag is up); a control request reads the
    // doorbell and takes what was posted before it.
    assert!(a.sq.notify(&ct.bell).unwrap());
    ok(call(&mut tx, ct.id, Request::QueryDevice));
    assert!(tx.objects.ready.qps.contains(&(ct.id, a.qpn)));
    assert!(pump(&mut tx, |_| pop_cqe(&mut tring).is_some()));
    // The packet finds the receive posted to the parked RQ.
    let end = Instant::now() + Duration::from_secs(5);
    let mut got = None;
    while got.is_none() && Instant::now() < end {
        rx.pump().unwrap();
        rx.deliver();
        got = pop_cqe(&mut rring);
    }
    let e = got.expect("the receive completed");
    assert_eq!((e.wr_id, e.status, e.byte_len), (7, 0, 40 + 64));
    assert_eq!(rx.objects.ready.parked_recv, 0);
    assert_eq!(rx.endpoint.qp(b.qpn).unwrap().counters().dropped_pkts, 0);

    // Parked again; a send rung through the loop's doorbell path.
    park_all(&mut tx);
    assert!(!tx.objects.ready.qps.contains(&(ct.id, a.qpn)));
    send(&mut a, 2);
    assert!(a.sq.notify(&ct.bell).unwrap());
    // What the event loop does when the doorbell fd is readable.
    ct.bell.drain().unwrap();
    tx.objects.ready.rang.insert(ct.id);
    assert!(pump(&mut tx, |_| pop_cqe(&mut tring)
        .is_some_and(|e| e.wr_id == 2)));
}

/// A client that exits with rings still watched leaves nothing in the
/// loop's sets: before, its (session, QP) entries stayed for good, so
/// every client that ever exited holding QPs made each turn of the loop
/// longer (the control-sequence fuzz target slowed from 7000 to 50
/// inputs a second on them) and rxud's memory grew.
#[test]
fn a_gone_clients_rings_leave_the_watched_sets() {
    let mut dev = device(14);
    for _ in 0..3 {
        let c = hello(&mut dev);
        let pd = alloc_pd(&mut dev, c.id);
        let (cq, _ring) = create_cq(&mut dev, c.id, 8);
        for _ in 0..4 {
            let qp = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
            assert!(dev.objects.ready.qps.contains(&(c.id, qp.qpn)));
        }
        dev.consume();
        dev.disconnect(c.id);
        dev.consume();
        let a = dev.audit();
        assert_eq!(
            (a.sessions, a.watched_qps, a.watched_srqs),
            (0, 0, 0),
            "{a:?}"
        );
    }
}
