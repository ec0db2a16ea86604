//! Engine features around the QPs, over loopback without faults: an
//! engine bound to the wildcard address (local address per datagram from
//! IP_PKTINFO, replies from the address the peer used or a pinned one), an
//! SRQ shared by two QPs, destroying a QP.

mod common;

use common::*;
use std::time::Duration;
use transport::engine::QpSpec;
use transport::qp::{
    access, send_flags, Payload, QpType, RecvWqe, SendOp, SendWqe, Sge, WcOpcode, WcStatus,
};

const VA: u64 = 0x7000_0000;
const MEM: usize = 1 << 20;

fn sg(off: usize, len: usize, key: u32) -> Vec<Sge> {
    vec![Sge {
        addr: VA + off as u64,
        length: len as u32,
        lkey: key,
    }]
}

fn wqe(wr_id: u64, op: SendOp, sges: Vec<Sge>) -> SendWqe {
    SendWqe {
        wr_id,
        op,
        flags: send_flags::SIGNALED,
        payload: Payload::Sges(sges),
        ud: None,
        xrc_srqn: None,
    }
}

/// Runs `e` until CQ `cq` has `n` completions; all must succeed.
fn complete(e: &mut Eng, cq: u32, n: usize) -> Vec<transport::qp::Completion> {
    let d = Deadline::after(Duration::from_secs(10));
    let mut v = Vec::new();
    while v.len() < n {
        e.run_once(Some(Duration::from_millis(5))).unwrap();
        v.extend(e.poll_cq(cq, n - v.len()));
        d.check(|| format!("{} of {n} completions: {v:?}; {:?}", v.len(), e.counters()));
    }
    for c in &v {
        assert_eq!(c.status, WcStatus::Success, "{c:?}");
    }
    v
}

fn idle_until_stopped(e: &mut Eng, link: &Link) {
    while !link.stopped() {
        e.run_once(Some(Duration::from_millis(5))).unwrap();
    }
}

#[test]
fn wildcard_bound_engine_answers_from_the_address_it_was_reached_at() {
    // B listens on 0.0.0.0:4797 and is reached at 127.0.0.52; A is on
    // 127.0.0.51:4798.
    let (pa, pb) = (4798u16, 4797u16);
    let conn = Conn::default();
    let (a, b) = pair(
        |link| {
            let mut e = engine("127.0.0.51", |c| {
                c.port = pa;
                c.peer_port = pb;
            });
            let key = e
                .memory_mut()
                .register(PD, VA, Rng(5).bytes(MEM), access::LOCAL_WRITE);
            let q1 = e.create_qp(spec(QpType::Rc)).unwrap();
            let q2 = e.create_qp(spec(QpType::Rc)).unwrap();
            link.send(u64::from(q1));
            link.send(u64::from(q2));
            let (p1, p2, rkey) = (link.recv() as u32, link.recv() as u32, link.recv() as u32);
            connect(&mut e, q1, QpType::Rc, Some((p1, ip("127.0.0.52"))), &conn);
            connect(&mut e, q2, QpType::Rc, Some((p2, ip("127.0.0.52"))), &conn);
            e.post_recv(
                q2,
                RecvWqe {
                    wr_id: 9,
                    sges: sg(0x80000, 65536, key),
                },
            )
            .unwrap();
            link.send(0);
            // Requests to the wildcard engine; its answers must come from
            // 127.0.0.52 or this QP would drop them.
            e.post_send(
                q1,
                wqe(
                    1,
                    SendOp::Write {
                        remote_addr: VA + 0x1000,
                        rkey,
                    },
                    sg(0, 65536, key),
                ),
            )
            .unwrap();
            // 16 response packets: UDP GSO and IP_PKTINFO together.
            e.post_send(
                q1,
                wqe(
                    2,
                    SendOp::Read {
                        remote_addr: VA + 0x1000,
                        rkey,
                    },
                    sg(0x40000, 65536, key),
                ),
            )
            .unwrap();
            e.post_send(q1, wqe(3, SendOp::Send, sg(0, 100, key)))
                .unwrap();
            complete(&mut e, SEND_CQ, 3);
            // B's second QP speaks first, from its pinned address.
            let r = complete(&mut e, RECV_CQ, 1);
            assert_eq!(r[0].byte_len, 40000);
            let m = e.memory();
            let d = &m.region(key).unwrap().data;
            assert_eq!(
                d[0x40000..0x40000 + 65536],
                d[..65536],
                "READ back what was written"
            );
            e.counters().icrc_errors + e.counters().send_errors
        },
        |link| {
            let mut e = engine("0.0.0.0", |c| {
                c.port = pb;
                c.peer_port = pa;
            });
            let all = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
            let key = e.memory_mut().register(PD, VA, Rng(6).bytes(MEM), all);
            let q1 = e.create_qp(spec(QpType::Rc)).unwrap();
            let q2 = e.create_qp(spec(QpType::Rc)).unwrap();
            let (p1, p2) = (link.recv() as u32, link.recv() as u32);
            link.send(u64::from(q1));
            link.send(u64::from(q2));
            link.send(u64::from(key));
            connect(&mut e, q1, QpType::Rc, Some((p1, ip("127.0.0.51"))), &conn);
            connect(&mut e, q2, QpType::Rc, Some((p2, ip("127.0.0.51"))), &conn);
            // Without this the route would pick 127.0.0.1 as the source.
            e.set_qp_source(q2, ip("127.0.0.52")).unwrap();
            e.post_recv(
                q1,
                RecvWqe {
                    wr_id: 4,
                    sges: sg(0x80000, 4096, key),
                },
            )
            .unwrap();
            link.recv();
            let r = complete(&mut e, RECV_CQ, 1);
            assert_eq!((r[0].wr_id, r[0].byte_len), (4, 100));
            e.post_send(q2, wqe(5, SendOp::Send, sg(0, 40000, key)))
                .unwrap();
            complete(&mut e, SEND_CQ, 1);
            idle_until_stopped(&mut e, link);
            e.counters().icrc_errors + e.counters().send_errors
        },
    );
    assert_eq!((a, b), (0, 0), "ICRC or send errors");
}

#[test]
fn srq_shared_by_two_qps_and_destroyed_qp() {
    let (a_ip, b_ip) = ("127.0.0.53", "127.0.0.54");
    // Short enough that the destroyed QP's sender gives up quickly (about
    // 4 x 16 ms), long enough that a loaded machine does not make the
    // live QPs' SENDs give up too (1 ms x 2 did, in a full workspace run).
    let conn = Conn {
        timeout: 12,
        retry_cnt: 3,
        ..Conn::default()
    };
    const N: u64 = 10;
    let (a, b) = pair(
        |link| {
            let mut e = engine(a_ip, |_| {});
            let key = e.memory_mut().register(PD, VA, Rng(7).bytes(MEM), 0);
            let qs: Vec<u32> = (0..2)
                .map(|_| e.create_qp(spec(QpType::Rc)).unwrap())
                .collect();
            for &q in &qs {
                link.send(u64::from(q));
            }
            let peers: Vec<u32> = (0..2).map(|_| link.recv() as u32).collect();
            for i in 0..2 {
                connect(&mut e, qs[i], QpType::Rc, Some((peers[i], ip(b_ip))), &conn);
            }
            for k in 0..N {
                let q = qs[(k % 2) as usize];
                e.post_send(q, wqe(k, SendOp::Send, sg(k as usize * 64, 64, key)))
                    .unwrap();
            }
            complete(&mut e, SEND_CQ, N as usize);
            link.send(0);
            // B destroys its first QP: what we send to it now goes nowhere.
            link.recv();
            e.post_send(qs[0], wqe(100, SendOp::Send, sg(0, 64, key)))
                .unwrap();
            let d = Deadline::after(Duration::from_secs(10));
            loop {
                e.run_once(Some(Duration::from_millis(5))).unwrap();
                if let Some(c) = e.poll_cq(SEND_CQ, 1).pop() {
                    break c.status;
                }
                d.check(|| "no completion for the WQE to a destroyed QP".into());
            }
        },
        |link| {
            let mut e = engine(b_ip, |_| {});
            let key = e
                .memory_mut()
                .register(PD, VA, vec![0; MEM], access::LOCAL_WRITE);
            let srq = e.create_srq(64);
            for k in 0..N + 2 {
                e.post_srq_recv(
                    srq,
                    RecvWqe {
                        wr_id: 1000 + k,
                        sges: sg(k as usize * 64, 64, key),
                    },
                )
                .unwrap();
            }
            let s = QpSpec {
                srq: Some(srq),
                ..spec(QpType::Rc)
            };
            let qs: Vec<u32> = (0..2).map(|_| e.create_qp(s).unwrap()).collect();
            let peers: Vec<u32> = (0..2).map(|_| link.recv() as u32).collect();
            for &q in &qs {
                link.send(u64::from(q));
            }
            for i in 0..2 {
                connect(&mut e, qs[i], QpType::Rc, Some((peers[i], ip(a_ip))), &conn);
            }
            let r = complete(&mut e, RECV_CQ, N as usize);
            link.recv();
            // Receive WQEs were taken in SRQ order, by both QPs.
            let ids: Vec<u64> = r.iter().map(|c| c.wr_id).collect();
            assert_eq!(ids, (1000..1000 + N).collect::<Vec<_>>());
            assert!(r
                .iter()
                .all(|c| c.opcode == WcOpcode::Recv && c.byte_len == 64));
            for q in &qs {
                assert_eq!(r.iter().filter(|c| c.qp_num == *q).count(), N as usize / 2);
            }
            assert_eq!(e.srq_len(srq), Some(2));
            e.destroy_qp(qs[0]).unwrap();
            assert!(e.qp(qs[0]).is_none());
            link.send(0);
            idle_until_stopped(&mut e, link);
            e.counters().unknown_qp
        },
    );
    assert_eq!(a, WcStatus::RetryExcErr, "a WQE to a destroyed QP");
    assert!(b >= 1, "packets to the destroyed QP counted: {b}");
}
