//! Shared receive queues: create / modify / query / destroy. The SRQ's
//! ring is consumed by the data path like an RQ; its limit event is
//! raised there too.

use transport::engine::Endpoint;

use crate::mem::DeviceMemory;
use rxu_abi::proto::abi;
use rxu_abi::proto::Response;
use rxu_abi::ring::Ring;

use super::objects::Objects;
use super::reply::{refuse, Handled, Refused, Reply};
use super::session::Srq;

use transport::verbs::srq_attr_mask::{LIMIT as SRQ_LIMIT, MAX_WR as SRQ_MAX_WR};

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
    if !s.pds.contains(&pd) {
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
    let slots = max_wr.saturating_add(1).next_power_of_two();
    let (ring, fd) =
        Ring::create("rxu-srq", abi::recv_slot_size(max_sge), slots).map_err(|e| Refused {
            errno: libc::ENOMEM,
            msg: format!("SRQ ring: {e}"),
        })?;
    let srq_id = endpoint.create_srq(max_wr);
    let h = s.new_handle();
    s.srqs.insert(
        h,
        Srq {
            id: srq_id,
            pd,
            max_wr,
            max_sge,
            limit: srq_limit,
            taken_seen: 0,
            user_handle,
            ring: ring.into_consumer(),
            broken: false,
        },
    );
    Ok(Reply::with_fds(
        Response::Srq {
            srq: h,
            max_wr,
            max_sge,
            srq_limit,
        },
        vec![fd],
    ))
}

pub(super) fn modify(
    objects: &mut Objects,
    id: u32,
    h: u32,
    mask: u32,
    _max_wr: u32,
    limit: u32,
) -> Handled {
    let s = objects.session_mut(id)?;
    let Some(srq) = s.srqs.get_mut(&h) else {
        return refuse(libc::EINVAL, format!("no SRQ {h}"));
    };
    if mask & !(SRQ_MAX_WR | SRQ_LIMIT) != 0 {
        return refuse(libc::EINVAL, "unknown SRQ attribute mask bits");
    }
    if mask & SRQ_MAX_WR != 0 {
        // Like mlx5: no IBV_DEVICE_SRQ_RESIZE.
        return refuse(libc::EINVAL, "resizing an SRQ is not supported");
    }
    if mask & SRQ_LIMIT != 0 {
        if limit > srq.max_wr {
            return refuse(libc::EINVAL, "srq_limit above max_wr");
        }
        // Arms (or, with 0, disarms) the limit event.
        srq.limit = limit;
    }
    Ok(Reply::ok(Response::Ok))
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
    if let Some(srq) = s.srqs.remove(&h) {
        let _ = endpoint.destroy_srq(srq.id);
    }
    Ok(Reply::ok(Response::Ok))
}
