//! The engine's packet counters count RoCE packets on both sides, also when
//! UDP GSO sends several in one datagram: found by the kernel-rxe interop
//! run, where rxu's sent_pkts fell short of the capture by the GSO segments
//! (4 per 4 KiB SEND at path MTU 1024) while rcvd_pkts matched.

mod common;

use common::*;
use std::sync::atomic::Ordering;
use std::time::Duration;
use transport::engine::EngineCounters;
use transport::qp::{access, send_flags, Mtu, Payload, QpType, SendOp, SendWqe, Sge};

const VA: u64 = 0x7100_0000;
const LEN: usize = 64 * 1024;

#[test]
fn sent_pkts_counts_gso_segments_as_packets() {
    let _g = heavy_lock();
    let (a_ip, b_ip) = ("127.0.0.71", "127.0.0.72");
    let conn = Conn {
        mtu: Mtu::M1024,
        ..Conn::default()
    };
    let (a, b): (EngineCounters, EngineCounters) = pair(
        |link| {
            let mut e = engine(a_ip, |_| {});
            let key = e
                .memory_mut()
                .register(PD, VA, Rng(7).bytes(LEN), access::LOCAL_WRITE);
            let q = e.create_qp(spec(QpType::Rc)).unwrap();
            link.send(u64::from(q));
            let (peer, rkey) = (link.recv() as u32, link.recv() as u32);
            connect(&mut e, q, QpType::Rc, Some((peer, ip(b_ip))), &conn);
            e.post_send(
                q,
                SendWqe {
                    wr_id: 1,
                    op: SendOp::Write {
                        remote_addr: VA,
                        rkey,
                    },
                    flags: send_flags::SIGNALED,
                    payload: Payload::Sges(vec![Sge {
                        addr: VA,
                        length: LEN as u32,
                        lkey: key,
                    }]),
                    ud: None,
                    xrc_srqn: None,
                },
            )
            .unwrap();
            let d = Deadline::after(Duration::from_secs(10));
            loop {
                e.run_once(Some(Duration::from_millis(5))).unwrap();
                if let Some(c) = e.poll_cq(SEND_CQ, 1).pop() {
                    assert_eq!(c.status, transport::qp::WcStatus::Success, "{c:?}");
                    break;
                }
                d.check(|| format!("no WRITE completion: {:?}", e.counters()));
            }
            link.shared[0].store(1, Ordering::Relaxed);
            // Take in B's stragglers until B has read its counters.
            while link.shared[1].load(Ordering::Relaxed) == 0 {
                e.run_once(Some(Duration::from_millis(5))).unwrap();
                d.check(|| "B did not finish".into());
            }
            e.counters()
        },
        |link| {
            let mut e = engine(b_ip, |_| {});
            let key = e.memory_mut().register(
                PD,
                VA,
                vec![0; LEN],
                access::REMOTE_WRITE | access::LOCAL_WRITE,
            );
            let q = e.create_qp(spec(QpType::Rc)).unwrap();
            let peer = link.recv() as u32;
            link.send(u64::from(q));
            link.send(u64::from(key));
            connect(&mut e, q, QpType::Rc, Some((peer, ip(a_ip))), &conn);
            let d = Deadline::after(Duration::from_secs(10));
            while link.shared[0].load(Ordering::Relaxed) == 0 {
                e.run_once(Some(Duration::from_millis(5))).unwrap();
                d.check(|| format!("A did not complete: {:?}", e.counters()));
            }
            // A has its completion: everything B had to send went.
            for _ in 0..10 {
                e.run_once(Some(Duration::from_millis(2))).unwrap();
            }
            let c = e.counters();
            link.shared[1].store(1, Ordering::Relaxed);
            c
        },
    );
    assert!(a.sent_pkts >= 64, "64 KiB at MTU 1024 is 64 packets: {a:?}");
    assert_eq!(
        a.sent_pkts, b.rcvd_pkts,
        "A sent / B received\nA {a:?}\nB {b:?}"
    );
    assert_eq!(
        b.sent_pkts, a.rcvd_pkts,
        "B sent / A received\nA {a:?}\nB {b:?}"
    );
}
