//! Memory window requests: alloc and dealloc. Binding and invalidation
//! are work requests (the send queue's local operations), not requests
//! here.

use transport::engine::Endpoint;
use transport::qp::MwType;

use crate::mem::DeviceMemory;
use rxu_abi::proto::Response;

use super::objects::Objects;
use super::reply::{refuse, Handled, Refused, Reply};
use super::session::Mw;

/// `ibv_alloc_mw`: EINVAL for a type other than 1 and 2 (as the kernel's
/// uverbs for an unknown type) or a PD not the caller's; ENOMEM at the
/// device limit.
pub(super) fn alloc(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    id: u32,
    pd: u32,
    mw_type: u32,
) -> Handled {
    let s = objects.session_mut(id)?;
    if !s.may_use_pd(pd) {
        return refuse(libc::EINVAL, format!("no PD {pd}"));
    }
    let Some(ty) = MwType::from_ibv(mw_type) else {
        return refuse(libc::EINVAL, format!("no memory window type {mw_type}"));
    };
    let rkey = endpoint
        .memory_mut()
        .alloc_mw(id, pd, ty)
        .map_err(|e| Refused {
            errno: e.errno(),
            msg: format!("alloc_mw: {e}"),
        })?;
    let mw = s.new_handle();
    s.mws.insert(mw, Mw { pd, rkey });
    Ok(Reply::ok(Response::Mw { mw, rkey }))
}

/// `ibv_dealloc_mw`: a bound window lets go of its region; remote access
/// through it fails from then on.
pub(super) fn dealloc(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    id: u32,
    mw: u32,
) -> Handled {
    let Some(m) = objects.session_mut(id)?.mws.remove(&mw) else {
        return refuse(libc::ENOENT, format!("no MW {mw}"));
    };
    endpoint
        .memory_mut()
        .dealloc_mw(id, m.rkey)
        .map_err(|e| Refused {
            errno: e.errno(),
            msg: format!("dealloc_mw: {e}"),
        })?;
    Ok(Reply::ok(Response::Ok))
}
