//! XRC objects in the daemon: domains shared through a file, close EBUSY,
//! XRC SRQ numbers, target QPs and their holders across sessions.

use std::os::fd::{AsFd, OwnedFd};

use rxu_abi::proto::{QpCap, QpType, Request, Response};

use super::harness::*;

fn open_xrcd(
    dev: &mut crate::daemon::device::Device,
    id: u32,
    file: Option<&OwnedFd>,
    oflags: u32,
) -> Result<u32, i32> {
    let fds: Vec<OwnedFd> = file
        .map(|f| f.as_fd().try_clone_to_owned().unwrap())
        .into_iter()
        .collect();
    let r = dev.handle(id, Request::OpenXrcd { oflags }, fds);
    match r.resp {
        Response::Xrcd { xrcd } => Ok(xrcd),
        Response::Error { errno, .. } => Err(errno),
        other => panic!("{other:?}"),
    }
}

fn tmp_file() -> OwnedFd {
    let f = std::env::temp_dir().join(format!("rxu-xrcd-test-{}", std::process::id()));
    let file = std::fs::File::create(&f).unwrap();
    std::fs::remove_file(&f).unwrap();
    file.into()
}

#[test]
fn domains_srqs_and_targets_across_sessions() {
    let mut dev = device(31);
    let (a, b) = (hello(&mut dev), hello(&mut dev));
    let file = tmp_file();
    let creat = libc::O_CREAT as u32;
    assert_eq!(open_xrcd(&mut dev, a.id, Some(&file), 0), Err(libc::EINVAL));
    let xa = open_xrcd(&mut dev, a.id, Some(&file), creat).unwrap();
    let xb = open_xrcd(&mut dev, b.id, Some(&file), 0).unwrap();
    assert_eq!(xa, xb, "one file, one domain");
    let excl = creat | libc::O_EXCL as u32;
    assert_eq!(
        open_xrcd(&mut dev, b.id, Some(&file), excl),
        Err(libc::EINVAL)
    );
    let private = open_xrcd(&mut dev, b.id, None, 0).unwrap();
    assert_ne!(private, xa);

    // An XRC SRQ in A's domain; its CQ is busy while it exists.
    let pd = alloc_pd(&mut dev, a.id);
    let (cq, _ring) = create_cq(&mut dev, a.id, 8);
    let xrc_srq = |dev: &mut crate::daemon::device::Device, xrcd| {
        call(
            dev,
            a.id,
            Request::CreateXrcSrq {
                pd,
                xrcd,
                cq,
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
                user_handle: 0,
            },
        )
    };
    assert_eq!(
        errno(xrc_srq(&mut dev, private)),
        libc::EINVAL,
        "B's private domain"
    );
    let (srq, srqn) = match ok(xrc_srq(&mut dev, xa)).0 {
        Response::XrcSrq { srq, srqn, .. } => (srq, srqn),
        r => panic!("{r:?}"),
    };
    assert!(srqn > 0 && srqn < 1 << 24);
    assert_eq!(
        errno(call(&mut dev, a.id, Request::DestroyCq { cq })),
        libc::EBUSY
    );
    assert_eq!(
        errno(call(&mut dev, a.id, Request::CloseXrcd { xrcd: xa })),
        libc::EBUSY
    );

    // A target QP made by A, opened by B; XRC_RECV through CreateQp is refused.
    let refused = Request::CreateQp {
        pd,
        qp_type: QpType::XrcRecv,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
        user_handle: 0,
    };
    assert_eq!(errno(call(&mut dev, a.id, refused)), libc::EINVAL);
    let qpn = match ok(call(
        &mut dev,
        a.id,
        Request::CreateXrcTgtQp {
            xrcd: xa,
            user_handle: 1,
        },
    ))
    .0
    {
        Response::Qp { qpn, .. } => qpn,
        r => panic!("{r:?}"),
    };
    let open = |xrcd, qpn| Request::OpenXrcTgtQp {
        xrcd,
        qpn,
        user_handle: 2,
    };
    assert_eq!(
        errno(call(&mut dev, b.id, open(private, qpn))),
        libc::EINVAL
    );
    ok(call(&mut dev, b.id, open(xb, qpn)));
    assert_eq!(
        errno(call(&mut dev, b.id, open(xb, qpn))),
        libc::EINVAL,
        "twice"
    );
    assert_eq!(
        errno(call(&mut dev, b.id, Request::CloseXrcd { xrcd: xb })),
        libc::EBUSY
    );

    assert!(matches!(
        ok(call(&mut dev, a.id, Request::QuerySrq { srq })).0,
        Response::Srq { max_wr: 4, .. }
    ));
    // A goes away: its SRQ and domain open go, the target QP stays with B.
    dev.disconnect(a.id);
    assert!(dev.objects.has_qp(qpn), "B still holds the target QP");
    assert_eq!(dev.objects.xrcds.len(), 2);
    ok(call(&mut dev, b.id, Request::DestroyQp { qp: qpn }));
    assert!(!dev.objects.has_qp(qpn));
    ok(call(&mut dev, b.id, Request::CloseXrcd { xrcd: xb }));
    assert_eq!(
        errno(call(&mut dev, b.id, Request::CloseXrcd { xrcd: xb })),
        libc::ENOENT
    );
    dev.disconnect(b.id);
    assert!(
        dev.objects.xrcds.is_empty(),
        "the private domain went with B"
    );
}
