//! The XRC requests: open and close a domain, create a target QP. XRC
//! SRQs are made by `srq.rs`, initiator QPs by `qp.rs`; the domains'
//! bookkeeping is `xrcd.rs`.

use std::os::fd::{AsFd, OwnedFd};

use transport::engine::{Endpoint, QpSpec};
use transport::qp::{Mtu, QpTuning};

use crate::mem::DeviceMemory;
use rxu_abi::proto::{abi, QpAttr, QpCap, QpType, Response};
use rxu_abi::ring::Ring;

use super::counters::DaemonCounters;
use super::objects::{DeviceCqs, Objects};
use super::port::Port;
use super::ready::Idle;
use super::reply::{refuse, Handled, Refused, Reply};
use super::session::Qp;
use super::{fdcheck, sys};

/// `ibv_open_xrcd`: with a file, the domain it names (or a new one with
/// O_CREAT); without, a private one.
pub(super) fn open(objects: &mut Objects, id: u32, oflags: u32, fds: Vec<OwnedFd>) -> Handled {
    let known = (libc::O_CREAT | libc::O_EXCL) as u32;
    if oflags & !known != 0 {
        return refuse(libc::EINVAL, "oflags other than O_CREAT and O_EXCL");
    }
    let file = match fds.first() {
        None => None,
        Some(fd) => Some({
            fdcheck::opened_file(fd.as_fd(), "the XRC domain's file")?;
            sys::file_id(fd.as_fd()).map_err(|e| Refused {
                errno: libc::EBADF,
                msg: format!("the XRC domain's file: {e}"),
            })?
        }),
    };
    let create = oflags & libc::O_CREAT as u32 != 0;
    let excl = oflags & libc::O_EXCL as u32 != 0;
    match objects.xrcds.open(id, file, create, excl) {
        Ok(xrcd) => Ok(Reply::ok(Response::Xrcd { xrcd })),
        Err(e) => refuse(e.errno, e.msg),
    }
}

/// `ibv_close_xrcd`: EBUSY while this session's XRC SRQs or target QPs
/// are in it (and this is its last open of it).
pub(super) fn close(objects: &mut Objects, id: u32, xrcd: u32) -> Handled {
    let opens = objects.xrcds.opens_of(id, xrcd);
    if opens == 0 {
        return refuse(libc::ENOENT, format!("no XRC domain {xrcd}"));
    }
    if opens == 1 && objects.session_mut(id)?.xrcd_in_use(xrcd) {
        return refuse(
            libc::EBUSY,
            format!("XRC domain {xrcd} still has SRQs or QPs"),
        );
    }
    objects.xrcds.close(id, xrcd);
    Ok(Reply::ok(Response::Ok))
}

/// `ibv_create_qp_ex` with IBV_QPT_XRC_RECV: a target QP of `xrcd`. It
/// has no PD, CQ or queues; the reply carries an SQ ring of one slot so
/// the client treats it as any QP (nothing may be posted to it).
pub(super) fn create_tgt_qp(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    counters: &mut DaemonCounters,
    port: &Port,
    id: u32,
    (xrcd, user_handle): (u32, u64),
) -> Handled {
    if !objects.xrcds.is_open(id, xrcd) {
        return refuse(libc::EINVAL, format!("no XRC domain {xrcd}"));
    }
    if objects.count(|s| s.qps.len()) >= objects.attr().max_qp as usize {
        return refuse(libc::ENOMEM, "device QP limit reached");
    }
    let (sq_ring, sq_fd) = one_slot_ring()?;
    let qpn = endpoint
        .create_qp(QpSpec {
            qp_type: QpType::XrcRecv,
            pd: 0,
            send_cq: 0,
            recv_cq: 0,
            srq: None,
            xrcd: Some(xrcd),
            sq_sig_all: false,
            max_send_wr: 0,
            max_recv_wr: 0,
        })
        .map_err(|e| Refused {
            errno: libc::ENOMEM,
            msg: format!("create_qp: {e}"),
        })?;
    let tuning = QpTuning {
        port_mtu: port.mtu(),
        ..QpTuning::default()
    };
    let _ = endpoint.set_qp_tuning(qpn, tuning, &mut DeviceCqs::new(objects, counters));
    let attr = QpAttr {
        port_num: 1,
        path_mtu: Mtu::M256 as u8,
        ..QpAttr::default()
    };
    objects.add_qp(id, target(qpn, xrcd, user_handle, sq_ring, attr))?;
    Ok(target_reply(qpn, sq_fd))
}

/// `ibv_open_qp`: target QP `qpn` of `xrcd`, for this session too.
pub(super) fn open_tgt_qp(
    objects: &mut Objects,
    id: u32,
    (xrcd, qpn, user_handle): (u32, u32, u64),
) -> Handled {
    if !objects.xrcds.is_open(id, xrcd) {
        return refuse(libc::EINVAL, format!("no XRC domain {xrcd}"));
    }
    if objects.tgt_qp_xrcd(qpn) != Some(xrcd) {
        return refuse(
            libc::EINVAL,
            format!("no XRC target QP {qpn:#x} in domain {xrcd}"),
        );
    }
    if objects.session_mut(id)?.qps.contains_key(&qpn) {
        return refuse(libc::EINVAL, format!("QP {qpn:#x} is open here already"));
    }
    let attr = objects
        .owner_of_qp_mut(qpn)
        .and_then(|s| s.qps.get(&qpn))
        .map(|q| q.attr)
        .unwrap_or_default();
    let (sq_ring, sq_fd) = one_slot_ring()?;
    objects.share_qp(id, target(qpn, xrcd, user_handle, sq_ring, attr))?;
    Ok(target_reply(qpn, sq_fd))
}

/// The SQ ring of a target QP: one slot nothing is posted to.
fn one_slot_ring() -> Result<(Ring, OwnedFd), Refused> {
    Ring::create("rxu-sq", abi::send_slot_size(1, 0), 2).map_err(|e| Refused {
        errno: libc::ENOMEM,
        msg: format!("QP ring: {e}"),
    })
}

fn target(qpn: u32, xrcd: u32, user_handle: u64, sq: Ring, attr: QpAttr) -> Qp {
    Qp {
        qpn,
        qp_type: QpType::XrcRecv,
        // PD, CQ and SRQ handles are never 0: it has none.
        pd: 0,
        send_cq: 0,
        recv_cq: 0,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
        user_handle,
        sq: sq.into_consumer(),
        rq: None,
        attr,
        broken: false,
        xrcd: Some(xrcd),
        idle: Idle::new(),
    }
}

fn target_reply(qpn: u32, sq_fd: OwnedFd) -> Reply {
    Reply::with_fds(
        Response::Qp {
            qpn,
            cap: QpCap::default(),
            sq_slot: abi::send_slot_size(1, 0),
            rq_slot: 0,
        },
        vec![sq_fd],
    )
}
