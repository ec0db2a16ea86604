//! Hello, version and admin; PD, MR and CQ handles; clients cannot name
//! each other's objects; create_qp's checks and granted caps.

use std::os::fd::OwnedFd;

use transport::qp::access;

use crate::daemon::session::event;
use rxu_abi::proto::abi;
use rxu_abi::proto::{QpCap, QpType, Request, Response, PROTO_VERSION};
use rxu_abi::ring::{Doorbell, Ring};
use rxu_testkit::seqpacket_pair;

use super::harness::*;

#[test]
fn hello_first_version_checked_admin_limited() {
    let mut dev = device(1);
    let id = dev.connect(1);
    let r = call(&mut dev, id, Request::AllocPd);
    assert!(r.close);
    assert_eq!(errno(r), libc::EPROTO);
    let id = dev.connect(1);
    let r = call(
        &mut dev,
        id,
        Request::Hello {
            version: PROTO_VERSION + 1,
            pid: 1,
            admin: true,
        },
    );
    assert_eq!(errno(r), libc::EPROTONOSUPPORT);
    let id = dev.connect(1);
    let r = call(
        &mut dev,
        id,
        Request::Hello {
            version: PROTO_VERSION,
            pid: 1,
            admin: false,
        },
    );
    assert_eq!(errno(r), libc::EINVAL, "an application Hello needs its fds");
    // The daemon's own memory is not a client's to hand over (the test
    // process plays the daemon here).
    dev.objects.set_allow_own_mem(false);
    let id = dev.connect(std::process::id());
    let own: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")
        .unwrap()
        .into();
    let (_rd, wr) = seqpacket_pair();
    let bell: OwnedFd = Doorbell::new().unwrap().into();
    let r = dev.handle(
        id,
        Request::Hello {
            version: PROTO_VERSION,
            pid: 1,
            admin: false,
        },
        vec![own, wr, bell],
    );
    assert_eq!(errno(r), libc::EINVAL);
    dev.objects.set_allow_own_mem(true);
    let id = dev.connect(1);
    ok(call(
        &mut dev,
        id,
        Request::Hello {
            version: PROTO_VERSION,
            pid: 1,
            admin: true,
        },
    ));
    assert_eq!(errno(call(&mut dev, id, Request::AllocPd)), libc::EPERM);
    assert!(matches!(
        ok(call(&mut dev, id, Request::Status)).0,
        Response::Status { .. }
    ));
    assert!(matches!(
        ok(call(&mut dev, id, Request::QueryDevice)).0,
        Response::Device(_)
    ));
    assert_eq!(
        errno(call(&mut dev, id, Request::QueryPort { port: 2 })),
        libc::EINVAL
    );
    let c = hello(&mut dev);
    assert_eq!(
        errno(call(&mut dev, c.id, Request::Shutdown { force: true })),
        libc::EPERM
    );
    // Shutdown from the admin is refused while an application is open.
    let r = call(&mut dev, id, Request::Shutdown { force: false });
    match r.resp {
        Response::Error { errno, msg } => {
            assert_eq!(errno, libc::EBUSY);
            assert!(msg.contains(&std::process::id().to_string()), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!dev.shutdown);
    ok(call(&mut dev, id, Request::Shutdown { force: true }));
    assert!(dev.shutdown);
    assert_eq!(events(&c), vec![(0, event::DEVICE_FATAL)]);
}

/// DEVICE_FATAL that finds a client's async socket full is not lost by
/// the daemon: it lets the socket go without shutting it down, so the
/// client's own write end (rxu-client's watcher) can still say it once
/// the application has read; a shut socket would refuse that with EPIPE.
#[test]
fn device_fatal_on_a_full_async_socket_leaves_it_open_for_the_client() {
    use crate::daemon::session::event_record;
    use crate::daemon::sys;
    use std::os::fd::AsFd;
    let mut dev = device(15);
    let c = hello(&mut dev);
    let filler = event_record(1, event::PORT_ACTIVE);
    let mut queued = 0;
    while queued < 100_000 && sys::send_record(c.async_wr.as_fd(), &filler) {
        queued += 1;
    }
    assert!(queued > 0 && queued < 100_000, "{queued} records fit");
    dev.fatal_to_all();
    for i in 0..queued {
        assert_eq!(events_one(&c), Some((1, event::PORT_ACTIVE)), "record {i}");
    }
    assert_eq!(events_one(&c), None, "nothing after the fillers yet");
    let fatal = event_record(0, event::DEVICE_FATAL);
    assert!(
        matches!(sys::try_send_record(c.async_wr.as_fd(), &fatal), Ok(true)),
        "the client's end can still say DEVICE_FATAL"
    );
    assert_eq!(events(&c), vec![(0, event::DEVICE_FATAL)]);
}

/// On a device serving every user, another user's admin connection may
/// query but not stop the daemon.
#[test]
fn shutdown_from_another_user_is_refused() {
    let mut dev = device(13);
    let id = dev.connect(1);
    dev.mark_other_user(id);
    ok(call(
        &mut dev,
        id,
        Request::Hello {
            version: PROTO_VERSION,
            pid: 1,
            admin: true,
        },
    ));
    assert!(matches!(
        ok(call(&mut dev, id, Request::Status)).0,
        Response::Status { .. }
    ));
    assert_eq!(
        errno(call(&mut dev, id, Request::Shutdown { force: true })),
        libc::EPERM
    );
    assert!(!dev.shutdown);
}

#[test]
fn pd_mr_cq_busy_and_unknown_handles() {
    let mut dev = device(2);
    let c = hello(&mut dev);
    let pd = alloc_pd(&mut dev, c.id);
    let buf = vec![0u8; 4096];
    let (mr, lkey) = match ok(call(
        &mut dev,
        c.id,
        Request::RegMr {
            pd,
            addr: buf.as_ptr() as u64,
            len: 4096,
            iova: buf.as_ptr() as u64,
            access: access::LOCAL_WRITE,
        },
    ))
    .0
    {
        Response::Mr { mr, lkey, rkey } => {
            assert_eq!(lkey, rkey);
            (mr, lkey)
        }
        r => panic!("{r:?}"),
    };
    assert_ne!(lkey, 0);
    let bad_access = Request::RegMr {
        pd,
        addr: buf.as_ptr() as u64,
        len: 4096,
        iova: 0,
        access: access::REMOTE_WRITE,
    };
    assert_eq!(errno(call(&mut dev, c.id, bad_access)), libc::EINVAL);
    let zero = Request::RegMr {
        pd,
        addr: buf.as_ptr() as u64,
        len: 0,
        iova: 0,
        access: 0,
    };
    assert_eq!(errno(call(&mut dev, c.id, zero)), libc::EINVAL);
    assert_eq!(
        errno(call(&mut dev, c.id, Request::DeallocPd { pd })),
        libc::EBUSY
    );
    let (cq, _ring) = create_cq(&mut dev, c.id, 8);
    let qp = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
    assert_eq!(
        errno(call(&mut dev, c.id, Request::DestroyCq { cq })),
        libc::EBUSY
    );
    ok(call(&mut dev, c.id, Request::DestroyQp { qp: qp.qpn }));
    assert_eq!(
        errno(call(&mut dev, c.id, Request::DestroyQp { qp: qp.qpn })),
        libc::ENOENT
    );
    ok(call(&mut dev, c.id, Request::DestroyCq { cq }));
    assert_eq!(
        errno(call(&mut dev, c.id, Request::DestroyCq { cq })),
        libc::ENOENT
    );
    ok(call(&mut dev, c.id, Request::DeregMr { mr }));
    assert_eq!(
        errno(call(&mut dev, c.id, Request::DeregMr { mr })),
        libc::ENOENT
    );
    ok(call(&mut dev, c.id, Request::DeallocPd { pd }));
    assert_eq!(
        errno(call(&mut dev, c.id, Request::DeallocPd { pd })),
        libc::ENOENT
    );
    // Unexpected fds with a request are refused (and closed).
    let (a, _b) = seqpacket_pair();
    let r = dev.handle(c.id, Request::AllocPd, vec![a]);
    assert_eq!(errno(r), libc::EINVAL);
}

#[test]
fn clients_cannot_name_each_others_objects() {
    let mut dev = device(3);
    let a = hello(&mut dev);
    let b = hello(&mut dev);
    let pd = alloc_pd(&mut dev, a.id);
    let (cq, _r) = create_cq(&mut dev, a.id, 4);
    let qp = create_qp(&mut dev, a.id, pd, cq, QpType::Rc);
    let pd_b = alloc_pd(&mut dev, b.id);
    assert_ne!(pd, pd_b, "PD numbers are device-wide unique");
    assert_eq!(
        errno(call(&mut dev, b.id, Request::DeallocPd { pd })),
        libc::ENOENT
    );
    assert_eq!(
        errno(call(&mut dev, b.id, Request::DestroyCq { cq })),
        libc::ENOENT
    );
    assert_eq!(
        errno(call(&mut dev, b.id, Request::DestroyQp { qp: qp.qpn })),
        libc::ENOENT
    );
    assert_eq!(
        errno(call(
            &mut dev,
            b.id,
            Request::QueryQp {
                qp: qp.qpn,
                mask: 0
            }
        )),
        libc::EINVAL
    );
    let steal = Request::RegMr {
        pd,
        addr: 4096,
        len: 4096,
        iova: 4096,
        access: 0,
    };
    assert_eq!(errno(call(&mut dev, b.id, steal)), libc::EINVAL);
    let cross = Request::CreateQp {
        pd: pd_b,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
        user_handle: 0,
    };
    // B has no CQ with A's handle (handles may coincide: B's table is B's).
    let (cq_b, _rb) = create_cq(&mut dev, b.id, 4);
    if cq_b != cq {
        assert_eq!(errno(call(&mut dev, b.id, cross)), libc::EINVAL);
    }
}

#[test]
fn create_qp_checks_and_grants_caps() {
    let mut dev = device(4);
    let c = hello(&mut dev);
    let pd = alloc_pd(&mut dev, c.id);
    let (cq, _r) = create_cq(&mut dev, c.id, 4);
    let a = dev.objects.attr().clone();
    let mk = |cap: QpCap| Request::CreateQp {
        pd,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: true,
        user_handle: 1,
    };
    let base = QpCap {
        max_send_wr: 10,
        max_recv_wr: 10,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    for bad in [
        QpCap {
            max_send_wr: a.max_qp_wr + 1,
            ..base
        },
        QpCap {
            max_recv_sge: a.max_sge + 1,
            ..base
        },
        QpCap {
            max_inline_data: a.max_inline_data + 1,
            ..base
        },
    ] {
        assert_eq!(
            errno(call(&mut dev, c.id, mk(bad))),
            libc::EINVAL,
            "{bad:?}"
        );
    }
    let want = QpCap {
        max_inline_data: 200,
        ..base
    };
    match ok(call(&mut dev, c.id, mk(want))) {
        (
            Response::Qp {
                qpn,
                cap,
                sq_slot,
                rq_slot,
            },
            fds,
        ) => {
            assert_eq!(fds.len(), 2);
            assert_eq!(cap.max_inline_data, 200);
            assert_eq!(sq_slot, abi::send_slot_size(1, 200));
            assert_eq!(rq_slot, abi::recv_slot_size(1));
            let sq = Ring::attach(&fds[0]).unwrap();
            assert_eq!((sq.slot_size(), sq.slots()), (sq_slot, 16));
            match ok(call(&mut dev, c.id, Request::QueryQp { qp: qpn, mask: 0 })).0 {
                Response::QpAttr { attr, cap: c2 } => {
                    assert_eq!(c2, cap);
                    assert_eq!(attr.qp_state, 0);
                    assert!(attr.sq_sig_all);
                    // A RESET QP has no port yet.
                    assert_eq!(attr.port_num, 0);
                }
                r => panic!("{r:?}"),
            }
        }
        r => panic!("{:?}", r.0),
    }
    // Max SGEs grant real inline room of max_sge * 16 bytes.
    match ok(call(
        &mut dev,
        c.id,
        mk(QpCap {
            max_send_sge: 4,
            ..base
        }),
    ))
    .0
    {
        Response::Qp { cap, .. } => assert_eq!(cap.max_inline_data, 64),
        r => panic!("{r:?}"),
    }
}

/// Identity, not type: fds of the right kind that are not the client's
/// (a socket pair another process made, another process's memory) are
/// refused with EPERM and the session closes.
#[test]
fn hello_checks_fds_against_the_socket_peer() {
    let mut dev = device(14);
    let hello = Request::Hello {
        version: PROTO_VERSION,
        pid: 1,
        admin: false,
    };
    let mem = || -> OwnedFd {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/mem")
            .unwrap()
            .into()
    };
    // The socket says the client is pid 1: our socket pair is not its.
    let id = dev.connect(1);
    let (_rd, wr) = seqpacket_pair();
    let bell: OwnedFd = Doorbell::new().unwrap().into();
    let r = dev.handle(id, hello.clone(), vec![mem(), wr, bell]);
    assert!(r.close);
    match r.resp {
        Response::Error { errno, msg } => {
            assert_eq!(errno, libc::EPERM);
            assert!(msg.contains("not by the client (pid 1)"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    // Our socket pair, but a file of ours as our memory.
    let id = dev.connect(std::process::id());
    let (_rd, wr) = seqpacket_pair();
    let bell: OwnedFd = Doorbell::new().unwrap().into();
    let path = std::env::temp_dir().join(format!("rxu-notmem-{}", std::process::id()));
    let file: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap()
        .into();
    let _ = std::fs::remove_file(&path);
    let r = dev.handle(id, hello, vec![file, wr, bell]);
    assert!(r.close);
    match r.resp {
        Response::Error { errno, msg } => {
            assert_eq!(errno, libc::EPERM);
            assert!(msg.contains("is not /proc/"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
}
