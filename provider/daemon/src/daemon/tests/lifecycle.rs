//! A client that goes away: everything it made is destroyed.

use transport::qp::{access, send_flags, WcStatus};

use super::spec::SendSpec;
use crate::daemon::session::event;
use rxu_abi::proto::{QpType, Request, Response};
use transport::verbs::{Sge, WrOpcode};

use super::harness::*;

#[test]
fn disconnect_destroys_everything_and_peers_time_out() {
    let mut dev = device(7);
    let a = hello(&mut dev);
    let b = hello(&mut dev);
    let pd_a = alloc_pd(&mut dev, a.id);
    let pd_b = alloc_pd(&mut dev, b.id);
    let buf = vec![0u8; 4096];
    let lkey = match ok(call(
        &mut dev,
        b.id,
        Request::RegMr {
            pd: pd_b,
            addr: buf.as_ptr() as u64,
            len: 4096,
            iova: buf.as_ptr() as u64,
            access: access::LOCAL_WRITE,
        },
    ))
    .0
    {
        Response::Mr { lkey, .. } => lkey,
        r => panic!("{r:?}"),
    };
    let (cq_a, _ra) = create_cq(&mut dev, a.id, 8);
    let (cq_b, mut ring_b) = create_cq(&mut dev, b.id, 8);
    let qa = create_qp(&mut dev, a.id, pd_a, cq_a, QpType::Rc);
    let mut qb = create_qp(&mut dev, b.id, pd_b, cq_b, QpType::Rc);
    connect_rc(&mut dev, a.id, qa.qpn, qb.qpn, addr(7));
    connect_rc(&mut dev, b.id, qb.qpn, qa.qpn, addr(7));
    let srq = ok(call(
        &mut dev,
        a.id,
        Request::CreateSrq {
            pd: pd_a,
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
            user_handle: 5,
        },
    ));
    assert_eq!(srq.1.len(), 1);
    dev.disconnect(a.id);
    assert!(dev.endpoint.qp(qa.qpn).is_none());
    assert!(!dev.objects.has_qp(qa.qpn));
    match dev.status() {
        Response::Status { clients, .. } => {
            assert_eq!(clients.len(), 1);
            assert_eq!(clients[0].qps.len(), 1);
        }
        r => panic!("{r:?}"),
    }
    // B's peer is gone: its SEND retries run out (timeout 10 = 4 ms,
    // retry_cnt 2) instead of hanging.
    post_send(
        &mut qb,
        &SendSpec {
            wr_id: 77,
            opcode: WrOpcode::SEND,
            send_flags: send_flags::SIGNALED,
            sges: vec![Sge {
                addr: buf.as_ptr() as u64,
                length: 16,
                lkey,
            }],
            ..Default::default()
        },
    );
    let mut e = None;
    assert!(pump(&mut dev, |_| {
        e = pop_cqe(&mut ring_b);
        e.is_some()
    }));
    let e = e.unwrap();
    assert_eq!((e.wr_id, e.status), (77, WcStatus::RetryExcErr as u32));
    assert!(events(&b).contains(&(0x9900, event::QP_FATAL)));
    dev.disconnect(b.id);
    assert_eq!(dev.endpoint.qpns().count(), 0);
    assert_eq!(dev.endpoint.memory().stats().mrs, 0);
    assert!(dev.objects.is_empty());
}
