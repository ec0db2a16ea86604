//! Shared receive queues: create / modify / query / destroy. The SRQ's
//! ring is consumed by the data path like an RQ; its limit event is
//! raised there too.

use std::os::fd::OwnedFd;

use transport::engine::{Endpoint, XrcSrq};

use crate::mem::DeviceMemory;
use rxu_abi::proto::abi;
use rxu_abi::proto::Response;
use rxu_abi::ring::{Ring, RingError};

use super::objects::Objects;
use super::ready::Idle;
use super::reply::{refuse, Handled, Refused, Reply};
use super::session::{Srq, SrqXrc};

use transport::verbs::srq_attr_mask::{LIMIT as SRQ_LIMIT, MAX_WR as SRQ_MAX_WR};

/// Slots of an SRQ ring for `max_wr` receives (a power of two, one more
/// than max_wr at least).
fn srq_slots(max_wr: u32) -> u32 {
    max_wr.saturating_add(1).next_power_of_two()
}

/// The fields of a CreateSrq request.
#[derive(Clone, Copy, Debug)]
pub struct SrqRequest {
    pub pd: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
    pub user_handle: u64,
}

pub(super) fn create(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    id: u32,
    r: SrqRequest,
) -> Handled {
    create_in(objects, endpoint, id, r, None)
}

/// Creates a basic SRQ, or with `xrc` (domain, CQ handle) an XRC SRQ,
/// answered with `XrcSrq` and its number.
pub(super) fn create_in(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    id: u32,
    r: SrqRequest,
    xrc: Option<(u32, u32)>,
) -> Handled {
    if let Some((x, _)) = xrc {
        if !objects.xrcds.is_open(id, x) {
            return refuse(libc::EINVAL, format!("no XRC domain {x}"));
        }
    }
    let SrqRequest {
        pd,
        max_wr,
        max_sge,
        srq_limit,
        user_handle,
    } = r;
    let a = objects.attr();
    let (lim_wr, lim_sge, lim_srq) = (a.max_srq_wr, a.max_srq_sge, a.max_srq as usize);
    let n = objects.count(|s| s.srqs.len());
    let s = objects.session_mut(id)?;
    if !s.may_use_pd(pd) {
        return refuse(libc::EINVAL, format!("no PD {pd}"));
    }
    if max_wr == 0 || max_wr > lim_wr {
        return refuse(libc::EINVAL, format!("max_wr {max_wr} not in 1..={lim_wr}"));
    }
    if max_sge == 0 || max_sge > lim_sge {
        return refuse(
            libc::EINVAL,
            format!("max_sge {max_sge} not in 1..={lim_sge}"),
        );
    }
    // srq_limit is not judged at creation (ibv_create_srq(3): irrelevant
    // there); kept and armed as rxe does.
    if n >= lim_srq {
        return refuse(libc::ENOMEM, "device SRQ limit reached");
    }
    // An XRC SRQ's completions go to its CQ (the endpoint's CQ id).
    let xrc_cq = match xrc {
        None => None,
        Some((_, h)) => match s.cqs.get(&h) {
            Some(cq) => Some(cq.id),
            None => return refuse(libc::EINVAL, format!("no CQ {h}")),
        },
    };
    let (ring, fd) = Ring::create("rxu-srq", abi::recv_slot_size(max_sge), srq_slots(max_wr))
        .map_err(|e| Refused {
            errno: libc::ENOMEM,
            msg: format!("SRQ ring: {e}"),
        })?;
    let srq_id = match (xrc, xrc_cq) {
        (Some((xrcd, _)), Some(cq)) => endpoint.create_xrc_srq(max_wr, XrcSrq { xrcd, cq, pd }),
        _ => endpoint.create_srq(max_wr),
    };
    let h = s.new_handle();
    objects.add_srq(
        id,
        h,
        Srq {
            id: srq_id,
            pd,
            max_wr,
            max_sge,
            limit: srq_limit,
            taken_seen: 0,
            used: 0,
            released: 0,
            user_handle,
            ring: ring.into_consumer(),
            broken: false,
            xrc: xrc.map(|(xrcd, cq)| SrqXrc {
                xrcd,
                cq,
                srqn: srq_id,
            }),
            idle: Idle::new(),
        },
    )?;
    let resp = if xrc.is_some() {
        Response::XrcSrq {
            srq: h,
            srqn: srq_id,
            max_wr,
            max_sge,
            srq_limit,
        }
    } else {
        Response::Srq {
            srq: h,
            max_wr,
            max_sge,
            srq_limit,
        }
    };
    Ok(Reply::with_fds(resp, vec![fd]))
}

/// `ibv_modify_srq`, with the kernel rxe's checks in its order (all
/// against the SRQ as it is before this call). With MAX_WR the reply is
/// `Srq` carrying the new ring's fd, otherwise `Ok`.
pub(super) fn modify(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    id: u32,
    h: u32,
    (mask, max_wr, limit): (u32, u32, u32),
) -> Handled {
    let lim_wr = objects.attr().max_srq_wr;
    let s = objects.session_mut(id)?;
    let Some(srq) = s.srqs.get_mut(&h) else {
        return refuse(libc::EINVAL, format!("no SRQ {h}"));
    };
    if mask & !(SRQ_MAX_WR | SRQ_LIMIT) != 0 {
        return refuse(libc::EINVAL, "unknown SRQ attribute mask bits");
    }
    if srq.broken {
        return refuse(libc::EINVAL, "the SRQ is in the error state");
    }
    if mask & SRQ_MAX_WR != 0 {
        if max_wr == 0 || max_wr > lim_wr {
            return refuse(libc::EINVAL, format!("max_wr {max_wr} not in 1..={lim_wr}"));
        }
        if srq.limit != 0 && max_wr < srq.limit {
            return refuse(libc::EINVAL, "max_wr below the armed srq_limit");
        }
    }
    if mask & SRQ_LIMIT != 0 && limit > srq.max_wr {
        return refuse(libc::EINVAL, "srq_limit above max_wr");
    }
    let fd = if mask & SRQ_MAX_WR != 0 {
        Some(resize(endpoint, srq, max_wr)?)
    } else {
        None
    };
    if mask & SRQ_LIMIT != 0 {
        // Arms (or, with 0, disarms) the limit event.
        srq.limit = limit;
    }
    Ok(match fd {
        Some(fd) => Reply::with_fds(
            Response::Srq {
                srq: h,
                max_wr: srq.max_wr,
                max_sge: srq.max_sge,
                srq_limit: srq.limit,
            },
            vec![fd],
        ),
        None => Reply::ok(Response::Ok),
    })
}

/// Moves the SRQ to a ring for `max_wr` receives, as rxe's queue resize:
/// the receives posted and not yet taken by a message (the ring's unread
/// slots and the endpoint's queue) stay, in order; fewer than they need
/// is EINVAL. The client holds its SRQ lock until it has the new ring, so
/// nothing is posted to the old one meanwhile; the old ring's unread slots
/// are copied as they are (the data path checks them when it takes them).
/// The endpoint's receives keep a slot each in the new ring, read ahead
/// (blank: only their count matters), so the client's room stays max_wr
/// less what it has outstanding.
fn resize(
    endpoint: &mut Endpoint<DeviceMemory>,
    srq: &mut Srq,
    max_wr: u32,
) -> Result<OwnedFd, Refused> {
    let unread = srq.ring.unread().map_err(|e| {
        srq.broken = true;
        Refused {
            errno: libc::EINVAL,
            msg: format!("SRQ ring unusable: {e}"),
        }
    })?;
    let held = endpoint.srq_len(srq.id).unwrap_or(0);
    let in_use = held + unread as usize;
    if (max_wr as usize) < in_use {
        return refuse(
            libc::EINVAL,
            format!("{in_use} receives posted, more than {max_wr}"),
        );
    }
    let nomem = |e: RingError| Refused {
        errno: libc::ENOMEM,
        msg: format!("SRQ ring: {e}"),
    };
    let slot = srq.ring.slot_size();
    let (ring, fd) = Ring::create("rxu-srq", slot as u32, srq_slots(max_wr)).map_err(nomem)?;
    // Filled through a producer of our own before the client attaches
    // its producer (which starts at the index this one leaves).
    let mut fill = Ring::attach(&fd).map_err(nomem)?.into_producer();
    let mut buf = vec![0u8; slot];
    let mut lost = 0u32;
    for _ in 0..held {
        if !matches!(fill.try_push(&buf), Ok(true)) {
            lost += 1;
        }
    }
    let copied = srq
        .ring
        .read_unconsumed(&mut buf, |b| {
            if !matches!(fill.try_push(b), Ok(true)) {
                lost += 1;
            }
        })
        .map_err(|e| Refused {
            errno: libc::EINVAL,
            msg: format!("SRQ ring unusable: {e}"),
        })?;
    if lost != 0 || copied != unread {
        // The client moved its index while holding its lock: its own loss.
        return refuse(libc::EINVAL, "the SRQ ring changed during the resize");
    }
    let mut ring = ring.into_consumer();
    for _ in 0..held {
        match ring.peek() {
            Ok(Some(slot)) => slot.keep(),
            _ => return refuse(libc::ENOMEM, "SRQ ring: the new ring lost its entries"),
        }
    }
    endpoint.resize_srq(srq.id, max_wr).map_err(|e| Refused {
        errno: libc::EINVAL,
        msg: e.to_string(),
    })?;
    srq.ring = ring;
    // What was taken before is gone with the old ring.
    srq.released = endpoint.srq_taken(srq.id).unwrap_or(0).max(srq.released);
    srq.max_wr = max_wr;
    Ok(fd)
}

/// Replies with the SRQ's attributes (no fd: the ring is unchanged).
pub(super) fn query(objects: &mut Objects, id: u32, h: u32) -> Handled {
    let s = objects.session_mut(id)?;
    let Some(srq) = s.srqs.get(&h) else {
        return refuse(libc::EINVAL, format!("no SRQ {h}"));
    };
    Ok(Reply::ok(Response::Srq {
        srq: h,
        max_wr: srq.max_wr,
        max_sge: srq.max_sge,
        srq_limit: srq.limit,
    }))
}

pub(super) fn destroy(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    id: u32,
    h: u32,
) -> Handled {
    let s = objects.session_mut(id)?;
    if !s.srqs.contains_key(&h) {
        return refuse(libc::ENOENT, format!("no SRQ {h}"));
    }
    if s.srq_in_use(h) {
        return refuse(libc::EBUSY, format!("SRQ {h} still has QPs"));
    }
    if let Some(srq) = objects.remove_srq(id, h) {
        let _ = endpoint.destroy_srq(srq.id);
    }
    Ok(Reply::ok(Response::Ok))
}
