//! Error paths: NAKs and their completion statuses, local errors, QP ->
//! ERR with flushes, posting rules, modify to ERR / RESET.

use super::harness::*;
use crate::qp::*;
use crate::wire::{AethKind, NakCode, Opcode};
use crate::Psn;

const ALL: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

fn statuses(cqes: &[Completion]) -> Vec<(u64, WcStatus)> {
    cqes.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn nak_codes(h: &Harness) -> Vec<NakCode> {
    h.captured()
        .iter()
        .filter(|c| c.dir == Dir::BtoA)
        .filter_map(|c| c.pkt().hdr.aeth)
        .filter_map(|a| match a.kind() {
            AethKind::Nak(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// Runs one WRITE / READ / atomic against B's region under the given
/// circumstances; returns the harness after the run.
fn remote_op(
    op: &str,
    break_it: impl FnOnce(&mut Harness, u32) -> (u64, u32),
) -> (Harness, u32, u32) {
    let mut h = Harness::rc();
    h.capture_on();
    let a = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, pat(40));
    let b = h.b.reg(0x8000, 4096, ALL, |_| 0x5A);
    // Something the responder must flush when it goes to ERR.
    h.b.qp.post_recv(recv(77, vec![])).unwrap();
    let (va, rkey) = break_it(&mut h, b);
    let w = match op {
        "write" => wqe(
            1,
            SendOp::Write {
                remote_addr: va,
                rkey,
            },
            vec![sge(0x1000, 512, a)],
        ),
        "read" => wqe(
            1,
            SendOp::Read {
                remote_addr: va,
                rkey,
            },
            vec![sge(0x1000, 512, a)],
        ),
        _ => wqe(
            1,
            SendOp::FetchAdd {
                remote_addr: va,
                rkey,
                add: 1,
            },
            vec![sge(0x1000, 8, a)],
        ),
    };
    h.a.qp.post_send(w).unwrap();
    h.a.qp
        .post_send(wqe(2, SendOp::Send, vec![sge(0x1000, 8, a)]))
        .unwrap();
    h.run();
    (h, a, b)
}

#[test]
fn remote_access_errors() {
    type Breaker = fn(&mut Harness, u32) -> (u64, u32);
    let cases: [(&str, Breaker); 5] = [
        ("bad rkey", |_, k| (0x8000, k ^ 0x100)),
        ("out of bounds", |_, k| (0x8000 + 4096, k)),
        ("missing access", |h, k| {
            h.b.mem.region_mut(k).unwrap().access = access::LOCAL_WRITE;
            (0x8000, k)
        }),
        ("other PD", |h, k| {
            h.b.mem.region_mut(k).unwrap().pd = 99;
            (0x8000, k)
        }),
        ("deregistered", |h, k| {
            h.b.mem.deregister(k);
            let k2 = h.b.reg(0x8000, 4096, ALL, |_| 0x5A);
            h.b.mem.deregister(k2);
            (0x8000, k2)
        }),
    ];
    for op in ["write", "read", "atomic"] {
        for (name, f) in cases {
            let (h, a, b) = remote_op(op, f);
            let what = format!("{op} / {name}");
            assert_eq!(
                statuses(&h.a.cqes),
                vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)],
                "{what}"
            );
            assert_eq!(nak_codes(&h), vec![NakCode::RemoteAccess], "{what}");
            assert_eq!(h.a.qp.state(), QpState::Err, "{what}");
            assert_eq!(h.b.qp.state(), QpState::Err, "{what}");
            assert_eq!(
                statuses(&h.b.cqes),
                vec![(77, WcStatus::WrFlushErr)],
                "{what}"
            );
            assert!(h.b.events.contains(&QpEvent::Fatal));
            // Nothing moved, either way.
            if let Some(reg) = h.b.mem.region(b) {
                assert!(reg.data.iter().all(|&x| x == 0x5A), "{what}");
            }
            let fill = pat(40);
            assert!(
                h.a.bytes(a).iter().enumerate().all(|(i, &x)| x == fill(i)),
                "{what}"
            );
        }
    }
}

#[test]
fn write_out_of_bounds_leaves_neighbours_untouched() {
    let mut h = Harness::rc();
    let a = h.a.reg(0x1000, 4096, 0, pat(41));
    let lo = h.b.reg(0x7000, 0x1000, ALL, |_| 1);
    let mr = h.b.reg(0x8000, 0x100, ALL, |_| 2);
    let hi = h.b.reg(0x8100, 0x1000, ALL, |_| 3);
    // Starts inside, ends past the end; and one starting before it.
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x80F0,
                rkey: mr,
            },
            vec![sge(0x1000, 3000, a)],
        ))
        .unwrap();
    h.run();
    assert_eq!(h.a.cqes[0].status, WcStatus::RemAccessErr);
    let mut h2 = Harness::rc();
    let a2 = h2.a.reg(0x1000, 4096, 0, pat(41));
    let mr2 = h2.b.reg(0x8000, 0x100, ALL, |_| 2);
    h2.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x7FF0,
                rkey: mr2,
            },
            vec![sge(0x1000, 32, a2)],
        ))
        .unwrap();
    h2.run();
    assert_eq!(h2.a.cqes[0].status, WcStatus::RemAccessErr);
    assert!(h2.b.bytes(mr2).iter().all(|&x| x == 2));
    assert!(h.b.bytes(lo).iter().all(|&x| x == 1));
    assert!(h.b.bytes(mr).iter().all(|&x| x == 2));
    assert!(h.b.bytes(hi).iter().all(|&x| x == 3));
}

#[test]
fn qp_access_flags_and_misaligned_atomic_are_invalid_requests() {
    for (access_b, op) in [
        (access::LOCAL_WRITE | access::REMOTE_READ, "write"),
        (access::LOCAL_WRITE | access::REMOTE_WRITE, "read"),
        (access::LOCAL_WRITE | access::REMOTE_WRITE, "atomic"),
        (ALL, "misaligned"),
    ] {
        let mut h = Harness::new(&Setup {
            access: access_b,
            ..Setup::default()
        });
        h.capture_on();
        let a = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, pat(42));
        let b = h.b.reg(0x8000, 4096, ALL, |_| 0);
        let w = match op {
            "write" => wqe(
                1,
                SendOp::Write {
                    remote_addr: 0x8000,
                    rkey: b,
                },
                vec![sge(0x1000, 8, a)],
            ),
            "read" => wqe(
                1,
                SendOp::Read {
                    remote_addr: 0x8000,
                    rkey: b,
                },
                vec![sge(0x1000, 8, a)],
            ),
            "atomic" => wqe(
                1,
                SendOp::FetchAdd {
                    remote_addr: 0x8000,
                    rkey: b,
                    add: 1,
                },
                vec![sge(0x1000, 8, a)],
            ),
            _ => wqe(
                1,
                SendOp::FetchAdd {
                    remote_addr: 0x8004,
                    rkey: b,
                    add: 1,
                },
                vec![sge(0x1000, 8, a)],
            ),
        };
        h.a.qp.post_send(w).unwrap();
        h.run();
        assert_eq!(
            statuses(&h.a.cqes),
            vec![(1, WcStatus::RemInvReqErr)],
            "{op}"
        );
        assert_eq!(nak_codes(&h), vec![NakCode::InvalidRequest], "{op}");
        assert!(h.b.bytes(b).iter().all(|&x| x == 0));
    }
}

#[test]
fn receive_buffer_too_small() {
    let mut h = Harness::rc();
    h.capture_on();
    let a = h.a.reg(0x1000, 4096, 0, pat(43));
    let b = h.b.reg(0x8000, 4096, access::LOCAL_WRITE, |_| 0);
    h.b.qp
        .post_recv(recv(1, vec![sge(0x8000, 1500, b)]))
        .unwrap();
    h.b.qp
        .post_recv(recv(2, vec![sge(0x8000, 4096, b)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 2000, a)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(2, SendOp::Send, vec![sge(0x1000, 20, a)]))
        .unwrap();
    h.run();
    assert_eq!(
        statuses(&h.a.cqes),
        vec![(1, WcStatus::RemInvReqErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        statuses(&h.b.cqes),
        vec![(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(nak_codes(&h), vec![NakCode::InvalidRequest]);
    // Nothing beyond the buffer was written.
    assert!(h.b.bytes(b)[1500..].iter().all(|&x| x == 0));
}

#[test]
fn bad_lkey_on_send_is_a_local_protection_error() {
    let mut h = Harness::rc();
    h.capture_on();
    let a = h.a.reg(0x1000, 4096, 0, pat(44));
    let b = h.b.reg(0x8000, 4096, ALL, |_| 0);
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x8000,
                rkey: b,
            },
            vec![sge(0x1000, 8, a)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::Write {
                remote_addr: 0x8000,
                rkey: b,
            },
            vec![sge(0x1000, 8, a ^ 1)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            3,
            SendOp::Write {
                remote_addr: 0x8000,
                rkey: b,
            },
            vec![sge(0x1000, 8, a)],
        ))
        .unwrap();
    h.run();
    // WQE 1 was already on the wire when 2 failed: the QP went to ERR
    // before its ACK came, so it is flushed (never "success" after ERR).
    assert_eq!(
        statuses(&h.a.cqes),
        vec![
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(h.a.qp.state(), QpState::Err);
    // The failing WQE never reached the wire.
    assert_eq!(
        h.captured().iter().filter(|c| c.dir == Dir::AtoB).count(),
        1
    );
}

#[test]
fn bad_lkey_on_receive() {
    let mut h = Harness::rc();
    h.capture_on();
    let a = h.a.reg(0x1000, 4096, 0, pat(45));
    let b = h.b.reg(0x8000, 4096, 0, |_| 0); // no LOCAL_WRITE
    h.b.qp
        .post_recv(recv(1, vec![sge(0x8000, 100, b)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 10, a)]))
        .unwrap();
    h.run();
    assert_eq!(statuses(&h.a.cqes), vec![(1, WcStatus::RemOpErr)]);
    assert_eq!(statuses(&h.b.cqes), vec![(1, WcStatus::LocProtErr)]);
    assert_eq!(nak_codes(&h), vec![NakCode::RemoteOperational]);
}

#[test]
fn read_into_bad_local_buffer() {
    let mut h = Harness::rc();
    let a = h.a.reg(0x1000, 4096, 0, pat(46)); // no LOCAL_WRITE
    let b = h.b.reg(0x8000, 4096, ALL, |_| 0);
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Read {
                remote_addr: 0x8000,
                rkey: b,
            },
            vec![sge(0x1000, 100, a)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::FetchAdd {
                remote_addr: 0x8000,
                rkey: b,
                add: 1,
            },
            vec![sge(0x1000, 8, a)],
        ))
        .unwrap();
    h.run();
    assert_eq!(
        statuses(&h.a.cqes),
        vec![(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
}

#[test]
fn posting_rules() {
    let mut qp = Qp::new(QpConfig {
        qpn: 5,
        qp_type: QpType::Rc,
        pd: 1,
        srq: None,
        xrcd: None,
        sq_sig_all: false,
        max_send_wr: 2,
        max_recv_wr: 1,
    });
    let w = |id| wqe(id, SendOp::Send, vec![]);
    assert_eq!(
        qp.post_send(w(1)),
        Err(QpError::InvalidState(QpState::Reset))
    );
    assert_eq!(
        qp.post_recv(recv(1, vec![])),
        Err(QpError::InvalidState(QpState::Reset))
    );
    qp.modify(&QpAttr {
        state: Some(QpState::Init),
        ..Default::default()
    })
    .unwrap();
    let mut read_inline = wqe(
        9,
        SendOp::Read {
            remote_addr: 0,
            rkey: 0,
        },
        vec![],
    );
    read_inline.payload = Payload::Inline(vec![1]);
    assert!(matches!(
        qp.post_send(read_inline),
        Err(QpError::InvalidWr(_))
    ));
    let big = wqe(
        9,
        SendOp::Send,
        vec![sge(0, u32::MAX, 1), sge(0, u32::MAX, 1)],
    );
    assert!(matches!(qp.post_send(big), Err(QpError::InvalidWr(_))));
    qp.post_send(w(1)).unwrap();
    qp.post_send(w(2)).unwrap();
    assert_eq!(qp.post_send(w(3)), Err(QpError::QueueFull));
    qp.post_recv(recv(1, vec![])).unwrap();
    assert_eq!(qp.post_recv(recv(2, vec![])), Err(QpError::QueueFull));
    assert!(matches!(
        qp.modify(&QpAttr {
            timeout: Some(32),
            ..Default::default()
        }),
        Err(QpError::InvalidAttr(_))
    ));
    // Nothing goes out before RTS.
    assert!(!qp.has_transmit());
    // modify(ERR) flushes both queues, in order; posting then completes
    // at once with WR_FLUSH_ERR (verbs convention of rxe and mlx5).
    qp.modify(&QpAttr {
        state: Some(QpState::Err),
        ..Default::default()
    })
    .unwrap();
    let mut got = vec![];
    while let Some(c) = qp.poll_completion() {
        got.push((c.side, c.wr_id, c.status));
    }
    assert_eq!(
        got,
        vec![
            (CqSide::Send, 1, WcStatus::WrFlushErr),
            (CqSide::Send, 2, WcStatus::WrFlushErr),
            (CqSide::Recv, 1, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(
        qp.poll_event(),
        None,
        "user-requested ERR is not a fatal event"
    );
    qp.post_send(w(4)).unwrap();
    qp.post_recv(recv(5, vec![])).unwrap();
    let c1 = qp.poll_completion().unwrap();
    let c2 = qp.poll_completion().unwrap();
    assert_eq!(
        (c1.wr_id, c1.status, c1.side),
        (4, WcStatus::WrFlushErr, CqSide::Send)
    );
    assert_eq!(
        (c2.wr_id, c2.status, c2.side),
        (5, WcStatus::WrFlushErr, CqSide::Recv)
    );
    assert_eq!(
        qp.modify(&QpAttr {
            state: Some(QpState::Rts),
            ..Default::default()
        }),
        Err(QpError::InvalidState(QpState::Err))
    );
    qp.modify(&QpAttr {
        state: Some(QpState::Reset),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(qp.state(), QpState::Reset);
    assert_eq!(qp.poll_completion(), None);
}

#[test]
fn uc_ud_reject_rc_only_opcodes() {
    for t in [QpType::Uc, QpType::Ud] {
        let h = Harness::new(&Setup {
            qp_type: t,
            ..Setup::default()
        });
        let mut qp = h.a.qp;
        let r = qp.post_send(wqe(
            1,
            SendOp::Read {
                remote_addr: 0,
                rkey: 0,
            },
            vec![],
        ));
        assert!(matches!(r, Err(QpError::InvalidWr(_))), "{t:?}");
    }
}

#[test]
fn modify_to_err_mid_transfer_and_reset_and_reuse() {
    let mut h = Harness::rc();
    let a = h.a.reg(0x1000, 1 << 20, 0, pat(47));
    let b = h.b.reg(0x8000, 1 << 20, ALL, |_| 0);
    h.b.qp
        .post_recv(recv(1, vec![sge(0x8000, 1 << 20, b)]))
        .unwrap();
    h.b.qp
        .post_recv(recv(2, vec![sge(0x8000, 1 << 20, b)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 1 << 20, a)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(2, SendOp::Send, vec![sge(0x1000, 10, a)]))
        .unwrap();
    // Part of the first message has arrived at B.
    h.step();
    h.step();
    h.b.qp
        .modify(&QpAttr {
            state: Some(QpState::Err),
            ..Default::default()
        })
        .unwrap();
    h.b.drain();
    // The partly filled receive and the other one are flushed, in order.
    assert_eq!(
        statuses(&h.b.cqes),
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
    h.a.qp
        .modify(&QpAttr {
            state: Some(QpState::Err),
            ..Default::default()
        })
        .unwrap();
    h.a.drain();
    assert_eq!(
        statuses(&h.a.cqes),
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
    // Reset and bring both back up: traffic flows again from new PSNs.
    for (s, me, peer, other) in [(&mut h.a, 500, 900, QPN_B), (&mut h.b, 900, 500, QPN_A)] {
        s.cqes.clear();
        let peer_addr = if other == QPN_B {
            "10.0.0.2"
        } else {
            "10.0.0.1"
        };
        for attr in [
            QpAttr {
                state: Some(QpState::Reset),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Init),
                access_flags: Some(ALL),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rtr),
                path_mtu: Some(Mtu::M4096),
                dest_qpn: Some(other),
                dest_addr: Some(peer_addr.parse().unwrap()),
                rq_psn: Some(Psn::new(peer)),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                sq_psn: Some(Psn::new(me)),
                timeout: Some(14),
                ..Default::default()
            },
        ] {
            s.qp.modify(&attr).unwrap();
        }
    }
    h.b.qp
        .post_recv(recv(3, vec![sge(0x8000, 1 << 20, b)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(3, SendOp::Send, vec![sge(0x1000, 100_000, a)]))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cqes, &[3]);
    assert_ok_in_order(&h.b.cqes, &[3]);
    assert_eq!(&h.b.bytes(b)[..100_000], &h.a.bytes(a)[..100_000]);
}

#[test]
fn no_responder_resources_means_invalid_request() {
    let mut h = Harness::new(&Setup {
        max_dest_rd_atomic: 0,
        ..Setup::default()
    });
    let a = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, pat(48));
    let b = h.b.reg(0x8000, 4096, ALL, |_| 0);
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Read {
                remote_addr: 0x8000,
                rkey: b,
            },
            vec![sge(0x1000, 8, a)],
        ))
        .unwrap();
    h.run();
    assert_eq!(statuses(&h.a.cqes), vec![(1, WcStatus::RemInvReqErr)]);
}

#[test]
fn recycled_responder_resource_drops_the_duplicate() {
    // The requester exceeds the responder's resources (its job not to):
    // the oldest slot is recycled, and a duplicate READ for it is dropped,
    // as rxe does; the requester eventually gives up.
    let mut h = Harness::new(&Setup {
        max_dest_rd_atomic: 1,
        max_rd_atomic: 4,
        timeout: 8,
        retry_cnt: 2,
        ..Setup::default()
    });
    h.capture_on();
    let a = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, pat(49));
    let b = h.b.reg(0x8000, 4096, ALL, pat(50));
    let mut once = true;
    h.filter = Some(Box::new(move |d, p| {
        if d == Dir::BtoA && p.opcode() == Opcode::RC_READ_RESPONSE_ONLY && once {
            once = false;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    for i in 0..3 {
        h.a.qp
            .post_send(wqe(
                i,
                SendOp::Read {
                    remote_addr: 0x8000,
                    rkey: b,
                },
                vec![sge(0x1000, 8, a)],
            ))
            .unwrap();
    }
    h.run();
    assert_eq!(h.a.cqes[0].status, WcStatus::RetryExcErr);
    assert!(h.b.qp.counters().dropped_pkts >= 1);
}

#[test]
fn srq_receives_and_last_wqe_event() {
    let mut h = Harness::new(&Setup {
        srq_b: true,
        ..Setup::default()
    });
    let a = h.a.reg(0x1000, 4096, 0, pat(51));
    let b = h.b.reg(0x8000, 8192, access::LOCAL_WRITE, |_| 0);
    assert!(matches!(
        h.b.qp.post_recv(recv(1, vec![])),
        Err(QpError::InvalidWr(_))
    ));
    let srq = h.b.srq.as_mut().unwrap();
    srq.0.push_back(recv(10, vec![sge(0x8000, 4096, b)]));
    srq.0.push_back(recv(11, vec![sge(0x9000, 4096, b)]));
    h.a.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 3000, a)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(2, SendOp::Send, vec![sge(0x1000, 3000, a)]))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cqes, &[1, 2]);
    assert_ok_in_order(&h.b.cqes, &[10, 11]);
    h.b.qp
        .modify(&QpAttr {
            state: Some(QpState::Err),
            ..Default::default()
        })
        .unwrap();
    h.b.drain();
    // Both sides were in RTS before the first packet: no COMM_EST.
    assert_eq!(h.b.events, vec![QpEvent::LastWqeReached]);
}

#[test]
fn read_source_deregistered_after_the_request_was_accepted() {
    let mut h = Harness::rc();
    h.capture_on();
    h.burst = 1;
    let a = h.a.reg(0x1000, 8192, access::LOCAL_WRITE, |_| 0);
    let b = h.b.reg(0x8000, 8192, ALL, pat(52));
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Read {
                remote_addr: 0x8000,
                rkey: b,
            },
            vec![sge(0x1000, 8192, a)],
        ))
        .unwrap();
    // The request arrives and B answers the first packet; then the MR goes.
    h.step();
    h.step();
    h.b.mem.deregister(b);
    h.run();
    assert_eq!(statuses(&h.a.cqes), vec![(1, WcStatus::RemAccessErr)]);
    assert_eq!(nak_codes(&h), vec![NakCode::RemoteAccess]);
    assert_eq!(h.b.qp.state(), QpState::Err);
    // The part that did arrive is the MR's data, nothing else.
    let first = &h.a.bytes(a)[..1024];
    let fill = pat(52);
    assert!(first.iter().enumerate().all(|(i, &x)| x == fill(i)));
}
