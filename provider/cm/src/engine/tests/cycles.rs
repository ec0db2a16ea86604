//! 1000 connect/disconnect cycles: no growth in ids, conns, timers,
//! remote tables or ports.

use std::time::Duration;

use rxu_abi::proto::cm::{port_space, Ece};
use rxu_abi::proto::QpType;

use super::*;

#[test]
fn a_thousand_cycles_leave_nothing_behind() {
    let mut p = Pair::with_timing(fast());
    let any =
        std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), PORT);
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
    p.b.listen(l, 8).unwrap();
    for n in 0..1000u32 {
        let (a, _) =
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
        p.a.resolve(a, std::net::SocketAddr::new(B_IP, PORT))
            .unwrap();
        p.a.connect(p.now, a, &param(0x100 + n, &[]), Ece::default())
            .unwrap();
        p.pump();
        let nb = p.events_b()[0].1.new_id;
        p.b.accept(p.now, nb, Some(&param(0x9000 + n, &[])), Ece::default())
            .unwrap();
        p.pump();
        p.a.accept(p.now, a, None, Ece::default()).unwrap();
        p.pump();
        let _ = p.events_a();
        let _ = p.events_b();
        if n % 2 == 0 {
            p.a.disconnect(p.now, a).unwrap();
        } else {
            p.b.disconnect(p.now, nb).unwrap();
        }
        p.pump();
        p.a.destroy(p.now, a).unwrap();
        p.b.destroy(p.now, nb).unwrap();
        p.advance(Duration::from_millis(1));
    }
    p.run_out();
    assert_eq!(p.a.object_counts(), (0, 0));
    assert_eq!(p.b.object_counts(), (1, 0));
    for c in [&p.a, &p.b] {
        assert!(c.remote_ids.is_empty() && c.remote_qps.is_empty() && c.timers.is_empty());
        assert!(c.tx.is_empty() && c.events.is_empty());
    }
    assert_eq!(p.a.counters().sent[0], 1000);
}
