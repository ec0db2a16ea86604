//! Port spaces, binding rules, ephemeral ports, listen conflicts.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use rxu_abi::proto::cm::{event, port_space, CmOption};
use rxu_abi::proto::QpType;

use super::*;

fn any(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)
}

fn cm() -> Cm {
    Cm::new(config(A_IP, A_GUID, 7, CmTiming::default()))
}

/// The QP type ucma gives an id of `ps` (RDMA_PS_IB's is the caller's).
fn qp_type_of(ps: u16) -> QpType {
    if ps == port_space::UDP || ps == port_space::IPOIB {
        QpType::Ud
    } else {
        QpType::Rc
    }
}

fn bind(c: &mut Cm, ps: u16, addr: SocketAddr, reuse: bool) -> Result<u32, i32> {
    c.bind(1, ps, qp_type_of(ps), addr, reuse, false, None)
        .map(|x| x.0)
        .map_err(|e| e.errno())
}

#[test]
fn same_port_conflicts_per_port_space() {
    let mut c = cm();
    bind(&mut c, port_space::TCP, SocketAddr::new(A_IP, 5000), false).unwrap();
    assert_eq!(
        bind(&mut c, port_space::TCP, SocketAddr::new(A_IP, 5000), false),
        Err(libc::EADDRINUSE)
    );
    // Another port space has its own ports.
    bind(&mut c, port_space::UDP, SocketAddr::new(A_IP, 5000), false).unwrap();
    bind(&mut c, port_space::IB, SocketAddr::new(A_IP, 5000), false).unwrap();
    bind(
        &mut c,
        port_space::IPOIB,
        SocketAddr::new(A_IP, 5000),
        false,
    )
    .unwrap();
    // A wildcard beside a specific address: the kernel says EADDRNOTAVAIL.
    assert_eq!(
        bind(&mut c, port_space::TCP, any(5000), false),
        Err(libc::EADDRNOTAVAIL)
    );
}

#[test]
fn wildcard_then_specific_and_reuseaddr() {
    let mut c = cm();
    let w = bind(&mut c, port_space::TCP, any(5001), true).unwrap();
    assert_eq!(
        bind(&mut c, port_space::TCP, SocketAddr::new(A_IP, 5001), false),
        Err(libc::EADDRNOTAVAIL)
    );
    // Both reuseaddr: shared.
    let s = bind(&mut c, port_space::TCP, SocketAddr::new(A_IP, 5001), true).unwrap();
    // But a listener must be alone (reuseaddr is dropped at listen).
    assert_eq!(c.listen(w, 1).unwrap_err().errno(), libc::EADDRNOTAVAIL);
    c.destroy(std::time::Instant::now(), s).unwrap();
    c.listen(w, 1).unwrap();
    assert_eq!(
        bind(&mut c, port_space::TCP, SocketAddr::new(A_IP, 5001), true),
        Err(libc::EADDRNOTAVAIL)
    );
}

#[test]
fn afonly_v4_and_v6_wildcards_coexist() {
    let mut c = Cm::new(CmConfig {
        local_addrs: vec![A_IP, IpAddr::V6(Ipv6Addr::LOCALHOST)],
        ..config(A_IP, A_GUID, 7, CmTiming::default())
    });
    bind(&mut c, port_space::TCP, any(5002), false).unwrap();
    let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 5002);
    assert_eq!(
        c.bind(1, port_space::TCP, QpType::Rc, v6, false, false, None)
            .unwrap_err()
            .errno(),
        libc::EADDRNOTAVAIL
    );
    c.bind(1, port_space::TCP, QpType::Rc, v6, false, true, None)
        .unwrap();
}

#[test]
fn ephemeral_ports_come_from_the_range_and_differ() {
    let mut c = Cm::new(CmConfig {
        port_range: (40000, 40003),
        ..config(A_IP, A_GUID, 7, CmTiming::default())
    });
    let mut ports = Vec::new();
    for _ in 0..4 {
        let (_, a) = c
            .bind(
                1,
                port_space::TCP,
                QpType::Rc,
                SocketAddr::new(A_IP, 0),
                false,
                false,
                None,
            )
            .unwrap();
        assert!((40000..=40003).contains(&a.port()));
        ports.push(a.port());
    }
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 4);
    let e = c
        .bind(
            1,
            port_space::TCP,
            QpType::Rc,
            SocketAddr::new(A_IP, 0),
            false,
            false,
            None,
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EADDRNOTAVAIL);
}

#[test]
fn foreign_address_and_bad_port_space_are_refused() {
    let mut c = cm();
    let far = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)), 1);
    assert_eq!(bind(&mut c, port_space::TCP, far, false), Err(libc::ENODEV));
    let e = c
        .bind(1, port_space::TCP, QpType::Ud, any(1), false, false, None)
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    let e = c
        .bind(1, 0x4242, QpType::Rc, any(1), false, false, None)
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
}

#[test]
fn state_rules_and_unknown_ids() {
    let mut c = cm();
    let now = std::time::Instant::now();
    let id = bind(&mut c, port_space::TCP, any(5003), false).unwrap();
    assert_eq!(c.route(id).unwrap().num_paths, 0);
    c.listen(id, 0).unwrap();
    assert_eq!(c.listen(id, 5).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(
        c.resolve(id, SocketAddr::new(B_IP, 1)).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(c.disconnect(now, id).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(
        c.accept(now, id, None, Default::default())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        c.set_option(id, CmOption::ReuseAddr(true))
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    for r in [
        c.route(77).map(|_| ()),
        c.listen(77, 1),
        c.destroy(now, 77),
        c.set_owner(77, 1),
        c.disconnect(now, 77),
    ] {
        assert_eq!(r.unwrap_err().errno(), libc::ENOENT);
    }
    // The port is free again once the id is destroyed.
    c.destroy(now, id).unwrap();
    bind(&mut c, port_space::TCP, any(5003), false).unwrap();
}

#[test]
fn tos_and_ack_timeout_shape_the_route() {
    let mut c = cm();
    let id = bind(&mut c, port_space::TCP, SocketAddr::new(A_IP, 0), false).unwrap();
    c.resolve(id, SocketAddr::new(B_IP, 1)).unwrap();
    c.set_option(id, CmOption::Tos(32)).unwrap();
    c.set_option(id, CmOption::AckTimeout(14)).unwrap();
    let r = c.route(id).unwrap();
    assert_eq!(
        (
            r.traffic_class,
            r.packet_life_time,
            r.hop_limit,
            r.pkey,
            r.mtu
        ),
        (32, 13, 64, 0xFFFF, 3)
    );
    assert_eq!(r.dgid, crate::engine::route::gid(B_IP));
}

#[test]
fn a_vanished_address_gives_addr_change_once() {
    let mut p = Pair::new();
    let (_, a) = listen_and_resolve(&mut p, port_space::TCP, QpType::Rc);
    p.a.set_local_addrs(&[]);
    p.a.set_local_addrs(&[]);
    let ev = p.events_a();
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].1.id, ev[0].1.event), (a, event::ADDR_CHANGE));
    // Wildcard listeners are not bound to an address.
    p.b.set_local_addrs(&[]);
    assert!(p.events_b().is_empty());
}

#[test]
fn port_0_is_taken_at_bind_in_every_port_space() {
    let mut c = cm();
    let spaces = [
        port_space::TCP,
        port_space::UDP,
        port_space::IB,
        port_space::IPOIB,
    ];
    for ps in spaces {
        let qpt = qp_type_of(ps);
        for ip in [IpAddr::V4(Ipv4Addr::UNSPECIFIED), A_IP] {
            let (_, got) = c
                .bind(1, ps, qpt, SocketAddr::new(ip, 0), false, false, None)
                .unwrap();
            assert!(got.port() != 0 && got.ip() == ip, "{ps:#x}: {got}");
            // Reserved from the bind on: the kernel's cma_check_port
            // answers (a wildcard involved: EADDRNOTAVAIL).
            let again = bind(&mut c, ps, SocketAddr::new(A_IP, got.port()), false);
            let want = if ip.is_unspecified() {
                libc::EADDRNOTAVAIL
            } else {
                libc::EADDRINUSE
            };
            assert_eq!(again, Err(want), "{ps:#x} {got}");
        }
    }
}
