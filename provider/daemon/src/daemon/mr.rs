//! `ibv_rereg_mr`. The errnos are the kernel's for the same mistakes:
//! EINVAL for unknown flags, no flag, a PD or range that is not valid or
//! access flags ib_check_mr_access refuses; EFAULT for memory the client
//! has not mapped.

use transport::engine::Endpoint;
use transport::qp::access;

use crate::mem::DeviceMemory;
use rxu_abi::proto::Response;

use super::objects::Objects;
use super::reply::{refuse, Handled, Refused, Reply};

/// `enum ibv_rereg_mr_flags`.
pub mod rereg {
    pub const CHANGE_TRANSLATION: u32 = 1;
    pub const CHANGE_PD: u32 = 1 << 1;
    pub const CHANGE_ACCESS: u32 = 1 << 2;
    pub const ALL: u32 = CHANGE_TRANSLATION | CHANGE_PD | CHANGE_ACCESS;
}

/// The fields of a ReregMr request.
pub struct Rereg {
    pub mr: u32,
    pub flags: u32,
    pub pd: u32,
    pub addr: u64,
    pub len: u64,
    pub access: u32,
}

pub(super) fn reregister(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    id: u32,
    r: Rereg,
) -> Handled {
    let max_size = objects.attr().max_mr_size;
    // One of its own, or an imported one of its group (`share`), as a
    // kernel's shared context may; the new PD must be one it may use.
    let caller = objects.session_mut(id)?;
    let (group, may_use) = (caller.group, caller.may_use_pd(r.pd));
    let owner = objects.mr_owner(group, r.mr).unwrap_or(id);
    let s = objects.session_mut(owner)?;
    let Some(lkey) = s.mrs.get(&r.mr).map(|m| m.lkey) else {
        return refuse(libc::EINVAL, format!("no MR {}", r.mr));
    };
    if r.flags == 0 || r.flags & !rereg::ALL != 0 {
        return refuse(libc::EINVAL, format!("rereg flags {:#x}", r.flags));
    }
    let pd = (r.flags & rereg::CHANGE_PD != 0).then_some(r.pd);
    if pd.is_some() && !may_use {
        return refuse(libc::EINVAL, format!("no PD {}", r.pd));
    }
    let range = (r.flags & rereg::CHANGE_TRANSLATION != 0).then_some((r.addr, r.len));
    if range.is_some_and(|(_, len)| max_size != 0 && len > max_size) {
        return refuse(libc::EINVAL, "region larger than max_mr_size");
    }
    let acc = (r.flags & rereg::CHANGE_ACCESS != 0).then_some(r.access);
    if acc.is_some_and(|a| {
        a & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0 && a & access::LOCAL_WRITE == 0
    }) {
        return refuse(
            libc::EINVAL,
            "remote write/atomic access without local write",
        );
    }
    endpoint
        .memory_mut()
        .reregister(owner, lkey, pd, range, acc)
        .map_err(|e| Refused {
            errno: e.errno(),
            msg: format!("rereg_mr: {e}"),
        })?;
    let Some(m) = s.mrs.get_mut(&r.mr) else {
        return refuse(libc::EINVAL, format!("no MR {}", r.mr));
    };
    if let Some(p) = pd {
        m.pd = p;
    }
    if let Some((_, len)) = range {
        m.len = len;
    }
    Ok(Reply::ok(Response::Mr {
        mr: r.mr,
        lkey: m.lkey,
        rkey: m.rkey,
    }))
}
