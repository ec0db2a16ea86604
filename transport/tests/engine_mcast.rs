//! UD multicast through real sockets, in a private network namespace (so
//! nothing of it is seen outside the test, and port 4791 is free there):
//! one SEND to a group reaches every QP attached to it on every engine
//! of the host, the sender's own included, and none that detached.

mod common;

use common::*;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::Duration;
use transport::engine::MCAST_QPN;
use transport::qp::{access, send_flags, Payload, QpType, RecvWqe, SendOp, SendWqe, Sge, UdDest};

const VA: u64 = 0x5000_0000;
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);

/// Runs `f` on a thread of its own in a new network namespace with `lo`
/// up (sockets and children of that thread live there; the rest of the
/// test process does not).
fn in_private_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: unshare only changes this thread's namespaces.
        let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            r,
            0,
            "unshare(CLONE_NEWNET) needs CAP_SYS_ADMIN: {}",
            std::io::Error::last_os_error()
        );
        let st = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .expect("ip link");
        assert!(st.success(), "ip link set lo up: {st}");
        f()
    })
    .join()
    .expect("test thread")
}

/// A UD QP with one 128-byte receive posted (wr_id `slot`); returns
/// (qpn, lkey).
fn ud_member(e: &mut Eng, slot: u64) -> (u32, u32) {
    let va = VA + slot * 0x1000;
    let key = e
        .memory_mut()
        .register(PD, va, vec![0; 128], access::LOCAL_WRITE);
    let q = e.create_qp(spec(QpType::Ud)).unwrap();
    connect(e, q, QpType::Ud, None, &Conn::default());
    let sges = vec![Sge {
        addr: va,
        length: 128,
        lkey: key,
    }];
    e.post_recv(q, RecvWqe { wr_id: slot, sges }).unwrap();
    (q, key)
}

#[test]
fn one_send_to_a_group_reaches_every_attached_qp_on_the_host() {
    in_private_netns(|| {
        let mut tx = engine("127.0.0.1", |_| {});
        let mut r2 = engine("127.0.0.2", |_| {});
        let mut r3 = engine("127.0.0.3", |_| {});
        let g = IpAddr::V4(GROUP);
        let mapped = IpAddr::V6(GROUP.to_ipv6_mapped());
        let own = ud_member(&mut tx, 1);
        let a = ud_member(&mut r2, 2);
        let b = ud_member(&mut r2, 3);
        let c = ud_member(&mut r3, 4);
        let left = ud_member(&mut r3, 5);
        tx.attach_mcast(own.0, g).unwrap();
        r2.attach_mcast(a.0, mapped).unwrap();
        r2.attach_mcast(b.0, g).unwrap();
        r3.attach_mcast(c.0, g).unwrap();
        r3.attach_mcast(left.0, g).unwrap();
        r3.detach_mcast(left.0, mapped).unwrap();
        let sender = tx.create_qp(spec(QpType::Ud)).unwrap();
        connect(&mut tx, sender, QpType::Ud, None, &Conn::default());
        let key = tx
            .memory_mut()
            .register(PD, VA, b"hello, group".to_vec(), 0);
        let w = SendWqe {
            wr_id: 99,
            op: SendOp::Send,
            flags: send_flags::SIGNALED,
            payload: Payload::Sges(vec![Sge {
                addr: VA,
                length: 12,
                lkey: key,
            }]),
            ud: Some(UdDest {
                addr: g,
                qpn: MCAST_QPN,
                qkey: QKEY,
            }),
        };
        tx.post_send(sender, w).unwrap();
        let d = Deadline::after(Duration::from_secs(5));
        let want = |e: &mut Eng, n| e.cq_len(RECV_CQ) >= n;
        while !(want(&mut tx, 1) && want(&mut r2, 2) && want(&mut r3, 1)) {
            for e in [&mut tx, &mut r2, &mut r3] {
                e.run_once(Some(Duration::from_millis(2))).unwrap();
            }
            d.check(|| "the group's members did not all receive".into());
        }
        // Give a stray copy (to the detached QP, or a duplicate) time to land.
        for _ in 0..20 {
            for e in [&mut tx, &mut r2, &mut r3] {
                e.run_once(Some(Duration::from_millis(1))).unwrap();
            }
        }
        let sent = tx.poll_cq(SEND_CQ, 8);
        assert_eq!(sent.len(), 1);
        // To a group the sender's own engine joined: by UDP (the kernel
        // copies it to every member socket), not the intra-device shortcut.
        let n = tx.counters();
        assert!(
            n.tx_syscalls > 0 && n.loop_sent_pkts + n.loop_rcvd_pkts == 0,
            "{n:?}"
        );
        for (e, members) in [
            (&mut tx, vec![own]),
            (&mut r2, vec![a, b]),
            (&mut r3, vec![c]),
        ] {
            let mut got = e.poll_cq(RECV_CQ, 8);
            got.sort_by_key(|x| x.wr_id);
            assert_eq!(got.len(), members.len(), "{got:?}");
            for (w, m) in got.iter().zip(&members) {
                assert_eq!((w.qp_num, w.src_qp, w.byte_len), (m.0, sender, 40 + 12));
                let data = &e.memory().region(m.1).unwrap().data;
                assert_eq!(&data[40..52], b"hello, group");
                // The GRH's destination is the group.
                assert_eq!(&data[36..40], &GROUP.octets());
            }
        }
        // The detached QP got nothing: its receive is still there.
        assert!(r3.poll_cq(RECV_CQ, 8).is_empty());
        // Leaving: the last detach leaves the IP group.
        r3.destroy_qp(c.0).unwrap();
        assert_eq!(r3.endpoint().mcast_groups().count(), 0);
    });
}
