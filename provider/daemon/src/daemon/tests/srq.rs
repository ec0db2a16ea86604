//! SRQ limit event and busy.

use super::spec::RecvSpec;
use crate::daemon::session::event;
use rxu_abi::proto::{QpCap, QpType, Request, Response};
use rxu_abi::ring::Ring;

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
    assert_eq!(events(&c), vec![(0x5150, event::SRQ_LIMIT_REACHED)]);
    match ok(call(&mut dev, c.id, Request::QuerySrq { srq })).0 {
        Response::Srq {
            srq_limit, max_wr, ..
        } => assert_eq!((srq_limit, max_wr), (0, 8)),
        r => panic!("{r:?}"),
    }
    let (cq, _r) = create_cq(&mut dev, c.id, 4);
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
    ok(call(&mut dev, c.id, Request::DestroyQp { qp: qpn }));
    ok(call(&mut dev, c.id, Request::DestroySrq { srq }));
}
