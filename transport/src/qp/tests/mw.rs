//! Memory windows through the QPs: BIND_MW and LOCAL_INV as local
//! operations of the send queue (ordered with the rest, completing as
//! BIND_MW / LOCAL_INV), remote access checked against the window, and
//! SEND with invalidate (IETH on the wire, WITH_INV in the receive
//! completion).

use super::harness::*;
use crate::qp::*;
use crate::wire::{AethKind, NakCode, Opcode};

/// B's region (MW_BIND, local write) at 0x8000 and a type 2 window of it.
fn with_window(h: &mut Harness, ty: MwType) -> (u32, u32, u32) {
    let a = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, |i| i as u8);
    let mr =
        h.b.reg(0x8000, 4096, access::LOCAL_WRITE | access::MW_BIND, |_| {
            0x5a
        });
    let mw = h.b.mem.alloc_mw(h.b.pd, ty);
    (a, mr, mw)
}

fn bind_wqe(wr_id: u64, mw: u32, mr: u32, addr: u64, len: u64, acc: u32) -> SendWqe {
    wqe(
        wr_id,
        SendOp::BindMw(MwBind {
            mw_rkey: mw,
            new_rkey: mw.wrapping_add(1),
            mr_lkey: mr,
            addr,
            len,
            access: acc,
        }),
        vec![],
    )
}

fn write(wr_id: u64, lkey: u32, va: u64, rkey: u32, len: u32) -> SendWqe {
    wqe(
        wr_id,
        SendOp::Write {
            remote_addr: va,
            rkey,
        },
        vec![sge(0x1000, len, lkey)],
    )
}

fn naks(h: &Harness) -> Vec<NakCode> {
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

fn last(s: &Side, side: CqSide) -> Completion {
    *s.cq(side).last().expect("a completion")
}

#[test]
fn bind_then_write_through_the_window() {
    let mut h = Harness::rc();
    let (a, mr, mw) = with_window(&mut h, MwType::Two);
    let rw = access::REMOTE_WRITE | access::REMOTE_READ;
    h.b.qp
        .post_send(bind_wqe(5, mw, mr, 0x8100, 0x200, rw))
        .unwrap();
    h.run();
    let c = last(&h.b, CqSide::Send);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (5, WcStatus::Success, WcOpcode::BindMw)
    );
    assert_eq!(c.byte_len, 0);
    let key = mw.wrapping_add(1) & 0xff | mw & !0xff;
    assert_eq!(h.b.mem.window(mw).unwrap().rkey, key);

    h.a.qp.post_send(write(1, a, 0x8180, key, 64)).unwrap();
    h.run();
    assert_eq!(last(&h.a, CqSide::Send).status, WcStatus::Success);
    let data = h.b.bytes(mr);
    assert_eq!(&data[0x180..0x180 + 64], &(0..64u8).collect::<Vec<_>>()[..]);
    assert_eq!(data[0x17f], 0x5a);

    // READ through the window too.
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::Read {
                remote_addr: 0x8100,
                rkey: key,
            },
            vec![sge(0x1000, 16, a)],
        ))
        .unwrap();
    h.run();
    assert_eq!(last(&h.a, CqSide::Send).status, WcStatus::Success);
}

#[test]
fn window_range_access_and_key_are_checked() {
    type Case = (&'static str, u64, u32, u32, WcStatus);
    for (what, va, len, key_xor, want) in [
        ("below the window", 0x80ff, 8, 0, WcStatus::RemAccessErr),
        ("past the window", 0x82f9, 8, 0, WcStatus::RemAccessErr),
        ("old key", 0x8100, 8, 0xff, WcStatus::RemAccessErr),
        ("inside", 0x8100, 0x200, 0, WcStatus::Success),
    ] as [Case; 4]
    {
        let mut h = Harness::rc();
        h.capture_on();
        let (a, mr, mw) = with_window(&mut h, MwType::Two);
        // A write-only window in the middle of the region.
        h.b.qp
            .post_send(bind_wqe(5, mw, mr, 0x8100, 0x200, access::REMOTE_WRITE))
            .unwrap();
        h.run();
        let key = h.b.mem.window(mw).unwrap().rkey;
        let k = if key_xor == 0xff {
            key & !0xff | (mw & 0xff)
        } else {
            key
        };
        h.a.qp.post_send(write(1, a, va, k, len)).unwrap();
        h.run();
        assert_eq!(last(&h.a, CqSide::Send).status, want, "{what}");
        if want != WcStatus::Success {
            assert_eq!(naks(&h), [NakCode::RemoteAccess], "{what}");
            assert_eq!(h.b.qp.state(), QpState::Err, "{what}: responder in ERR");
        }
    }
    // A READ through a write-only window: no REMOTE_READ access.
    let mut h = Harness::rc();
    let (a, mr, mw) = with_window(&mut h, MwType::Two);
    h.b.qp
        .post_send(bind_wqe(5, mw, mr, 0x8000, 0x100, access::REMOTE_WRITE))
        .unwrap();
    h.run();
    let key = h.b.mem.window(mw).unwrap().rkey;
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::Read {
                remote_addr: 0x8000,
                rkey: key,
            },
            vec![sge(0x1000, 8, a)],
        ))
        .unwrap();
    h.run();
    assert_eq!(last(&h.a, CqSide::Send).status, WcStatus::RemAccessErr);
}

#[test]
fn type2_window_works_only_through_its_qp() {
    let mut h = Harness::rc();
    let (a, mr, mw) = with_window(&mut h, MwType::Two);
    // Bound through a QP of the same PD that is not B's connected QP.
    let other = 0x99;
    h.b.mem
        .bind_mw(
            h.b.pd,
            other,
            &MwBind {
                mw_rkey: mw,
                new_rkey: mw,
                mr_lkey: mr,
                addr: 0x8000,
                len: 64,
                access: access::REMOTE_WRITE,
            },
        )
        .unwrap();
    h.a.qp.post_send(write(1, a, 0x8000, mw, 8)).unwrap();
    h.run();
    assert_eq!(last(&h.a, CqSide::Send).status, WcStatus::RemAccessErr);
}

#[test]
fn local_invalidate_closes_the_window() {
    let mut h = Harness::rc();
    let (a, mr, mw) = with_window(&mut h, MwType::Two);
    h.b.qp
        .post_send(bind_wqe(5, mw, mr, 0x8000, 4096, access::REMOTE_WRITE))
        .unwrap();
    h.run();
    let key = h.b.mem.window(mw).unwrap().rkey;
    h.a.qp.post_send(write(1, a, 0x8000, key, 8)).unwrap();
    h.run();
    assert_eq!(last(&h.a, CqSide::Send).status, WcStatus::Success);
    h.b.qp
        .post_send(wqe(6, SendOp::LocalInv { rkey: key }, vec![]))
        .unwrap();
    h.run();
    let c = last(&h.b, CqSide::Send);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (6, WcStatus::Success, WcOpcode::LocalInv)
    );
    h.a.qp.post_send(write(2, a, 0x8000, key, 8)).unwrap();
    h.run();
    assert_eq!(last(&h.a, CqSide::Send).status, WcStatus::RemAccessErr);
}

#[test]
fn failed_local_operations_complete_in_error_and_stop_the_qp() {
    // LOCAL_INV of a free window: LOC_QP_OP_ERR.
    let mut h = Harness::rc();
    let (_, mr, mw) = with_window(&mut h, MwType::Two);
    h.b.qp
        .post_send(wqe(1, SendOp::LocalInv { rkey: mw }, vec![]))
        .unwrap();
    h.b.qp
        .post_send(bind_wqe(2, mw, mr, 0x8000, 8, access::REMOTE_READ))
        .unwrap();
    h.run();
    let got: Vec<_> =
        h.b.cq(CqSide::Send)
            .iter()
            .map(|c| (c.wr_id, c.status, c.opcode))
            .collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::LocQpOpErr, WcOpcode::LocalInv),
            (2, WcStatus::WrFlushErr, WcOpcode::BindMw)
        ]
    );
    assert_eq!(h.b.qp.state(), QpState::Err);
    assert!(h.b.events.contains(&QpEvent::Fatal));

    // A bind outside the region: MW_BIND_ERR.
    let mut h = Harness::rc();
    let (_, mr, mw) = with_window(&mut h, MwType::Two);
    h.b.qp
        .post_send(bind_wqe(3, mw, mr, 0x8000, 4097, access::REMOTE_READ))
        .unwrap();
    h.run();
    assert_eq!(last(&h.b, CqSide::Send).status, WcStatus::MwBindErr);
    assert_eq!(h.b.qp.state(), QpState::Err);
    assert!(h.b.mem.window(mw).unwrap().binding.is_none());
}

#[test]
fn local_operations_complete_in_order_behind_earlier_wqes() {
    let mut h = Harness::rc();
    let (a, mr, mw) = with_window(&mut h, MwType::Two);
    let b_buf = h.b.reg(0x20000, 64, access::LOCAL_WRITE, |_| 0);
    let a_dst = h.a.reg(
        0x30000,
        4096,
        access::LOCAL_WRITE | access::REMOTE_WRITE,
        |_| 0,
    );
    h.a.qp
        .post_recv(recv(50, vec![sge(0x30000, 4096, a_dst)]))
        .unwrap();
    // B: a SEND (needs an ACK), then a bind: the bind runs at once but
    // completes after the SEND.
    h.b.qp
        .post_send(wqe(1, SendOp::Send, vec![sge(0x20000, 64, b_buf)]))
        .unwrap();
    h.b.qp
        .post_send(bind_wqe(2, mw, mr, 0x8000, 64, access::REMOTE_READ))
        .unwrap();
    h.run();
    let ids: Vec<_> =
        h.b.cq(CqSide::Send)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(ids, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let _ = a;
}

#[test]
fn send_with_invalidate_carries_ieth_and_frees_the_window() {
    let mut h = Harness::rc();
    h.capture_on();
    let (a, mr, mw) = with_window(&mut h, MwType::Two);
    h.b.qp
        .post_send(bind_wqe(5, mw, mr, 0x8000, 4096, access::REMOTE_WRITE))
        .unwrap();
    h.run();
    let key = h.b.mem.window(mw).unwrap().rkey;
    let rbuf = h.b.reg(0x40000, 256, access::LOCAL_WRITE, |_| 0);
    h.b.qp
        .post_recv(recv(70, vec![sge(0x40000, 256, rbuf)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            9,
            SendOp::SendInv { rkey: key },
            vec![sge(0x1000, 32, a)],
        ))
        .unwrap();
    h.run();
    let s = last(&h.a, CqSide::Send);
    assert_eq!((s.status, s.opcode), (WcStatus::Success, WcOpcode::Send));
    let r = last(&h.b, CqSide::Recv);
    assert_eq!(
        (r.wr_id, r.status, r.opcode),
        (70, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(r.wc_flags & wc_flags::WITH_INV, wc_flags::WITH_INV);
    assert_eq!(r.invalidated_rkey, key);
    assert_eq!(r.byte_len, 32);
    let inv: Vec<_> = h
        .captured()
        .iter()
        .filter(|c| c.pkt().opcode() == Opcode::RC_SEND_ONLY_INV)
        .map(|c| c.pkt().hdr.ieth)
        .collect();
    assert_eq!(
        inv,
        [Some(key)],
        "one SEND ONLY with invalidate, key in the IETH"
    );
    assert!(h.b.mem.window(mw).unwrap().binding.is_none());
    // The invalidated window refuses the peer, as on rxe.
    h.a.qp.post_send(write(10, a, 0x8000, key, 8)).unwrap();
    h.run();
    assert_eq!(last(&h.a, CqSide::Send).status, WcStatus::RemAccessErr);
}

#[test]
fn send_with_invalidate_of_a_type1_window_fails() {
    let mut h = Harness::rc();
    h.capture_on();
    let (a, mr, mw) = with_window(&mut h, MwType::One);
    h.b.qp
        .post_send(bind_wqe(5, mw, mr, 0x8000, 64, access::REMOTE_WRITE))
        .unwrap();
    h.run();
    let key = h.b.mem.window(mw).unwrap().rkey;
    let rbuf = h.b.reg(0x40000, 256, access::LOCAL_WRITE, |_| 0);
    h.b.qp
        .post_recv(recv(70, vec![sge(0x40000, 256, rbuf)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            9,
            SendOp::SendInv { rkey: key },
            vec![sge(0x1000, 8, a)],
        ))
        .unwrap();
    h.run();
    assert_eq!(last(&h.b, CqSide::Recv).status, WcStatus::RemInvReqErr);
    assert_eq!(last(&h.a, CqSide::Send).status, WcStatus::RemInvReqErr);
    assert_eq!(naks(&h), [NakCode::InvalidRequest]);
    // The type 1 window is still bound.
    assert!(h.b.mem.window(mw).unwrap().binding.is_some());
}

#[test]
fn local_operations_on_uc() {
    let mut h = Harness::new(&Setup {
        qp_type: QpType::Uc,
        ..Setup::default()
    });
    let (_, mr, mw) = with_window(&mut h, MwType::Two);
    h.b.qp
        .post_send(bind_wqe(5, mw, mr, 0x8000, 64, access::REMOTE_WRITE))
        .unwrap();
    h.run();
    assert_eq!(last(&h.b, CqSide::Send).status, WcStatus::Success);
    let key = h.b.mem.window(mw).unwrap().rkey;
    h.b.qp
        .post_send(wqe(6, SendOp::LocalInv { rkey: key }, vec![]))
        .unwrap();
    h.run();
    let c = last(&h.b, CqSide::Send);
    assert_eq!((c.wr_id, c.status), (6, WcStatus::Success));
    assert_eq!(h.b.qp.send_queue_len(), 0);
}

#[test]
fn local_operations_are_refused_on_ud() {
    let mut qp = Qp::new(QpConfig {
        qpn: 5,
        qp_type: QpType::Ud,
        pd: 1,
        srq: None,
        sq_sig_all: false,
        max_send_wr: 4,
        max_recv_wr: 4,
    });
    qp.modify(&QpAttr {
        state: Some(QpState::Init),
        ..Default::default()
    })
    .unwrap();
    let r = qp.post_send(wqe(1, SendOp::LocalInv { rkey: 1 }, vec![]));
    assert!(matches!(r, Err(QpError::InvalidWr(_))));
}
