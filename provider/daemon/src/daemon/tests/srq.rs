//! SRQ limit event and busy; SRQ resize.

use std::os::fd::OwnedFd;

use super::spec::{RecvSpec, SendSpec};
use crate::daemon::device::Device;
use crate::daemon::reply::Reply;
use crate::daemon::session::event;
use rxu_abi::proto::{QpCap, QpType, Request, Response};
use rxu_abi::ring::{Producer, Ring};
use transport::qp::{send_flags, WcOpcode, WcStatus};
use transport::verbs::WrOpcode;

use super::harness::*;

#[test]
fn srq_limit_event_and_busy() {
    let mut dev = device(10);
    let c = hello(&mut dev);
    let pd = alloc_pd(&mut dev, c.id);
    let (srq, fds) = match ok(call(
        &mut dev,
        c.id,
        Request::CreateSrq {
            pd,
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
            user_handle: 0x5150,
        },
    )) {
        (Response::Srq { srq, .. }, fds) => (srq, fds),
        r => panic!("{:?}", r.0),
    };
    let mut ring = Ring::attach(&fds[0]).unwrap().into_producer();
    let mut slot = vec![0u8; ring.slot_size()];
    for i in 0..3 {
        RecvSpec {
            wr_id: i,
            sges: vec![],
        }
        .write(&mut slot);
        assert!(ring.try_push(&slot).unwrap());
    }
    dev.consume();
    // Armed with 3 posted and a limit of 4: nothing yet, the number has
    // not dropped below the limit (ibv_modify_srq(3), and rxe).
    ok(call(
        &mut dev,
        c.id,
        Request::ModifySrq {
            srq,
            mask: 2,
            max_wr: 0,
            srq_limit: 4,
        },
    ));
    dev.deliver();
    assert_eq!(events(&c), vec![]);
    let limit = |dev: &mut Device| match ok(call(dev, c.id, Request::QuerySrq { srq })).0 {
        Response::Srq {
            srq_limit, max_wr, ..
        } => (srq_limit, max_wr),
        r => panic!("{r:?}"),
    };
    assert_eq!(limit(&mut dev), (4, 8));
    let (cq, mut cq_ring) = create_cq(&mut dev, c.id, 4);
    let req = Request::CreateQp {
        pd,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: Some(srq),
        cap: QpCap {
            max_send_wr: 1,
            max_recv_wr: 100,
            max_send_sge: 1,
            max_recv_sge: 100,
            max_inline_data: 0,
        },
        sq_sig_all: false,
        user_handle: 0,
    };
    let (resp, fds) = ok(call(&mut dev, c.id, req));
    assert_eq!(fds.len(), 1, "no RQ ring with an SRQ");
    let qpn = match resp {
        Response::Qp { qpn, cap, .. } => {
            assert_eq!((cap.max_recv_wr, cap.max_recv_sge), (0, 0));
            qpn
        }
        r => panic!("{r:?}"),
    };
    assert_eq!(
        errno(call(&mut dev, c.id, Request::DestroySrq { srq })),
        libc::EBUSY
    );
    // A SEND takes one of the 3: 2 left, below the limit: the event,
    // once, and the limit disarmed.
    let mut a = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
    connect_rc(&mut dev, c.id, a.qpn, qpn, addr(10));
    connect_rc(&mut dev, c.id, qpn, a.qpn, addr(10));
    post_send(
        &mut a,
        &SendSpec {
            wr_id: 7,
            opcode: WrOpcode::SEND,
            send_flags: send_flags::SIGNALED,
            ..Default::default()
        },
    );
    let mut cqes = Vec::new();
    assert!(pump(&mut dev, |_| {
        while let Some(e) = pop_cqe(&mut cq_ring) {
            cqes.push((e.wr_id, e.status));
        }
        cqes.len() >= 2
    }));
    cqes.sort_unstable();
    assert_eq!(cqes, vec![(0, 0), (7, 0)]);
    assert_eq!(
        events(&c)
            .into_iter()
            .filter(|e| e.1 == event::SRQ_LIMIT_REACHED)
            .collect::<Vec<_>>(),
        vec![(0x5150, event::SRQ_LIMIT_REACHED)]
    );
    assert_eq!(limit(&mut dev), (0, 8));
    ok(call(&mut dev, c.id, Request::DestroyQp { qp: a.qpn }));
    ok(call(&mut dev, c.id, Request::DestroyQp { qp: qpn }));
    ok(call(&mut dev, c.id, Request::DestroySrq { srq }));
    // srq_limit is not judged at creation (rxe keeps one above max_wr).
    match ok(call(
        &mut dev,
        c.id,
        Request::CreateSrq {
            pd,
            max_wr: 4,
            max_sge: 1,
            srq_limit: 8,
            user_handle: 0,
        },
    ))
    .0
    {
        Response::Srq {
            srq_limit, max_wr, ..
        } => assert_eq!((srq_limit, max_wr), (8, 4)),
        r => panic!("{r:?}"),
    }
}

fn create_srq(dev: &mut Device, id: u32, pd: u32, max_wr: u32) -> (u32, Producer) {
    let req = Request::CreateSrq {
        pd,
        max_wr,
        max_sge: 1,
        srq_limit: 0,
        user_handle: 0x5151,
    };
    match ok(call(dev, id, req)) {
        (Response::Srq { srq, .. }, fds) => (srq, Ring::attach(&fds[0]).unwrap().into_producer()),
        r => panic!("{:?}", r.0),
    }
}

fn post_recvs(ring: &mut Producer, ids: std::ops::Range<u64>) {
    let mut slot = vec![0u8; ring.slot_size()];
    for wr_id in ids {
        RecvSpec {
            wr_id,
            sges: vec![],
        }
        .write(&mut slot);
        assert!(ring.try_push(&slot).unwrap(), "receive {wr_id} posted");
    }
}

fn modify(dev: &mut Device, id: u32, srq: u32, mask: u32, max_wr: u32, srq_limit: u32) -> Reply {
    let req = Request::ModifySrq {
        srq,
        mask,
        max_wr,
        srq_limit,
    };
    call(dev, id, req)
}

/// ibv_modify_srq(IBV_SRQ_MAX_WR) as rxe's queue resize: the receives
/// posted and not yet consumed (some already in the endpoint, some still
/// unread in the ring) all stay, in order, and an RC QP on the SRQ
/// consumes every one; less room than they need, a max_wr below the armed
/// limit, 0 or above the device's limit are EINVAL and change nothing.
#[test]
fn srq_resize_keeps_posted_receives_in_order() {
    let mut dev = device(11);
    let c = hello(&mut dev);
    let pd = alloc_pd(&mut dev, c.id);
    let (srq, mut old) = create_srq(&mut dev, c.id, pd, 4);
    post_recvs(&mut old, 0..3);
    dev.consume();
    assert_eq!(
        dev.endpoint.srq_len(dev_srq_id(&dev, c.id, srq)),
        Some(3),
        "the endpoint took them"
    );
    assert_eq!(old.len().unwrap(), 3, "their slots stay taken until used");
    post_recvs(&mut old, 3..5);
    ok(modify(&mut dev, c.id, srq, 2, 0, 2));
    for (max_wr, why) in [
        (4, "five receives posted"),
        (1, "below the armed limit"),
        (0, "zero"),
        (dev.objects.attr().max_srq_wr + 1, "above max_srq_wr"),
    ] {
        assert_eq!(
            errno(modify(&mut dev, c.id, srq, 1, max_wr, 0)),
            libc::EINVAL,
            "{why}"
        );
    }
    // A limit is checked against the SRQ as it is, before the resize.
    assert_eq!(errno(modify(&mut dev, c.id, srq, 3, 16, 5)), libc::EINVAL);
    assert_eq!(errno(modify(&mut dev, c.id, srq, 4, 16, 0)), libc::EINVAL);
    let (resp, fds): (Response, Vec<OwnedFd>) = ok(modify(&mut dev, c.id, srq, 1, 16, 0));
    assert_eq!(
        resp,
        Response::Srq {
            srq,
            max_wr: 16,
            max_sge: 1,
            srq_limit: 2
        }
    );
    let mut new = Ring::attach(&fds[0]).unwrap().into_producer();
    let taken = dev.endpoint.srq_len(dev_srq_id(&dev, c.id, srq)).unwrap();
    assert!(taken >= 3, "the endpoint keeps what it took");
    assert_eq!(
        new.len().unwrap(),
        5,
        "the new ring counts every receive not yet used"
    );
    // Posts to the old ring are not read any more.
    post_recvs(&mut old, 100..101);
    post_recvs(&mut new, 5..12);
    match ok(call(&mut dev, c.id, Request::QuerySrq { srq })).0 {
        Response::Srq {
            max_wr, srq_limit, ..
        } => assert_eq!((max_wr, srq_limit), (16, 2)),
        r => panic!("{r:?}"),
    }

    let (cq, mut cqe) = create_cq(&mut dev, c.id, 64);
    let mut a = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 0,
        max_inline_data: 0,
    };
    let req = Request::CreateQp {
        pd,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: Some(srq),
        cap,
        sq_sig_all: false,
        user_handle: 0,
    };
    let b = match ok(call(&mut dev, c.id, req)).0 {
        Response::Qp { qpn, .. } => qpn,
        r => panic!("{r:?}"),
    };
    connect_rc(&mut dev, c.id, a.qpn, b, addr(11));
    connect_rc(&mut dev, c.id, b, a.qpn, addr(11));
    for i in 0..12 {
        post_send(
            &mut a,
            &SendSpec {
                wr_id: 1000 + i,
                opcode: WrOpcode::SEND,
                send_flags: send_flags::SIGNALED,
                ..Default::default()
            },
        );
        let mut got = Vec::new();
        assert!(pump(&mut dev, |_| {
            got.extend(std::iter::from_fn(|| pop_cqe(&mut cqe)));
            got.len() == 2
        }));
        let recv = got.iter().find(|w| w.opcode == WcOpcode::Recv as u32);
        let recv = recv.unwrap_or_else(|| panic!("send {i}: {got:?}"));
        assert_eq!((recv.wr_id, recv.status), (i, WcStatus::Success as u32));
    }
    assert_eq!(dev.endpoint.srq_len(dev_srq_id(&dev, c.id, srq)), Some(0));
    // Fewer than the limit of 2 left: the armed limit fired and disarmed.
    dev.deliver();
    assert_eq!(
        new.len().unwrap(),
        0,
        "every used receive's slot given back"
    );
    assert_eq!(events(&c), vec![(0x5151, event::SRQ_LIMIT_REACHED)]);
    // Empty: shrinking to 1 is fine.
    let (resp, fds) = ok(modify(&mut dev, c.id, srq, 1, 1, 0));
    assert!(matches!(resp, Response::Srq { max_wr: 1, .. }), "{resp:?}");
    assert_eq!(fds.len(), 1);
}

/// The endpoint's id of a client's SRQ.
fn dev_srq_id(dev: &Device, id: u32, srq: u32) -> u32 {
    dev.objects.session(id).unwrap().srqs[&srq].id
}
