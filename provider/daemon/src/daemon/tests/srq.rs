//! SRQ limit event and busy.

use super::spec::{RecvSpec, SendSpec};
use crate::daemon::device::Device;
use crate::daemon::session::event;
use rxu_abi::proto::{QpCap, QpType, Request, Response};
use rxu_abi::ring::Ring;
use transport::qp::send_flags;
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
    assert_eq!(
        errno(call(
            &mut dev,
            c.id,
            Request::ModifySrq {
                srq,
                mask: 1,
                max_wr: 16,
                srq_limit: 0
            }
        )),
        libc::EINVAL
    );
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
