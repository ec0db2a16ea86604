//! Bad input from the network: counted, dropped, never a panic; other
//! connections unaffected.

use std::time::Duration;

use rxu_abi::proto::cm::{event, port_space, Ece};
use rxu_abi::proto::QpType;

use super::*;
use crate::engine::mads;
use crate::wire::{CmMsg, MAD_LEN};

fn rx_from_a() -> MadRx {
    MadRx {
        src: A_IP,
        dst: B_IP,
        hop_limit: 64,
        traffic_class: 0,
    }
}

#[test]
fn malformed_mads_are_counted() {
    let mut p = Pair::new();
    let (_, _, nb) = establish(&mut p, 0x11, 0x22);
    let rx = rx_from_a();
    p.b.handle_mad(p.now, &rx, &[]);
    p.b.handle_mad(p.now, &rx, &[0xFF; 100]);
    p.b.handle_mad(p.now, &rx, &[0u8; MAD_LEN]);
    let mut m = [0u8; MAD_LEN];
    m[..4].copy_from_slice(&[1, 7, 2, 3]);
    m[16..18].copy_from_slice(&0x0019u16.to_be_bytes()); // LAP
    p.b.handle_mad(p.now, &rx, &m);
    assert_eq!(p.b.counters().dropped_malformed, 4);
    assert!(p.b.poll_transmit().is_none());
    assert!(p.b.conn_of(nb).is_some());
}

#[test]
fn unknown_comm_ids_and_wrong_qpn_are_dropped() {
    let mut p = Pair::new();
    let (_, a, nb) = establish(&mut p, 0x11, 0x22);
    let (comm_a, ca) = p.a.conn_of(a).map(|(c, x)| (c, x.remote_comm_id)).unwrap();
    let rx = rx_from_a();
    let before = p.b.counters().dropped_unknown;
    // DREQ naming B's conn but not B's QP: ignored.
    p.b.handle_msg(p.now, &rx, &mads::dreq(1, comm_a, ca, 0x999));
    // RTU, DREP, MRA, REJ, REP for comm IDs nobody has.
    p.b.handle_msg(p.now, &rx, &mads::rtu(1, 5, 6));
    p.b.handle_msg(p.now, &rx, &mads::drep(1, 5, 6));
    p.b.handle_msg(p.now, &rx, &mads::mra(1, 5, 6, 0, 3));
    p.b.handle_msg(
        p.now,
        &rx,
        &mads::rej(
            1,
            mads::RejParts {
                local: 5,
                remote: 6,
                msg_rejected: 2,
                reason: 28,
                ari: &[],
                private_data: &[],
            },
        ),
    );
    assert_eq!(p.b.counters().dropped_unknown - before, 5);
    assert!(p.events_b().is_empty());
    let (_, c) = p.b.conn_of(nb).unwrap();
    assert_eq!(c.state.name(), "established");
    // Nothing of that is answered.
    assert_eq!(p.b.poll_transmit_msg(), None);
}

#[test]
fn unknown_dreq_gets_a_drep() {
    let mut p = Pair::new();
    p.b.handle_msg(p.now, &rx_from_a(), &mads::dreq(9, 5, 6, 0x22));
    let out = p.b.poll_transmit_msg().unwrap();
    let CmMsg::Drep(d) = out.mad.msg else {
        panic!("no DREP")
    };
    assert_eq!((d.local_comm_id, d.remote_comm_id, out.mad.tid), (6, 5, 9));
    assert_eq!((out.src, out.dst), (B_IP, A_IP));
}

#[test]
fn req_flood_is_bounded_by_the_backlog() {
    let mut p = Pair::new();
    let (l, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    let out = p.a.poll_transmit_msg().unwrap();
    let CmMsg::Req(req) = out.mad.msg else {
        panic!()
    };
    let rx = rx_from_a();
    for n in 0..1000u32 {
        let mut r = req.clone();
        r.local_comm_id = 1000 + n;
        r.local_qpn = 0x1000 + n;
        r.local_ca_guid = 0x5000 + n as u64;
        let m = CmMad {
            tid: n as u64,
            attr_mod: 0,
            msg: CmMsg::Req(r),
        };
        p.b.handle_msg(p.now, &rx, &m);
    }
    let ev = p.events_b();
    assert_eq!(ev.len(), 4, "backlog 4");
    assert!(ev.iter().all(|e| e.1.id == l));
    assert_eq!(p.b.counters().dropped_backlog, 996);
    assert_eq!(p.b.object_counts(), (5, 4));
    // The listener's owner goes away: everything is cleaned up.
    p.b.destroy_owned(p.now, ..);
    p.advance(Duration::from_secs(1));
    assert_eq!(p.b.object_counts(), (0, 0));
}

#[test]
fn a_reply_in_the_wrong_state_is_stale() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    let comm = p.a.conn_of(a).unwrap().0;
    let rx = MadRx {
        src: B_IP,
        dst: A_IP,
        hop_limit: 64,
        traffic_class: 0,
    };
    // An RTU or DREP to an active conn waiting for REP.
    p.a.handle_msg(p.now, &rx, &mads::rtu(1, 77, comm));
    p.a.handle_msg(p.now, &rx, &mads::drep(1, 77, comm));
    assert!(p.events_a().is_empty());
    assert!(p.a.conn_of(a).is_some());
    let _ = event::ESTABLISHED;
}

/// A peer that asks for the longest legal CM response timeout and ack
/// timeout (31: 2.4 hours each) and then never sends its RTU cannot pin
/// the passive side's connection for hours per retry: the times a peer
/// chooses are capped at 2^24 * 4.096 us (about 69 s), so every REP
/// retry and the final give-up come within minutes, and the QP's ack
/// timeout handed to the application is capped too.
#[test]
fn remote_chosen_cm_times_are_capped() {
    let slow = CmTiming {
        cm_response_timeout: 31,
        max_cm_retries: 15,
        packet_life_time: 30,
        local_ack_delay: 30,
    };
    // A (the peer) asks for 31 everywhere; B keeps the kernel's times.
    let mut p = Pair::with_timing(CmTiming::default());
    p.a = Cm::new(config(A_IP, A_GUID, 1, slow));
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, b"hi"), Ece::default())
        .unwrap();
    p.pump();
    let ev = p.events_b();
    assert_eq!(ev.len(), 1, "{ev:?}");
    let nb = ev[0].1.new_id;
    p.b.accept(p.now, nb, Some(&param(0x22, b"ok")), Ece::default())
        .unwrap();
    // The QP attributes B's application gets carry the capped ack timeout.
    let (_, attr) = p.b.init_qp_attr(nb, 3).unwrap();
    assert!(
        attr.timeout <= 24,
        "ack timeout {} from the peer",
        attr.timeout
    );
    // A never answers the REP.
    let start = p.now;
    let first = p.b.poll_timeout().expect("a REP timer");
    assert!(
        first - start <= Duration::from_secs(70),
        "REP retry after {:?}",
        first - start
    );
    p.run_out_with(|from_a, _| if from_a { Fate::Drop } else { Fate::Deliver });
    assert!(
        p.now - start <= Duration::from_secs(16 * 70),
        "the connection was pinned for {:?}",
        p.now - start
    );
}
