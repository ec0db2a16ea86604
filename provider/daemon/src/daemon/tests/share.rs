//! Shared contexts (`share`): a session that imports another's cmd_fd may
//! import its PDs and query its MRs, and keeps them when the other goes.

use std::fs::File;
use std::os::fd::OwnedFd;

use transport::qp::{access, send_flags, WcStatus};
use transport::verbs::{Sge, WrOpcode};

use super::harness::*;
use super::spec::SendSpec;
use rxu_abi::proto::{QpType, Request, Response};

fn null() -> OwnedFd {
    File::open("/dev/null").unwrap().into()
}

fn with_fd(dev: &mut crate::daemon::device::Device, id: u32, req: Request, fd: OwnedFd) -> i32 {
    match dev.handle(id, req, vec![fd]).resp {
        Response::Error { errno, .. } => errno,
        _ => 0,
    }
}

#[test]
fn an_imported_context_shares_pds_and_mrs() {
    let mut dev = device(50);
    let a = hello(&mut dev);
    let b = hello(&mut dev);
    let c = hello(&mut dev);
    let pd = alloc_pd(&mut dev, a.id);
    let buf = vec![0x11u8; 8192];
    let acc = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let reg = Request::RegMr {
        pd,
        addr: buf.as_ptr() as u64,
        len: 8192,
        iova: buf.as_ptr() as u64,
        access: acc,
    };
    let (mr, lkey, rkey) = match ok(call(&mut dev, a.id, reg)).0 {
        Response::Mr { mr, lkey, rkey } => (mr, lkey, rkey),
        r => panic!("{r:?}"),
    };

    // The context's file; b presents a dup of it, c another open.
    let cmd = null();
    assert_eq!(
        with_fd(&mut dev, a.id, Request::BindCmdFd, cmd.try_clone().unwrap()),
        0
    );
    assert_eq!(
        with_fd(&mut dev, c.id, Request::ImportContext, null()),
        libc::ENOENT
    );
    assert_eq!(
        with_fd(
            &mut dev,
            b.id,
            Request::ImportContext,
            cmd.try_clone().unwrap()
        ),
        0
    );
    assert_eq!(
        errno(call(&mut dev, b.id, Request::ImportContext)),
        libc::EINVAL
    );

    // Not imported yet: b cannot use the PD; c (another context) never.
    let (cq_b, mut ring_b) = create_cq(&mut dev, b.id, 16);
    let reg_b = |pd| Request::RegMr {
        pd,
        addr: buf.as_ptr() as u64,
        len: 64,
        iova: 0,
        access: access::LOCAL_WRITE,
    };
    assert_eq!(errno(call(&mut dev, b.id, reg_b(pd))), libc::EINVAL);
    assert_eq!(
        errno(call(&mut dev, b.id, Request::ImportPd { pd: pd + 100 })),
        libc::ENOENT
    );
    assert_eq!(
        errno(call(&mut dev, c.id, Request::ImportPd { pd })),
        libc::ENOENT
    );
    ok(call(&mut dev, b.id, Request::ImportPd { pd }));
    ok(call(&mut dev, b.id, reg_b(pd)));
    match ok(call(&mut dev, b.id, Request::ImportMr { mr })).0 {
        Response::ImportedMr {
            pd: p,
            lkey: l,
            rkey: r,
            len,
        } => assert_eq!((p, l, r, len), (pd, lkey, rkey, 8192)),
        r => panic!("{r:?}"),
    }
    assert_eq!(
        errno(call(&mut dev, b.id, Request::ImportMr { mr: mr + 100 })),
        libc::ENOENT
    );
    assert_eq!(
        errno(call(&mut dev, c.id, Request::ImportMr { mr })),
        libc::ENOENT
    );

    // b's QPs in a's PD; the PD is busy for a while they exist.
    let mut q1 = create_qp(&mut dev, b.id, pd, cq_b, QpType::Rc);
    let q2 = create_qp(&mut dev, b.id, pd, cq_b, QpType::Rc);
    connect_rc(&mut dev, b.id, q1.qpn, q2.qpn, addr(50));
    connect_rc(&mut dev, b.id, q2.qpn, q1.qpn, addr(50));
    assert_eq!(
        errno(call(&mut dev, a.id, Request::DeallocPd { pd })),
        libc::EBUSY
    );

    // a goes: b keeps the PD and the MR, which still reaches a's memory
    // (this process's).
    dev.disconnect(a.id);
    let sb = dev.objects.session(b.id).unwrap();
    assert!(sb.pds.contains(&pd) && sb.mrs.contains_key(&mr));
    assert_eq!(dev.endpoint.memory().mr(lkey).map(|m| m.client), Some(b.id));
    post_send(
        &mut q1,
        &SendSpec {
            wr_id: 1,
            opcode: WrOpcode::RDMA_WRITE,
            send_flags: send_flags::SIGNALED,
            remote_addr: buf.as_ptr() as u64 + 4096,
            rkey,
            sges: vec![Sge {
                addr: buf.as_ptr() as u64,
                length: 256,
                lkey,
            }],
            ..Default::default()
        },
    );
    let mut got = None;
    assert!(pump(&mut dev, |_| {
        got = pop_cqe(&mut ring_b);
        got.is_some()
    }));
    assert_eq!(got.unwrap().status, WcStatus::Success as u32);

    // A third context on the same file joins b's group now.
    assert_eq!(with_fd(&mut dev, c.id, Request::ImportContext, cmd), 0);
    ok(call(&mut dev, c.id, Request::ImportPd { pd }));
    // Dereg through another context of the group destroys the MR, as on
    // a kernel; then the PD goes once its QPs are gone.
    ok(call(&mut dev, c.id, Request::DeregMr { mr }));
    assert!(dev.endpoint.memory().mr(lkey).is_none());
    assert_eq!(
        errno(call(&mut dev, b.id, Request::ImportMr { mr })),
        libc::ENOENT
    );
    for q in [q1.qpn, q2.qpn] {
        ok(call(&mut dev, b.id, Request::DestroyQp { qp: q }));
    }
    let mrs: Vec<u32> = dev
        .objects
        .session(b.id)
        .unwrap()
        .mrs
        .keys()
        .copied()
        .collect();
    for m in mrs {
        ok(call(&mut dev, b.id, Request::DeregMr { mr: m }));
    }
    ok(call(&mut dev, c.id, Request::DeallocPd { pd }));
    assert_eq!(
        errno(call(&mut dev, b.id, Request::DeallocPd { pd })),
        libc::ENOENT
    );
    assert!(dev.objects.sessions().all(|s| !s.may_use_pd(pd)));
    drop(buf);
}

#[test]
fn mr_handles_are_unique_across_sessions() {
    let mut dev = device(51);
    let a = hello(&mut dev);
    let b = hello(&mut dev);
    let buf = [0u8; 64];
    let mut handles = Vec::new();
    for id in [a.id, b.id, a.id, b.id] {
        let pd = alloc_pd(&mut dev, id);
        let reg = Request::RegMr {
            pd,
            addr: buf.as_ptr() as u64,
            len: 64,
            iova: 0,
            access: 0,
        };
        match ok(call(&mut dev, id, reg)).0 {
            Response::Mr { mr, .. } => handles.push(mr),
            r => panic!("{r:?}"),
        }
    }
    let mut uniq = handles.clone();
    uniq.sort_unstable();
    uniq.dedup();
    assert_eq!(uniq.len(), handles.len(), "{handles:?}");
}
