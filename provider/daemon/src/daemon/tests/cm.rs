//! The rdma_cm service inside the device: an address that goes away gives
//! its ids ADDR_CHANGE, a device that goes away gives every id
//! DEVICE_REMOVAL (what `rxu down --force` does to rdma_cm users).

use std::os::fd::{AsFd, OwnedFd};

use rxu_abi::proto::cm::{event, port_space, CmEventRecord, CmRequest, CmResponse};
use rxu_abi::proto::fdpass::recv_msg;
use rxu_abi::proto::{self, QpType, Request, Response, PROTO_VERSION};
use rxu_testkit::seqpacket_pair;

use super::harness::*;
use crate::daemon::port::PortView;

fn next_event(sock: &OwnedFd) -> Option<CmEventRecord> {
    let mut buf = vec![0u8; proto::MAX_MSG];
    match recv_msg(sock.as_fd(), &mut buf, libc::MSG_DONTWAIT) {
        Ok((n, _)) if n > 0 => Some(proto::decode(&buf[..n]).unwrap()),
        _ => None,
    }
}

#[test]
fn address_change_and_device_removal_reach_the_ids() {
    let mut dev = device(42);
    let s = dev.connect(std::process::id());
    let r = dev.handle(
        s,
        Request::CmHello {
            version: PROTO_VERSION,
            pid: std::process::id(),
        },
        Vec::new(),
    );
    assert!(matches!(r.resp, Response::Hello { .. }), "{:?}", r.resp);
    let (events, theirs) = seqpacket_pair();
    let r = dev.handle(
        s,
        Request::Cm(CmRequest::AttachChannel { channel: 1, tag: 9 }),
        vec![theirs],
    );
    assert_eq!(r.resp, Response::Cm(CmResponse::Ok));
    let bind = |dev: &mut crate::daemon::device::Device, port: u16| {
        let r = call(
            dev,
            s,
            Request::Cm(CmRequest::Bind {
                channel: 1,
                ps: port_space::TCP,
                qp_type: QpType::Rc,
                addr: (addr(42), port).into(),
                reuseaddr: false,
                afonly: false,
                tos: None,
            }),
        );
        match r.resp {
            Response::Cm(CmResponse::Bound { id, .. }) => id,
            other => panic!("{other:?}"),
        }
    };
    let id = bind(&mut dev, 7300);
    let listener = bind(&mut dev, 7301);
    let r = call(
        &mut dev,
        s,
        Request::Cm(CmRequest::Listen {
            id: listener,
            backlog: 1,
        }),
    );
    assert_eq!(r.resp, Response::Cm(CmResponse::Ok));
    assert!(next_event(&events).is_none());

    // The served address leaves the netdev: both ids hear it.
    let gone = PortView {
        up: true,
        addrs: Vec::new(),
        mtu: Some(65536),
    };
    assert!(dev.apply_port(gone, true));
    let mut got: Vec<(u32, u32, u32)> = std::iter::from_fn(|| next_event(&events))
        .map(|e| (e.tag, e.id, e.event))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (9, id, event::ADDR_CHANGE),
            (9, listener, event::ADDR_CHANGE)
        ]
    );

    // The device goes away: every id hears DEVICE_REMOVAL.
    dev.fatal_to_all();
    let mut got: Vec<(u32, u32)> = std::iter::from_fn(|| next_event(&events))
        .map(|e| (e.id, e.event))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (id, event::DEVICE_REMOVAL),
            (listener, event::DEVICE_REMOVAL)
        ]
    );
}
