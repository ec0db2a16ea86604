//! destroy() and destroy_owned() in each state: what the peer gets, and
//! that no event follows.

use std::time::Duration;

use rxu_abi::proto::cm::{event, port_space, Ece};
use rxu_abi::proto::QpType;

use super::*;
use crate::wire::{msg_ref, rej_reason, CmMsg};

#[test]
fn destroy_established_sends_dreq_peer_disconnected() {
    let mut p = Pair::new();
    let (_, a, nb) = establish(&mut p, 0x11, 0x22);
    p.a.destroy(p.now, a).unwrap();
    p.pump();
    let ev = p.events_b();
    assert_eq!((ev[0].1.id, ev[0].1.event), (nb, event::DISCONNECTED));
    p.b.disconnect(p.now, nb).unwrap();
    p.run_out();
    assert!(p.events_a().is_empty(), "no event after destroy");
    assert_eq!(p.a.object_counts(), (0, 0));
    assert_eq!(p.sent(true, is::<DREQ>), 1, "one DREQ, not retransmitted");
}

#[test]
fn destroy_in_req_sent_rejects_with_timeout_and_guid() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    let nb = p.events_b()[0].1.new_id;
    p.a.destroy(p.now, a).unwrap();
    p.pump();
    let CmMsg::Rej(rej) = &p.log.last().unwrap().1.msg else {
        panic!("no REJ");
    };
    assert_eq!(rej.reason, rej_reason::TIMEOUT);
    assert_eq!(rej.reject_info_len, 8);
    assert_eq!(&rej.ari[..8], &A_GUID.to_be_bytes());
    assert_eq!(rej.remote_comm_id, 0);
    // The passive id learns it through REJECTED.
    let ev = p.events_b();
    assert_eq!(
        (ev[0].1.id, ev[0].1.event, ev[0].1.status),
        (nb, event::REJECTED, 4)
    );
    assert_eq!(p.a.object_counts(), (0, 0));
    assert_eq!(p.b.object_counts().1, 0);
}

#[test]
fn destroy_passive_before_accept_rejects_28() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    let nb = p.events_b()[0].1.new_id;
    let b_comm = super::rc::passive_comm_id(&mut p);
    p.b.destroy(p.now, nb).unwrap();
    p.pump();
    let CmMsg::Rej(rej) = &p.log.last().unwrap().1.msg else {
        panic!("no REJ");
    };
    assert_eq!(
        (rej.reason, rej.msg_rejected, rej.local_comm_id),
        (28, msg_ref::REQ, b_comm)
    );
    assert_eq!(p.events_a()[0].1.status, 28);
}

#[test]
fn destroy_after_rep_sent_rejects_and_waits() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    let nb = p.events_b()[0].1.new_id;
    p.b.accept(p.now, nb, Some(&param(0x22, &[])), Ece::default())
        .unwrap();
    p.b.destroy(p.now, nb).unwrap();
    p.pump();
    // A got the REP (CONNECT_RESPONSE) then the REJ.
    let ev: Vec<u32> = p.events_a().iter().map(|e| e.1.event).collect();
    assert_eq!(ev, vec![event::CONNECT_RESPONSE, event::REJECTED]);
    assert_eq!(p.b.object_counts(), (1, 1), "B's conn is in TimeWait");
    p.run_out();
    assert_eq!(p.b.object_counts(), (1, 0));
    assert!(p.events_b().is_empty());
}

#[test]
fn destroy_owned_cleans_a_dead_client() {
    let mut p = Pair::new();
    let (l, a, nb) = establish(&mut p, 0x11, 0x22);
    // B's process dies: listener and connection.
    p.b.destroy_owned(p.now, OWNER_B..=OWNER_B);
    p.pump();
    assert_eq!(p.events_a()[0].1.event, event::DISCONNECTED);
    assert!(p.b.status().is_empty());
    // The port can be listened on again at once.
    let any =
        std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), PORT);
    let (l2, _) =
        p.b.bind(
            OWNER_B,
            port_space::TCP,
            QpType::Rc,
            any,
            false,
            false,
            None,
        )
        .unwrap();
    p.b.listen(l2, 1).unwrap();
    assert!(p.b.listen(l, 1).is_err());
    p.a.destroy(p.now, a).unwrap();
    p.run_out();
    assert_eq!(p.b.object_counts(), (1, 0));
    assert_eq!(p.a.object_counts(), (0, 0));
    assert!(p.b.disconnect(p.now, nb).is_err());
}

#[test]
fn destroying_a_listener_with_an_unread_request_destroys_the_new_id() {
    let mut p = Pair::new();
    let (l, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    // The CONNECT_REQUEST is still queued: it and its id go.
    p.b.destroy(p.now, l).unwrap();
    assert!(p.b.poll_event().is_none());
    assert_eq!(p.b.object_counts().0, 0);
    p.pump();
    assert_eq!(p.events_a()[0].1.status, 28);
    p.advance(Duration::from_secs(1));
    assert_eq!(p.b.object_counts(), (0, 0));
}
