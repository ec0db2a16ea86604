//! An engine bound to 0.0.0.0 and [::] at once (`also_v6`), tied to the
//! loopback device, serving chosen local addresses only: a QP talks IPv4
//! through one socket, another IPv6 through the other, and packets to an
//! address the engine does not serve are dropped.

mod common;

use common::*;
use std::time::Duration;
use transport::qp::{access, send_flags, Payload, QpType, RecvWqe, SendOp, SendWqe, Sge, WcStatus};

const VA: u64 = 0x7000_0000;
const MEM: usize = 1 << 20;

fn sg(off: usize, len: usize, key: u32) -> Vec<Sge> {
    vec![Sge {
        addr: VA + off as u64,
        length: len as u32,
        lkey: key,
    }]
}

fn send(wr_id: u64, sges: Vec<Sge>) -> SendWqe {
    SendWqe {
        wr_id,
        op: SendOp::Send,
        flags: send_flags::SIGNALED,
        payload: Payload::Sges(sges),
        ud: None,
        xrc_srqn: None,
    }
}

/// Runs every engine until CQ `cq` of engine `who` has a completion.
fn run_until(es: &mut [&mut Eng], who: usize, cq: u32) -> transport::qp::Completion {
    let d = Deadline::after(Duration::from_secs(10));
    loop {
        for e in es.iter_mut() {
            e.run_once(Some(Duration::ZERO)).unwrap();
        }
        if let Some(c) = es[who].poll_cq(cq, 1).pop() {
            return c;
        }
        d.check(|| format!("no completion on engine {who} CQ {cq}"));
    }
}

#[test]
fn one_engine_serves_ipv4_and_ipv6_and_only_its_addresses() {
    // Both peers listen on one port (one IPv4, one IPv6 socket), as real
    // peers all listen on 4791.
    let (pw, pp) = (4801u16, 4802u16);
    let conn = Conn::default();
    let mut w = engine("0.0.0.0", |c| {
        c.port = pw;
        c.peer_port = pp;
        c.also_v6 = true;
        c.bind_device = Some("lo".into());
    });
    assert!(w.has_v6_side());
    // The peers send to the wildcard engine's port.
    let mut a = engine("127.0.0.71", |c| {
        c.port = pp;
        c.peer_port = pw;
    });
    let mut b = engine("::1", |c| {
        c.port = pp;
        c.peer_port = pw;
    });
    w.set_local_addrs(Some(&[ip("127.0.0.72"), ip("::1")]));
    let all = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let kw = w.memory_mut().register(PD, VA, Rng(1).bytes(MEM), all);
    let ka = a.memory_mut().register(PD, VA, Rng(2).bytes(MEM), all);
    let kb = b.memory_mut().register(PD, VA, Rng(3).bytes(MEM), all);
    let w4 = w.create_qp(spec(QpType::Rc)).unwrap();
    let w6 = w.create_qp(spec(QpType::Rc)).unwrap();
    let qa = a.create_qp(spec(QpType::Rc)).unwrap();
    let qb = b.create_qp(spec(QpType::Rc)).unwrap();
    connect(&mut w, w4, QpType::Rc, Some((qa, ip("127.0.0.71"))), &conn);
    connect(&mut w, w6, QpType::Rc, Some((qb, ip("::1"))), &conn);
    w.set_qp_source(w4, ip("127.0.0.72")).unwrap();
    w.set_qp_source(w6, ip("::1")).unwrap();
    connect(&mut a, qa, QpType::Rc, Some((w4, ip("127.0.0.72"))), &conn);
    connect(&mut b, qb, QpType::Rc, Some((w6, ip("::1"))), &conn);
    for (q, wr) in [(w4, 1u64), (w6, 2)] {
        w.post_recv(
            q,
            RecvWqe {
                wr_id: wr,
                sges: sg(0x8000 * wr as usize, 0x8000, kw),
            },
        )
        .unwrap();
    }
    a.post_send(qa, send(10, sg(0, 5000, ka))).unwrap();
    let c = run_until(&mut [&mut w, &mut a], 0, RECV_CQ);
    assert_eq!(
        (c.status, c.wr_id, c.byte_len),
        (WcStatus::Success, 1, 5000)
    );
    let c = run_until(&mut [&mut w, &mut a], 1, SEND_CQ);
    assert_eq!(c.status, WcStatus::Success, "IPv4 ACK from 127.0.0.72");
    b.post_send(qb, send(20, sg(0, 3000, kb))).unwrap();
    let c = run_until(&mut [&mut w, &mut b], 0, RECV_CQ);
    assert_eq!(
        (c.status, c.wr_id, c.byte_len),
        (WcStatus::Success, 2, 3000)
    );
    let c = run_until(&mut [&mut w, &mut b], 1, SEND_CQ);
    assert_eq!(c.status, WcStatus::Success, "IPv6 ACK from ::1");
    // And the wildcard engine sends first, on both sockets.
    a.post_recv(
        qa,
        RecvWqe {
            wr_id: 30,
            sges: sg(0, 0x8000, ka),
        },
    )
    .unwrap();
    b.post_recv(
        qb,
        RecvWqe {
            wr_id: 31,
            sges: sg(0, 0x8000, kb),
        },
    )
    .unwrap();
    w.post_send(w4, send(40, sg(0, 7000, kw))).unwrap();
    w.post_send(w6, send(41, sg(0, 7000, kw))).unwrap();
    let c = run_until(&mut [&mut w, &mut a, &mut b], 1, RECV_CQ);
    assert_eq!((c.wr_id, c.byte_len), (30, 7000));
    let c = run_until(&mut [&mut w, &mut a, &mut b], 2, RECV_CQ);
    assert_eq!((c.wr_id, c.byte_len), (31, 7000));
    for _ in 0..2 {
        let c = run_until(&mut [&mut w, &mut a, &mut b], 0, SEND_CQ);
        assert_eq!(c.status, WcStatus::Success);
    }
    assert_eq!(w.counters().icrc_errors + w.counters().send_errors, 0);
    assert_eq!(w.counters().not_local, 0);

    // 127.0.0.72 is no longer served: A's packets are dropped unseen.
    w.set_local_addrs(Some(&[ip("::1")]));
    w.post_recv(
        w4,
        RecvWqe {
            wr_id: 3,
            sges: sg(0x20000, 0x8000, kw),
        },
    )
    .unwrap();
    a.post_send(qa, send(11, sg(0, 100, ka))).unwrap();
    let d = Deadline::after(Duration::from_secs(5));
    while w.counters().not_local == 0 {
        w.run_once(Some(Duration::ZERO)).unwrap();
        a.run_once(Some(Duration::ZERO)).unwrap();
        d.check(|| "no packet dropped as not local".into());
    }
    assert!(w.poll_cq(RECV_CQ, 1).is_empty());
}
