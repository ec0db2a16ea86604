//! Property: random interleavings of commands, clock steps and MAD loss or
//! duplication between two engines never panic, and once every id is
//! destroyed and the timers ran out, nothing is left on either side.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use proptest::prelude::*;
use rxu_abi::proto::cm::{event, port_space, Ece};
use rxu_abi::proto::QpType;

use super::*;

#[derive(Clone, Debug)]
enum Op {
    Connect,
    Accept(usize),
    Reject(usize),
    Rtu(usize),
    DisconnectA(usize),
    DisconnectB(usize),
    DestroyA(usize),
    DestroyB(usize),
    Advance(u16),
    Pump,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Connect),
        3 => any::<usize>().prop_map(Op::Accept),
        1 => any::<usize>().prop_map(Op::Reject),
        3 => any::<usize>().prop_map(Op::Rtu),
        2 => any::<usize>().prop_map(Op::DisconnectA),
        2 => any::<usize>().prop_map(Op::DisconnectB),
        1 => any::<usize>().prop_map(Op::DestroyA),
        1 => any::<usize>().prop_map(Op::DestroyB),
        2 => (0u16..200).prop_map(Op::Advance),
        4 => Just(Op::Pump),
    ]
}

fn pick(v: &[u32], k: usize) -> Option<u32> {
    (!v.is_empty()).then(|| v[k % v.len()])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn engines_never_panic_and_free_everything(
        ops in proptest::collection::vec(op(), 1..60),
        fates in proptest::collection::vec(0u8..10, 1..40),
    ) {
        let mut p = Pair::with_timing(fast());
        let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), PORT);
        let (l, _) = p.b.bind(OWNER_B, port_space::TCP, QpType::Rc, any, false, false, None).unwrap();
        p.b.listen(l, 2).unwrap();
        let (mut ids_a, mut ids_b) = (Vec::<u32>::new(), Vec::<u32>::new());
        let mut qpn = 0x100u32;
        let mut k = 0usize;
        let mut fate = move |_: bool, _: &CmMad| {
            k += 1;
            match fates[k % fates.len()] {
                0 => Fate::Drop,
                1 => Fate::Duplicate,
                _ => Fate::Deliver,
            }
        };
        let now = |p: &Pair| p.now;
        for o in ops {
            match o {
                Op::Connect => {
                    let (a, _) = p.a.bind(OWNER_A, port_space::TCP, QpType::Rc, SocketAddr::new(A_IP, 0), false, false, None).unwrap();
                    p.a.resolve(a, SocketAddr::new(B_IP, PORT)).unwrap();
                    qpn += 1;
                    p.a.connect(now(&p), a, &param(qpn, &[1, 2, 3]), Ece::default()).unwrap();
                    ids_a.push(a);
                }
                Op::Accept(k) => if let Some(b) = pick(&ids_b, k) {
                    qpn += 1;
                    let _ = p.b.accept(now(&p), b, Some(&param(qpn, &[])), Ece::default());
                },
                Op::Reject(k) => if let Some(b) = pick(&ids_b, k) {
                    let _ = p.b.reject(now(&p), b, b"no", 0);
                },
                Op::Rtu(k) => if let Some(a) = pick(&ids_a, k) {
                    let _ = p.a.accept(now(&p), a, None, Ece::default());
                },
                Op::DisconnectA(k) => if let Some(a) = pick(&ids_a, k) {
                    let _ = p.a.disconnect(now(&p), a);
                },
                Op::DisconnectB(k) => if let Some(b) = pick(&ids_b, k) {
                    let _ = p.b.disconnect(now(&p), b);
                },
                Op::DestroyA(k) => if let Some(a) = pick(&ids_a, k) {
                    p.a.destroy(now(&p), a).unwrap();
                    ids_a.retain(|&x| x != a);
                },
                Op::DestroyB(k) => if let Some(b) = pick(&ids_b, k) {
                    p.b.destroy(now(&p), b).unwrap();
                    ids_b.retain(|&x| x != b);
                },
                Op::Advance(ms) => {
                    p.now += Duration::from_millis(ms as u64);
                    p.a.handle_timeout(p.now);
                    p.b.handle_timeout(p.now);
                }
                Op::Pump => { p.pump_with(&mut fate); }
            }
            for (_, e) in p.events_b() {
                if e.event == event::CONNECT_REQUEST {
                    prop_assert_eq!(e.id, l);
                    ids_b.push(e.new_id);
                }
                // Events only for live ids.
                prop_assert!(e.id == l || ids_b.contains(&e.id));
            }
            for (_, e) in p.events_a() {
                prop_assert!(ids_a.contains(&e.id));
            }
        }
        // Everyone goes away; the network keeps misbehaving meanwhile.
        p.a.destroy_owned(p.now, ..);
        p.b.destroy_owned(p.now, ..);
        p.run_out_with(&mut fate);
        prop_assert_eq!(p.a.object_counts(), (0, 0));
        prop_assert_eq!(p.b.object_counts(), (0, 0));
        for c in [&p.a, &p.b] {
            prop_assert!(c.remote_ids.is_empty() && c.remote_qps.is_empty());
            prop_assert!(c.timers.is_empty() && c.events.is_empty());
            prop_assert!(c.ports.is_free(port_space::TCP, PORT));
        }
    }
}
