//! RC connection establishment, both sides, and its failures.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use rxu_abi::proto::cm::{event, port_space, Ece};
use rxu_abi::proto::QpType;

use super::*;
use crate::engine::qp_attr::{mask, qp_state};
use crate::engine::route::gid;
use crate::wire::{msg_ref, rej_reason, CmMsg};

fn mapped(ip: IpAddr) -> [u8; 16] {
    gid(ip)
}

#[test]
fn connect_accept_rtu_establishes_both_sides() {
    let mut p = Pair::new();
    let (l, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    let a_port = p.a.status()[0].local.port();
    let ece = Ece {
        vendor_id: 0x15b3,
        attr_mod: 0x3000_0000,
    };
    p.a.connect(p.now, a, &param(0x11, b"hello"), ece).unwrap();
    p.pump();

    // The REQ as §2.3 says the kernel fills it on RoCE.
    let CmMsg::Req(req) = &p.log[0].1.msg else {
        panic!("first MAD is not a REQ: {:?}", p.log[0]);
    };
    assert_eq!(p.log[0].1.attr_mod, 0x3000_0000);
    assert_eq!(req.vendor_id, 0x15b3);
    assert_eq!(req.service_id, 0x0106_0000 | PORT as u64);
    assert_eq!(req.local_ca_guid, A_GUID);
    assert_eq!(req.local_qpn, 0x11);
    let a_seq = p.a.ids[&a].seq_num;
    assert_eq!(req.starting_psn, a_seq);
    assert!(a_seq <= 0xFF_FFFF);
    assert_eq!(req.remote_cm_response_timeout, 20);
    assert_eq!(req.local_cm_response_timeout, 20);
    assert_eq!(req.max_cm_retries, 15);
    assert_eq!((req.retry_count, req.rnr_retry_count), (7, 7));
    assert_eq!(req.transport_type, 0);
    assert_eq!((req.pkey, req.path_mtu), (0xFFFF, 3));
    assert_eq!(
        (req.primary.local_lid, req.primary.remote_lid),
        (0xFFFF, 0xFFFF)
    );
    assert_eq!(req.primary.local_gid, mapped(A_IP));
    assert_eq!(req.primary.remote_gid, mapped(B_IP));
    assert_eq!(req.primary.hop_limit, 64);
    assert_eq!(req.primary.local_ack_timeout, 19);
    assert_eq!(
        req.primary.flow_label,
        (a_port as u32 * 31 + PORT as u32) & 0xFFFFF
    );
    assert_eq!(req.alternate, Default::default());
    let hdr = crate::wire::CmaHeader::parse(&req.private_data).unwrap();
    assert_eq!((hdr.src, hdr.dst, hdr.src_port), (A_IP, B_IP, a_port));
    assert_eq!(&req.private_data[36..41], b"hello");

    // CONNECT_REQUEST on the listener's owner.
    let ev = p.events_b();
    assert_eq!(ev.len(), 1);
    let (owner, r) = &ev[0];
    assert_eq!(*owner, OWNER_B);
    assert_eq!((r.id, r.event, r.status), (l, event::CONNECT_REQUEST, 0));
    let nb = r.new_id;
    assert_ne!(nb, l);
    assert_eq!(r.param.private_data.len(), 56);
    assert_eq!(&r.param.private_data[..5], b"hello");
    assert_eq!(r.param.qp_num, 0x11);
    assert_eq!((r.param.retry_count, r.param.rnr_retry_count), (7, 7));
    assert_eq!(r.ece, ece);
    assert_eq!(r.local, Some(SocketAddr::new(B_IP, PORT)));
    assert_eq!(r.remote, Some(SocketAddr::new(A_IP, a_port)));
    let route = r.route.clone().unwrap();
    assert_eq!((route.sgid, route.dgid), (mapped(B_IP), mapped(A_IP)));
    assert_eq!((route.node_guid, route.num_paths), (B_GUID, 1));

    // Passive QP attributes before the REP (librdmacm's rdma_accept).
    let (m, at) = p.b.init_qp_attr(nb, qp_state::INIT).unwrap();
    assert_eq!(m, 0x39);
    assert_eq!(at.qp_access_flags, 0x2 | 0x4 | 0x8);
    let (m, rtr) = p.b.init_qp_attr(nb, qp_state::RTR).unwrap();
    assert_eq!(m, 0x129181);
    assert_eq!(rtr.dest_qp_num, 0x11);
    assert_eq!(rtr.rq_psn, p.b.ids[&nb].seq_num);
    assert_eq!(
        (rtr.path_mtu, rtr.min_rnr_timer, rtr.max_dest_rd_atomic),
        (3, 0, 1)
    );
    assert!(rtr.ah.is_global);
    assert_eq!(
        (rtr.ah.dgid, rtr.ah.hop_limit, rtr.ah.port_num),
        (mapped(A_IP), 64, 1)
    );
    let (m, rts) = p.b.init_qp_attr(nb, qp_state::RTS).unwrap();
    assert_eq!(m, 0x12e01);
    assert_eq!(rts.sq_psn, a_seq);
    assert_eq!(
        (rts.timeout, rts.retry_cnt, rts.rnr_retry, rts.max_rd_atomic),
        (19, 7, 7, 1)
    );

    p.b.accept(p.now, nb, Some(&param(0x22, b"welcome")), Ece::default())
        .unwrap();
    p.pump();
    let CmMsg::Rep(rep) = &p.log.last().unwrap().1.msg else {
        panic!("no REP");
    };
    assert_eq!(rep.starting_psn, p.b.ids[&nb].seq_num);
    assert_eq!(
        (rep.target_ack_delay, rep.local_qpn, rep.local_ca_guid),
        (15, 0x22, B_GUID)
    );
    assert_eq!(p.log.last().unwrap().1.tid, p.log[0].1.tid);

    // CONNECT_RESPONSE on A: the REP's values, depths as the kernel swaps them.
    let ev = p.events_a();
    assert_eq!(ev.len(), 1);
    let r = &ev[0].1;
    assert_eq!((r.id, r.event, r.status), (a, event::CONNECT_RESPONSE, 0));
    assert_eq!(r.param.private_data.len(), 196);
    assert_eq!(&r.param.private_data[..7], b"welcome");
    assert_eq!(r.param.qp_num, 0x22);
    let (m, rtr) = p.a.init_qp_attr(a, qp_state::RTR).unwrap();
    assert_eq!((m, rtr.dest_qp_num, rtr.rq_psn), (0x129181, 0x22, a_seq));
    let (_, rts) = p.a.init_qp_attr(a, qp_state::RTS).unwrap();
    assert_eq!((rts.sq_psn, rts.timeout), (p.b.ids[&nb].seq_num, 19));

    // RTU: established, ESTABLISHED only on the passive side.
    p.a.accept(p.now, a, None, Ece::default()).unwrap();
    p.pump();
    assert!(p.events_a().is_empty());
    let ev = p.events_b();
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].1.id, ev[0].1.event), (nb, event::ESTABLISHED));
    assert_eq!(p.sent(true, is::<RTU>), 1);
    // Nothing is left running.
    assert_eq!(p.next_timer(), None);
    assert!(p.a.status()[0].state.contains("established"));
}

#[test]
fn duplicate_rep_after_rtu_gets_the_rtu_again() {
    let mut p = Pair::new();
    let (_, _, _) = establish(&mut p, 0x11, 0x22);
    let rep = p.log.iter().find(|(_, m)| is::<REP>(m)).unwrap().1.clone();
    let rx = MadRx {
        src: B_IP,
        dst: A_IP,
        hop_limit: 64,
        traffic_class: 0,
    };
    p.a.handle_msg(p.now, &rx, &rep);
    p.pump();
    assert_eq!(p.sent(true, is::<RTU>), 2);
    assert_eq!(p.a.counters().dropped_duplicate, 1);
    assert!(p.events_a().is_empty() && p.events_b().is_empty());
}

#[test]
fn no_listener_is_rejected_with_reason_8() {
    let mut p = Pair::new();
    let (a, _) =
        p.a.bind(
            OWNER_A,
            port_space::TCP,
            QpType::Rc,
            SocketAddr::new(A_IP, 0),
            false,
            false,
            None,
        )
        .unwrap();
    p.a.resolve(a, SocketAddr::new(B_IP, 9999)).unwrap();
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    let ev = p.events_a();
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].1.event, ev[0].1.status), (event::REJECTED, 8));
    assert_eq!(ev[0].1.param.private_data.len(), 148);
    assert_eq!(p.b.counters().rej_sent[&rej_reason::INVALID_SERVICE_ID], 1);
    assert_eq!(p.a.counters().rej_received[&8], 1);
    assert_eq!(p.next_timer(), None);
    assert_eq!(p.a.object_counts(), (1, 0));
}

#[test]
fn reject_carries_reason_28_and_private_data() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    let nb = p.events_b()[0].1.new_id;
    let CmMsg::Req(req) = &p.log[0].1.msg else {
        panic!("no REQ");
    };
    let a_comm = req.local_comm_id;
    let b_comm = passive_comm_id(&mut p);
    assert_eq!(
        p.b.reject(p.now, nb, &[7u8; 149], 0).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        p.b.reject(p.now, nb, b"no", 3).unwrap_err().errno(),
        libc::EINVAL
    );
    p.b.reject(p.now, nb, b"go away", 0).unwrap();
    p.pump();
    let CmMsg::Rej(rej) = &p.log.last().unwrap().1.msg else {
        panic!("no REJ");
    };
    // rdma_cm rejects from MRA_REQ_SENT: with B's comm ID, as the kernel
    // does (seen in the interop capture), not the 0 of plain REQ_RCVD.
    assert_eq!(
        (rej.local_comm_id, rej.remote_comm_id, rej.msg_rejected),
        (b_comm, a_comm, msg_ref::REQ)
    );
    assert_eq!(rej.reason, rej_reason::CONSUMER_DEFINED);
    assert_eq!(&rej.private_data[..7], b"go away");
    assert!(rej.private_data[7..].iter().all(|&b| b == 0));
    let ev = p.events_a();
    assert_eq!((ev[0].1.event, ev[0].1.status), (event::REJECTED, 28));
    assert_eq!(&ev[0].1.param.private_data[..7], b"go away");
    // Both conns are gone, the ids stay until destroyed.
    assert_eq!(p.a.object_counts().1 + p.b.object_counts().1, 0);
    assert_eq!(
        p.b.accept(p.now, nb, Some(&param(1, &[])), Ece::default())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
}

/// B's comm ID for the connection A requested (the REQ is `p.log[0]`):
/// the REQ delivered again draws B's MRA, which carries it.
pub(super) fn passive_comm_id(p: &mut Pair) -> u32 {
    let req = p.log[0].1.clone();
    let rx = MadRx {
        src: A_IP,
        dst: B_IP,
        hop_limit: 64,
        traffic_class: 0,
    };
    p.b.handle_msg(p.now, &rx, &req);
    p.pump();
    let CmMsg::Mra(mra) = &p.log.last().unwrap().1.msg else {
        panic!("no MRA: {:?}", p.log.last());
    };
    assert_ne!(mra.local_comm_id, 0);
    mra.local_comm_id
}

#[test]
fn reject_ece_is_reason_35() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    let nb = p.events_b()[0].1.new_id;
    p.b.reject(p.now, nb, &[], 35).unwrap();
    p.pump();
    assert_eq!(p.events_a()[0].1.status, 35);
}

#[test]
fn private_data_limits() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    let e =
        p.a.connect(p.now, a, &param(0x11, &[0; 57]), Ece::default())
            .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    p.a.connect(p.now, a, &param(0x11, &[0; 56]), Ece::default())
        .unwrap();
    p.pump();
    let nb = p.events_b()[0].1.new_id;
    let e =
        p.b.accept(p.now, nb, Some(&param(0x22, &[0; 197])), Ece::default())
            .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    p.b.accept(p.now, nb, Some(&param(0x22, &[0; 196])), Ece::default())
        .unwrap();
}

#[test]
fn unanswered_req_is_retransmitted_then_unreachable() {
    let mut p = Pair::new();
    let (a, _) =
        p.a.bind(
            OWNER_A,
            port_space::TCP,
            QpType::Rc,
            SocketAddr::new(A_IP, 0),
            false,
            false,
            None,
        )
        .unwrap();
    p.a.resolve(a, SocketAddr::new(B_IP, PORT)).unwrap();
    let t0 = p.now;
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    // 2 * 1024 + 4096 ms between sends (§2.8).
    assert_eq!(p.a.poll_timeout(), Some(t0 + Duration::from_millis(6144)));
    let mut sends = 0;
    let mut at = Vec::new();
    p.run_out_with(|from_a, m| {
        if from_a && is::<REQ>(m) {
            sends += 1;
        }
        Fate::Drop
    });
    for (_, m) in &p.log {
        at.push(m.tid);
    }
    assert_eq!(sends, 16, "one REQ and 15 retries");
    assert!(
        at.iter().all(|&t| t == at[0]),
        "a retransmission is the same MAD"
    );
    assert_eq!(p.now - t0, Duration::from_millis(6144 * 16));
    let ev = p.events_a();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].1.event, ev[0].1.status),
        (event::UNREACHABLE, -libc::ETIMEDOUT)
    );
    assert_eq!(p.a.counters().timeouts_req, 1);
    assert_eq!(p.a.counters().retransmissions, 15);
    assert_eq!(p.a.object_counts(), (1, 0));
}

#[test]
fn mra_extends_the_wait_for_rep() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    let _ = p.events_b();
    // The REQ comes again before the application answers: B sends an MRA.
    let req = p.log[0].1.clone();
    let rx = MadRx {
        src: A_IP,
        dst: B_IP,
        hop_limit: 64,
        traffic_class: 0,
    };
    p.b.handle_msg(p.now, &rx, &req);
    p.pump();
    let CmMsg::Mra(mra) = &p.log.last().unwrap().1.msg else {
        panic!("no MRA: {:?}", p.log.last());
    };
    assert_eq!((mra.msg_mraed, mra.service_timeout), (msg_ref::REQ, 24));
    assert!(
        p.events_b().is_empty(),
        "a duplicate REQ is not a new request"
    );
    // A now waits conv(24) + conv(19) ms instead of 6144 ms.
    assert_eq!(
        p.a.poll_timeout(),
        Some(p.now + Duration::from_millis(65536 + 2048))
    );
}

#[test]
fn unanswered_rep_ends_in_unreachable_on_the_passive_side() {
    let mut p = Pair::with_timing(fast());
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    let nb = p.events_b()[0].1.new_id;
    p.b.accept(p.now, nb, Some(&param(0x22, &[])), Ece::default())
        .unwrap();
    // A never sees a REP (nor sends RTU); A itself gives up on its REQ.
    p.run_out_with(|from_a, _| if from_a { Fate::Deliver } else { Fate::Drop });
    // The REP's 3 retries (the REQ's Max CM Retries) by the timer; A's
    // repeated REQs were answered with the REP too.
    assert_eq!(p.b.counters().retransmissions, 3);
    assert!(p.sent(false, is::<REP>) >= 4);
    // B gives up first (4 x 4 ms < 4 x 8 ms); A's later REQ retries are
    // then new requests again, as on a kernel.
    let ev = p.events_b();
    assert_eq!(
        (ev[0].1.id, ev[0].1.event, ev[0].1.status),
        (nb, event::UNREACHABLE, -libc::ETIMEDOUT)
    );
    assert!(ev[1..].iter().all(|e| e.1.event == event::CONNECT_REQUEST));
    assert!(p.b.counters().timeouts_rep >= 1);
}

#[test]
fn lost_rtu_is_covered_by_rep_retransmission() {
    let mut p = Pair::with_timing(fast());
    let (_, a, nb) = {
        let (l, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
        p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
            .unwrap();
        p.pump();
        let nb = p.events_b()[0].1.new_id;
        p.b.accept(p.now, nb, Some(&param(0x22, &[])), Ece::default())
            .unwrap();
        p.pump();
        p.a.accept(p.now, a, None, Ece::default()).unwrap();
        (l, a, nb)
    };
    // The first RTU is lost; B's REP comes again; A answers with RTU.
    let mut first = true;
    p.run_out_with(|_, m| {
        if is::<RTU>(m) && first {
            first = false;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let ev = p.events_b();
    assert_eq!(
        ev.iter()
            .filter(|e| e.1.event == event::ESTABLISHED)
            .count(),
        1
    );
    assert_eq!(p.sent(true, is::<RTU>), 2);
    assert!(p.a.conn_of(a).is_some() && p.b.conn_of(nb).is_some());
}

#[test]
fn specific_address_listener_matches_the_header_destination() {
    let mut p = Pair::new();
    p.b.set_local_addrs(&[B_IP, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3))]);
    let (l, _) =
        p.b.bind(
            OWNER_B,
            port_space::TCP,
            QpType::Rc,
            SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)), PORT),
            false,
            false,
            None,
        )
        .unwrap();
    p.b.listen(l, 1).unwrap();
    let (a, _) =
        p.a.bind(
            OWNER_A,
            port_space::TCP,
            QpType::Rc,
            SocketAddr::new(A_IP, 0),
            false,
            false,
            None,
        )
        .unwrap();
    p.a.resolve(a, SocketAddr::new(B_IP, PORT)).unwrap();
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    p.pump();
    // Someone listens on the port, but not on 127.0.0.2: the kernel's
    // rdma_cm handler fails and the IB CM rejects with reason 28.
    let ev = p.events_a();
    assert_eq!((ev[0].1.event, ev[0].1.status), (event::REJECTED, 28));
    assert!(p.events_b().is_empty());
}

#[test]
fn backlog_full_drops_the_req_so_the_peer_retries() {
    let mut p = Pair::with_timing(fast());
    let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), PORT);
    let (l, _) =
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
    p.b.listen(l, 1).unwrap();
    let mut ids = Vec::new();
    for q in 0..2 {
        let (a, _) =
            p.a.bind(
                OWNER_A,
                port_space::TCP,
                QpType::Rc,
                SocketAddr::new(A_IP, 0),
                false,
                false,
                None,
            )
            .unwrap();
        p.a.resolve(a, SocketAddr::new(B_IP, PORT)).unwrap();
        p.a.connect(p.now, a, &param(0x100 + q, &[]), Ece::default())
            .unwrap();
        ids.push(a);
    }
    p.pump();
    let ev = p.events_b();
    assert_eq!(ev.len(), 1, "one request fits the backlog");
    assert_eq!(p.b.counters().dropped_backlog, 1);
    assert_eq!(p.sent(false, is::<REJ>), 0, "no REJ for a full backlog");
    // Once the first is accepted, the second's retry gets in.
    p.b.accept(
        p.now,
        ev[0].1.new_id,
        Some(&param(0x200, &[])),
        Ece::default(),
    )
    .unwrap();
    p.advance(Duration::from_millis(10));
    let ev = p.events_b();
    assert_eq!(
        ev.iter()
            .filter(|e| e.1.event == event::CONNECT_REQUEST)
            .count(),
        1
    );
}

#[test]
fn init_qp_attr_before_connect_and_in_wrong_states() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    let (m, at) = p.a.init_qp_attr(a, qp_state::INIT).unwrap();
    assert_eq!(
        (m, at.qp_access_flags, at.port_num, at.pkey_index),
        (0x39, 0, 1, 0)
    );
    assert_eq!(m & mask::QKEY, 0);
    p.a.connect(p.now, a, &param(0x11, &[]), Ece::default())
        .unwrap();
    // REQ sent: INIT yes, RTR not yet.
    assert!(p.a.init_qp_attr(a, qp_state::INIT).is_ok());
    assert_eq!(
        p.a.init_qp_attr(a, qp_state::RTR).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(p.a.init_qp_attr(a, 9).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(p.a.init_qp_attr(999, 1).unwrap_err().errno(), libc::ENOENT);
}
