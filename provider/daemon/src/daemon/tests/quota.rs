//! The quota in-process: what each request charges, the per-client
//! refusal, and that a client going away gives back everything it held.

use rxu_abi::proto::{QpType, Request, Response};

use super::harness::*;
use crate::daemon::device::Device;
use crate::daemon::quota::{Kind, Limits};

#[test]
fn every_object_is_charged_and_teardown_gives_everything_back() {
    let mut dev = device(60);
    let c = hello(&mut dev);
    let q = |dev: &Device, k| dev.objects.quota.used(c.id, k);
    // The memory, async socket and doorbell of Hello.
    assert_eq!(q(&dev, Kind::Fds), 3);
    assert_eq!(q(&dev, Kind::Unhello), 0);
    assert_eq!(q(&dev, Kind::Sessions), 1);
    let pd = alloc_pd(&mut dev, c.id);
    let (cq, _ring) = create_cq(&mut dev, c.id, 100);
    let _qp = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
    let (r, _) = ok(call(
        &mut dev,
        c.id,
        Request::CreateSrq {
            pd,
            max_wr: 10,
            max_sge: 1,
            srq_limit: 0,
            user_handle: 0,
        },
    ));
    assert!(matches!(r, Response::Srq { .. }));
    ok(call(&mut dev, c.id, Request::OpenXrcd { oflags: 0 }));
    let buf = vec![0u8; 4096];
    ok(call(
        &mut dev,
        c.id,
        Request::RegMr {
            pd,
            addr: buf.as_ptr() as u64,
            len: 4096,
            iova: buf.as_ptr() as u64,
            access: 1,
        },
    ));
    assert_eq!(q(&dev, Kind::Pds), 1);
    assert_eq!(q(&dev, Kind::Cqs), 1);
    assert_eq!(q(&dev, Kind::CqDepth), 127);
    assert_eq!(q(&dev, Kind::Qps), 1);
    assert_eq!(q(&dev, Kind::Srqs), 1);
    assert_eq!(q(&dev, Kind::Xrcds), 1);
    assert_eq!(q(&dev, Kind::Mrs), 1);
    assert_eq!(q(&dev, Kind::MrBytes), 4096);
    assert!(q(&dev, Kind::Wqes) >= 10 + 16);
    // Resizing moves the depth with it.
    ok(call(&mut dev, c.id, Request::ResizeCq { cq, cqe: 300 }));
    assert_eq!(q(&dev, Kind::CqDepth), 511);
    dev.disconnect(c.id);
    assert!(
        dev.objects.quota.is_empty(),
        "the quota still counts something"
    );
}

#[test]
fn a_client_past_its_limit_gets_enomem_and_destroy_makes_room() {
    let mut dev = device(61);
    let mut l = Limits::default();
    l.apply("session.pds=2").unwrap();
    dev.set_limits(l);
    let c = hello(&mut dev);
    let a = alloc_pd(&mut dev, c.id);
    alloc_pd(&mut dev, c.id);
    assert_eq!(errno(call(&mut dev, c.id, Request::AllocPd)), libc::ENOMEM);
    ok(call(&mut dev, c.id, Request::DeallocPd { pd: a }));
    alloc_pd(&mut dev, c.id);
    // A failed destroy gives nothing back.
    assert_eq!(
        errno(call(&mut dev, c.id, Request::DeallocPd { pd: 9999 })),
        libc::ENOENT
    );
    assert_eq!(dev.objects.quota.used(c.id, Kind::Pds), 2);
    dev.disconnect(c.id);
    assert!(dev.objects.quota.is_empty());
}
