//! Multicast through the device: QPs attached with AttachMcast receive a
//! SEND to their group (a copy each), the driver joins and leaves the IP
//! group with them; rdma_cm joins report MULTICAST_JOIN with the group's
//! address vector. In a private network namespace (see the harness).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};

use transport::engine::MCAST_QPN;
use transport::qp::{access, send_flags};

use super::spec::{RecvSpec, SendSpec};
use crate::daemon::device::Device;
use crate::verbs;
use rxu_abi::proto::cm::{event, port_space, CmEventRecord, CmRequest, CmResponse, RDMA_UDP_QKEY};
use rxu_abi::proto::{decode, QpType, Request, Response, PROTO_VERSION};
use rxu_testkit::seqpacket_pair;
use transport::verbs::{Sge, WrOpcode};

use super::harness::*;

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);

fn mgid() -> [u8; 16] {
    GROUP.to_ipv6_mapped().octets()
}

fn reg(dev: &mut Device, id: u32, pd: u32, b: &[u8]) -> u32 {
    let r = call(
        dev,
        id,
        Request::RegMr {
            pd,
            addr: b.as_ptr() as u64,
            len: b.len() as u64,
            iova: b.as_ptr() as u64,
            access: access::LOCAL_WRITE,
        },
    );
    match ok(r).0 {
        Response::Mr { lkey, .. } => lkey,
        r => panic!("{r:?}"),
    }
}

fn attach(dev: &mut Device, id: u32, qp: u32, gid: [u8; 16], on: bool) -> Response {
    let req = if on {
        Request::AttachMcast { qp, gid, lid: 0 }
    } else {
        Request::DetachMcast { qp, gid, lid: 0 }
    };
    call(dev, id, req).resp
}

fn post_recv(qp: &mut TestQp, wr_id: u64, buf: &[u8], lkey: u32) {
    let rq = qp.rq.as_mut().unwrap();
    let mut slot = vec![0u8; rq.slot_size()];
    RecvSpec {
        wr_id,
        sges: vec![Sge {
            addr: buf.as_ptr() as u64,
            length: buf.len() as u32,
            lkey,
        }],
    }
    .write(&mut slot);
    assert!(rq.try_push(&slot).unwrap());
}

#[test]
fn two_attached_qps_each_receive_one_send_to_the_group() {
    in_private_netns(|| {
        let mut tx = device(30);
        let mut rx = device(31);
        let (ct, cr) = (hello(&mut tx), hello(&mut rx));
        let (tpd, rpd) = (alloc_pd(&mut tx, ct.id), alloc_pd(&mut rx, cr.id));
        let src = b"one send, two copies".to_vec();
        let dst = vec![0u8; 3 * 256];
        let skey = reg(&mut tx, ct.id, tpd, &src);
        let dkey = reg(&mut rx, cr.id, rpd, &dst);
        let (tcq, mut tring) = create_cq(&mut tx, ct.id, 16);
        let (rcq, mut rring) = create_cq(&mut rx, cr.id, 16);
        let mut s = create_qp(&mut tx, ct.id, tpd, tcq, QpType::Ud);
        let mut qps: Vec<TestQp> = (0..3)
            .map(|_| create_qp(&mut rx, cr.id, rpd, rcq, QpType::Ud))
            .collect();
        ud_to_rts(&mut tx, ct.id, s.qpn);
        for (i, q) in qps.iter_mut().enumerate() {
            ud_to_rts(&mut rx, cr.id, q.qpn);
            post_recv(q, i as u64, &dst[i * 256..(i + 1) * 256], dkey);
            assert_eq!(attach(&mut rx, cr.id, q.qpn, mgid(), true), Response::Ok);
        }
        assert_eq!(rx.driver.groups().collect::<Vec<_>>(), [GROUP]);
        // The third leaves again; the group stays for the other two.
        let gone = qps[2].qpn;
        assert_eq!(attach(&mut rx, cr.id, gone, mgid(), false), Response::Ok);
        assert_eq!(rx.driver.groups().count(), 1);
        post_send(
            &mut s,
            &SendSpec {
                wr_id: 7,
                opcode: WrOpcode::SEND,
                send_flags: send_flags::SIGNALED,
                ud_qpn: MCAST_QPN,
                ud_qkey: 0x1111_1111,
                ud_gid: mgid(),
                sges: vec![Sge {
                    addr: src.as_ptr() as u64,
                    length: src.len() as u32,
                    lkey: skey,
                }],
                ..Default::default()
            },
        );
        assert!(pump(&mut tx, |_| tring.len().unwrap() >= 1));
        assert_eq!(pop_cqe(&mut tring).unwrap().status, 0);
        let mut got = Vec::new();
        assert!(pump(&mut rx, |_| {
            while let Some(e) = pop_cqe(&mut rring) {
                got.push(e);
            }
            got.len() >= 2
        }));
        // Nothing more comes (the detached QP's receive stays posted).
        for _ in 0..200 {
            rx.pump().unwrap();
            rx.deliver();
        }
        assert!(pop_cqe(&mut rring).is_none());
        got.sort_by_key(|e| e.wr_id);
        let seen: Vec<(u64, u32, u32, u32, u32)> = got
            .iter()
            .map(|e| (e.wr_id, e.status, e.qp_num, e.src_qp, e.byte_len))
            .collect();
        let n = 40 + src.len() as u32;
        assert_eq!(
            seen,
            [(0, 0, qps[0].qpn, s.qpn, n), (1, 0, qps[1].qpn, s.qpn, n)]
        );
        for i in 0..2 {
            assert_eq!(&dst[i * 256 + 40..i * 256 + 40 + src.len()], &src[..]);
        }
        // Closing the client destroys its QPs: the device leaves the group.
        rx.disconnect(cr.id);
        assert_eq!(rx.driver.groups().count(), 0);
    });
}

#[test]
fn attach_refuses_what_the_kernel_refuses() {
    in_private_netns(|| {
        let mut dev = device(32);
        let c = hello(&mut dev);
        let pd = alloc_pd(&mut dev, c.id);
        let (cq, _ring) = create_cq(&mut dev, c.id, 16);
        let rc = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
        let ud = create_qp(&mut dev, c.id, pd, cq, QpType::Ud);
        let errno = |r: Response| match r {
            Response::Error { errno, .. } => errno,
            other => panic!("expected an error, got {other:?}"),
        };
        let unicast = verbs::gid_of(addr(32));
        let v6group: [u8; 16] = "ff0e::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
        assert_eq!(
            errno(attach(&mut dev, c.id, rc.qpn, mgid(), true)),
            libc::EINVAL
        );
        assert_eq!(
            errno(attach(&mut dev, c.id, ud.qpn, unicast, true)),
            libc::EINVAL
        );
        // A real IPv6 group: rxu joins IPv4 groups only.
        assert_eq!(
            errno(attach(&mut dev, c.id, ud.qpn, v6group, true)),
            libc::EOPNOTSUPP
        );
        assert_eq!(
            errno(attach(&mut dev, c.id, 0xabcd, mgid(), true)),
            libc::EINVAL
        );
        assert_eq!(
            errno(attach(&mut dev, c.id, ud.qpn, mgid(), false)),
            libc::EINVAL
        );
        assert_eq!(dev.driver.groups().count(), 0);
        // Attaching twice is one attachment; an attached QP is not
        // destroyed (EBUSY, as the kernel) until it is detached.
        for _ in 0..2 {
            assert_eq!(attach(&mut dev, c.id, ud.qpn, mgid(), true), Response::Ok);
        }
        assert_eq!(dev.endpoint.mcast_members(IpAddr::V4(GROUP)), &[ud.qpn]);
        let destroy = Request::DestroyQp { qp: ud.qpn };
        assert_eq!(
            super::harness::errno(call(&mut dev, c.id, destroy.clone())),
            libc::EBUSY
        );
        assert_eq!(attach(&mut dev, c.id, ud.qpn, mgid(), false), Response::Ok);
        ok(call(&mut dev, c.id, destroy));
        assert_eq!(dev.driver.groups().count(), 0);
        // A client that goes away leaves its groups with its QPs.
        let ud2 = create_qp(&mut dev, c.id, pd, cq, QpType::Ud);
        assert_eq!(attach(&mut dev, c.id, ud2.qpn, mgid(), true), Response::Ok);
        assert_eq!(dev.driver.groups().count(), 1);
        dev.disconnect(c.id);
        assert_eq!(dev.driver.groups().count(), 0);
    });
}

/// Reads the next event record from a channel socket.
fn next_event(sock: &OwnedFd) -> Option<CmEventRecord> {
    let mut b = [0u8; 4096];
    // SAFETY: b is a valid buffer of its length.
    let n = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            b.as_mut_ptr().cast(),
            b.len(),
            libc::MSG_DONTWAIT,
        )
    };
    (n > 0).then(|| decode(&b[..n as usize]).unwrap())
}

#[test]
fn an_rdma_cm_join_reports_the_groups_address_vector_and_the_device_joins() {
    in_private_netns(|| {
        let mut dev = device(33);
        let id = dev.connect(std::process::id());
        let hello = Request::CmHello {
            version: PROTO_VERSION,
            pid: std::process::id(),
        };
        assert!(matches!(
            call(&mut dev, id, hello).resp,
            Response::Hello { .. }
        ));
        let (app, ours) = seqpacket_pair();
        let r = dev.handle(
            id,
            Request::Cm(CmRequest::AttachChannel { channel: 1, tag: 9 }),
            vec![ours],
        );
        assert_eq!(r.resp, Response::Cm(CmResponse::Ok));
        let cm = |dev: &mut Device, r: CmRequest| call(dev, id, Request::Cm(r)).resp;
        let bind = |dev: &mut Device, ps, qp_type| match cm(
            dev,
            CmRequest::Bind {
                channel: 1,
                ps,
                qp_type,
                addr: SocketAddr::new(addr(33), 0),
                reuseaddr: false,
                afonly: false,
                tos: None,
            },
        ) {
            Response::Cm(CmResponse::Bound { id, .. }) => id,
            r => panic!("{r:?}"),
        };
        let ud = bind(&mut dev, port_space::UDP, QpType::Ud);
        let group = SocketAddr::new(IpAddr::V4(GROUP), 0);
        let join = |id, addr, send_only| CmRequest::JoinMcast {
            id,
            addr,
            send_only,
        };
        // Refusals: not a group, an IPv6 group, an RC id, another's id.
        let errno = |r: Response| match r {
            Response::Error { errno, .. } => errno,
            other => panic!("expected an error, got {other:?}"),
        };
        let unicast = SocketAddr::new(addr(33), 0);
        let v6 = SocketAddr::new("ff0e::1".parse().unwrap(), 0);
        assert_eq!(errno(cm(&mut dev, join(ud, unicast, false))), libc::EINVAL);
        assert_eq!(errno(cm(&mut dev, join(ud, v6, false))), libc::EOPNOTSUPP);
        let rc = bind(&mut dev, port_space::TCP, QpType::Rc);
        assert_eq!(errno(cm(&mut dev, join(rc, group, false))), libc::EINVAL);
        assert!(next_event(&app).is_none());
        assert_eq!(
            cm(&mut dev, join(ud, group, false)),
            Response::Cm(CmResponse::Ok)
        );
        let e = next_event(&app).expect("MULTICAST_JOIN");
        assert_eq!(
            (e.tag, e.id, e.event, e.status),
            (9, ud, event::MULTICAST_JOIN, 0)
        );
        assert_eq!(e.mcast, Some(group));
        assert_eq!((e.param.qp_num, e.param.qkey), (MCAST_QPN, RDMA_UDP_QKEY));
        let ah = e.param.ah.expect("the group's address vector");
        assert_eq!(ah.dgid, mgid());
        assert!(ah.is_global);
        assert_eq!((ah.hop_limit, ah.port_num, ah.sgid_index), (64, 1, 0));
        assert_eq!(dev.driver.groups().collect::<Vec<_>>(), [GROUP]);
        assert!(next_event(&app).is_none(), "one event per join");
        // A send-only join reports too, but needs nothing received.
        let other = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 9, 9, 9)), 0);
        assert_eq!(
            cm(&mut dev, join(ud, other, true)),
            Response::Cm(CmResponse::Ok)
        );
        assert_eq!(next_event(&app).map(|e| e.mcast), Some(Some(other)));
        assert_eq!(dev.driver.groups().count(), 1);
        // Leaving: the device leaves the group; leaving again is ENOENT.
        let leave = CmRequest::LeaveMcast {
            id: ud,
            addr: group,
        };
        assert_eq!(cm(&mut dev, leave.clone()), Response::Cm(CmResponse::Ok));
        assert_eq!(dev.driver.groups().count(), 0);
        assert_eq!(errno(cm(&mut dev, leave)), libc::ENOENT);
        // A destroyed id's joins are gone with it.
        assert_eq!(
            cm(&mut dev, join(ud, group, false)),
            Response::Cm(CmResponse::Ok)
        );
        assert_eq!(dev.driver.groups().count(), 1);
        assert_eq!(
            cm(&mut dev, CmRequest::Destroy { id: ud }),
            Response::Cm(CmResponse::Ok)
        );
        assert_eq!(dev.driver.groups().count(), 0);
    });
}
