//! Disconnection, TimeWait, stale connections.

use std::time::Duration;

use rxu_abi::proto::cm::{event, port_space, Ece};
use rxu_abi::proto::QpType;

use super::*;
use crate::wire::CmMsg;

#[test]
fn dreq_drep_both_sides_disconnected_then_timewait_exit() {
    let mut p = Pair::new();
    let (_, a, nb) = establish(&mut p, 0x11, 0x22);
    p.a.disconnect(p.now, a).unwrap();
    p.pump();
    let CmMsg::Dreq(d) = &p
        .log
        .iter()
        .rev()
        .find(|(_, m)| is::<DREQ>(m))
        .unwrap()
        .1
        .msg
    else {
        unreachable!()
    };
    assert_eq!(d.remote_qpn, 0x22);
    // B: DISCONNECTED; the DREP waits for B's own disconnect (the kernel).
    let ev = p.events_b();
    assert_eq!(
        (ev.len(), ev[0].1.id, ev[0].1.event, ev[0].1.status),
        (1, nb, event::DISCONNECTED, 0)
    );
    assert!(p.events_a().is_empty());
    p.b.disconnect(p.now, nb).unwrap();
    p.pump();
    let ev = p.events_a();
    assert_eq!(
        (ev.len(), ev[0].1.event, ev[0].1.status),
        (1, event::DISCONNECTED, 0)
    );
    // A second disconnect does nothing and reports nothing.
    p.a.disconnect(p.now, a).unwrap();
    p.pump();
    assert!(p.events_a().is_empty());
    // TimeWait: conv(19) = 2048 ms, then TIMEWAIT_EXIT on both.
    assert_eq!(
        p.a.poll_timeout(),
        Some(p.now + Duration::from_millis(2048))
    );
    p.run_out();
    assert_eq!(p.events_a()[0].1.event, event::TIMEWAIT_EXIT);
    assert_eq!(p.events_b()[0].1.event, event::TIMEWAIT_EXIT);
    assert_eq!((p.a.object_counts(), p.b.object_counts()), ((1, 0), (2, 0)));
    assert!(p.a.init_qp_attr(a, 2).is_err());
}

#[test]
fn lost_dreq_is_retransmitted() {
    let mut p = Pair::new();
    let (_, a, nb) = establish(&mut p, 0x11, 0x22);
    p.a.disconnect(p.now, a).unwrap();
    let mut first = true;
    p.pump_with(|_, m| {
        if is::<DREQ>(m) && first {
            first = false;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    assert!(p.events_b().is_empty());
    p.advance(Duration::from_millis(6144));
    assert_eq!(p.events_b()[0].1.event, event::DISCONNECTED);
    p.b.destroy(p.now, nb).unwrap();
    p.pump();
    assert_eq!(p.events_a()[0].1.event, event::DISCONNECTED);
}

#[test]
fn unanswered_dreq_ends_in_disconnected_timedout() {
    let mut p = Pair::with_timing(fast());
    let (_, a, _) = establish(&mut p, 0x11, 0x22);
    p.a.disconnect(p.now, a).unwrap();
    p.run_out_with(|from_a, _| if from_a { Fate::Drop } else { Fate::Deliver });
    assert_eq!(p.sent(true, is::<DREQ>), 4);
    let ev = p.events_a();
    assert_eq!(ev[0].1.event, event::DISCONNECTED);
    assert_eq!(ev[0].1.status, -libc::ETIMEDOUT);
    assert_eq!(ev[1].1.event, event::TIMEWAIT_EXIT);
    assert_eq!(p.a.counters().timeouts_dreq, 1);
}

#[test]
fn simultaneous_disconnect_reports_once_per_side() {
    let mut p = Pair::new();
    let (_, a, nb) = establish(&mut p, 0x11, 0x22);
    p.a.disconnect(p.now, a).unwrap();
    p.b.disconnect(p.now, nb).unwrap();
    p.pump();
    p.a.disconnect(p.now, a).unwrap();
    p.b.disconnect(p.now, nb).unwrap();
    p.run_out();
    let count = |v: &[(Owner, rxu_abi::proto::cm::CmEventRecord)], e| {
        v.iter().filter(|x| x.1.event == e).count()
    };
    let (ea, eb) = (p.events_a(), p.events_b());
    assert_eq!(count(&ea, event::DISCONNECTED), 1);
    assert_eq!(count(&eb, event::DISCONNECTED), 1);
    assert_eq!(p.a.object_counts().1 + p.b.object_counts().1, 0);
}

#[test]
fn a_req_from_a_qp_in_timewait_is_a_new_connection() {
    let mut p = Pair::new();
    let (_, a, nb) = establish(&mut p, 0x11, 0x22);
    p.a.disconnect(p.now, a).unwrap();
    p.pump();
    p.b.disconnect(p.now, nb).unwrap();
    p.pump();
    let _ = (p.events_a(), p.events_b());
    assert_eq!(p.b.object_counts().1, 1, "B's old conn is in TimeWait");
    // A new id of A reuses QP 0x11 during B's TimeWait: the kernel forgets
    // the peer's QPN when TimeWait starts (cm_enter_timewait), so this is
    // a new connection, not a stale one (REJ 10).
    let (a2, _) =
        p.a.bind(
            OWNER_A,
            port_space::TCP,
            QpType::Rc,
            std::net::SocketAddr::new(A_IP, 0),
            false,
            false,
            None,
        )
        .unwrap();
    p.a.resolve(a2, std::net::SocketAddr::new(B_IP, PORT))
        .unwrap();
    p.a.connect(p.now, a2, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    assert!(p.events_a().is_empty());
    let ev = p.events_b();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].1.event, event::CONNECT_REQUEST);
    assert!(p.b.counters().rej_sent.is_empty());
    assert_eq!(p.b.counters().dropped_stale, 0);
}

#[test]
fn stale_req_while_connected_rejects_and_disconnects_the_old_one() {
    let mut p = Pair::new();
    let (_, _a, nb) = establish(&mut p, 0x11, 0x22);
    // A "forgets" (a second engine with A's GUID and address): same QPN.
    let mut a2 = Cm::new(config(A_IP, A_GUID, 99, CmTiming::default()));
    let (x, _) = a2
        .bind(
            OWNER_A,
            port_space::TCP,
            QpType::Rc,
            std::net::SocketAddr::new(A_IP, 0),
            false,
            false,
            None,
        )
        .unwrap();
    a2.resolve(x, std::net::SocketAddr::new(B_IP, PORT))
        .unwrap();
    a2.connect(p.now, x, &param(0x11, &[]), Ece::default())
        .unwrap();
    std::mem::swap(&mut p.a, &mut a2);
    p.pump();
    let ev = p.events_a();
    assert_eq!((ev[0].1.event, ev[0].1.status), (event::REJECTED, 10));
    // B sent a DREQ to the old connection; the new A answers it as
    // unknown (DREP), so the old one ends.
    assert_eq!(p.sent(false, is::<DREQ>), 1);
    assert_eq!(p.sent(true, is::<DREP>), 1);
    let ev = p.events_b();
    assert!(ev
        .iter()
        .any(|e| e.1.id == nb && e.1.event == event::DISCONNECTED));
}
