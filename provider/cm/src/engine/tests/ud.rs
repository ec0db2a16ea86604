//! UD ids: SIDR_REQ / SIDR_REP.

use rxu_abi::proto::cm::{event, port_space, Ece, RDMA_UDP_QKEY};
use rxu_abi::proto::QpType;

use super::*;
use crate::engine::qp_attr::qp_state;
use crate::engine::route::gid;
use crate::wire::{sidr_status, CmMsg};

#[test]
fn sidr_resolves_a_ud_service() {
    let mut p = Pair::new();
    let (l, a) = listen_and_resolve(&mut p, port_space::UDP, QpType::Ud);
    let (m, at) = p.a.init_qp_attr(a, qp_state::INIT).unwrap();
    assert_eq!((m, at.qkey), (0x71, RDMA_UDP_QKEY));
    p.a.connect(p.now, a, &param(0x33, b"ud?"), Ece::default())
        .unwrap();
    p.pump();
    let CmMsg::SidrReq(r) = &p.log[0].1.msg else {
        panic!("no SIDR_REQ");
    };
    assert_eq!((r.pkey, r.service_id), (0xFFFF, 0x0111_0000 | PORT as u64));
    assert_eq!(&r.private_data[36..39], b"ud?");
    let ev = p.events_b();
    let rq = &ev[0].1;
    assert_eq!((rq.id, rq.event), (l, event::CONNECT_REQUEST));
    assert_eq!(rq.param.private_data.len(), 180);
    let ah = rq.param.ah.unwrap();
    assert_eq!(
        (ah.dgid, ah.is_global, ah.sgid_index, ah.hop_limit),
        (gid(A_IP), true, 0, 64)
    );
    let nb = rq.new_id;
    let e =
        p.b.accept(p.now, nb, Some(&param(0x44, &[0; 137])), Ece::default())
            .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    p.b.accept(p.now, nb, Some(&param(0x44, b"yes")), Ece::default())
        .unwrap();
    p.pump();
    let CmMsg::SidrRep(rep) = &p.log.last().unwrap().1.msg else {
        panic!("no SIDR_REP");
    };
    assert_eq!(
        (rep.status, rep.qpn, rep.qkey),
        (sidr_status::OK, 0x44, RDMA_UDP_QKEY)
    );
    let ev = p.events_a();
    let e = &ev[0].1;
    assert_eq!((e.id, e.event, e.status), (a, event::ESTABLISHED, 0));
    assert_eq!((e.param.qp_num, e.param.qkey), (0x44, RDMA_UDP_QKEY));
    let ah = e.param.ah.unwrap();
    assert_eq!(
        (ah.dgid, ah.is_global, ah.hop_limit, ah.port_num),
        (gid(B_IP), true, 64, 1)
    );
    assert_eq!(&e.param.private_data[..3], b"yes");
    assert_eq!(p.next_timer(), None);
    assert_eq!(p.a.object_counts().1 + p.b.object_counts().1, 0);
}

#[test]
fn sidr_without_listener_is_unreachable_with_status_1() {
    let mut p = Pair::new();
    let (a, _) =
        p.a.bind(
            OWNER_A,
            port_space::UDP,
            QpType::Ud,
            std::net::SocketAddr::new(A_IP, 0),
            false,
            false,
            None,
        )
        .unwrap();
    p.a.resolve(a, std::net::SocketAddr::new(B_IP, 4444))
        .unwrap();
    p.a.connect(p.now, a, &param(0x33, &[]), Ece::default())
        .unwrap();
    p.pump();
    let ev = p.events_a();
    assert_eq!(
        (ev[0].1.event, ev[0].1.status),
        (event::UNREACHABLE, sidr_status::UNSUPPORTED as i32)
    );
}

#[test]
fn sidr_reject_and_timeout() {
    let mut p = Pair::with_timing(fast());
    let (_, a) = listen_and_resolve(&mut p, port_space::UDP, QpType::Ud);
    p.a.connect(p.now, a, &param(0x33, &[]), Ece::default())
        .unwrap();
    p.pump();
    let nb = p.events_b()[0].1.new_id;
    p.b.reject(p.now, nb, b"no", 0).unwrap();
    p.pump();
    let ev = p.events_a();
    assert_eq!(
        (ev[0].1.event, ev[0].1.status),
        (event::UNREACHABLE, sidr_status::REJECT as i32)
    );

    // Nobody answers: UNREACHABLE -ETIMEDOUT after the retries.
    let (a2, _) =
        p.a.bind(
            OWNER_A,
            port_space::UDP,
            QpType::Ud,
            std::net::SocketAddr::new(A_IP, 0),
            false,
            false,
            None,
        )
        .unwrap();
    p.a.resolve(a2, std::net::SocketAddr::new(B_IP, PORT))
        .unwrap();
    p.a.connect(p.now, a2, &param(0x33, &[]), Ece::default())
        .unwrap();
    p.run_out_with(|_, _| Fate::Drop);
    let ev = p.events_a();
    assert_eq!(
        (ev[0].1.id, ev[0].1.event, ev[0].1.status),
        (a2, event::UNREACHABLE, -libc::ETIMEDOUT)
    );
    assert_eq!(p.a.counters().timeouts_sidr, 1);
    assert_eq!(p.sent(true, is::<SIDR_REQ>), 1 + 4);
}

#[test]
fn duplicate_sidr_req_is_dropped_while_pending() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::UDP, QpType::Ud);
    p.a.connect(p.now, a, &param(0x33, &[]), Ece::default())
        .unwrap();
    p.pump_with(|_, m| {
        if is::<SIDR_REQ>(m) {
            Fate::Duplicate
        } else {
            Fate::Deliver
        }
    });
    assert_eq!(p.events_b().len(), 1);
    assert_eq!(p.b.counters().dropped_duplicate, 1);
    let _ = SIDR_REP;
}

#[test]
fn event_address_vectors_name_the_source_gid_entry() {
    let mut p = Pair::new();
    // B serves another address first: its GID table is [10.9.9.9, B_IP],
    // so B's address vectors use entry 1 (entry 0 would send from
    // 10.9.9.9), A's entry 0.
    let other: IpAddr = "10.9.9.9".parse().unwrap();
    p.b.set_local_addrs(&[other, B_IP]);
    let (_, a) = listen_and_resolve(&mut p, port_space::UDP, QpType::Ud);
    p.a.connect(p.now, a, &param(0x33, b"ud?"), Ece::default())
        .unwrap();
    p.pump();
    let ev = p.events_b();
    let rq = &ev[0].1;
    let ah = rq.param.ah.unwrap();
    assert_eq!((ah.dgid, ah.sgid_index, ah.port_num), (gid(A_IP), 1, 1));
    p.b.accept(p.now, rq.new_id, Some(&param(0x44, b"yes")), Ece::default())
        .unwrap();
    p.pump();
    let ah = p.events_a()[0].1.param.ah.unwrap();
    assert_eq!((ah.dgid, ah.sgid_index), (gid(B_IP), 0));
    // The rule is the daemon's GID table's: IPv4 first, then IPv6, once.
    let v6: IpAddr = "::1".parse().unwrap();
    let addrs = [v6, other, B_IP, other];
    assert_eq!(crate::engine::sgid_index(&addrs, &gid(other)), 0);
    assert_eq!(crate::engine::sgid_index(&addrs, &gid(B_IP)), 1);
    assert_eq!(crate::engine::sgid_index(&addrs, &gid(v6)), 2);
}
