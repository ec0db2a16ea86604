//! Shared contexts: `ibv_import_device`, `ibv_import_pd`, `ibv_import_mr`.
//!
//! On a kernel, a context is its `cmd_fd`'s open file: whoever holds that
//! file (a `dup`, or a copy passed over SCM_RIGHTS) can open a second
//! context on it and name the first one's PDs and MRs by handle, and those
//! objects live until the last context of the file goes. Here each
//! context tells the daemon its `cmd_fd` (BindCmdFd); an ImportContext
//! presenting the same open file (kcmp) puts the new session in the
//! first one's group. Sessions of a group may use each other's PDs once
//! imported and query each other's MRs (MR handles and PD numbers are
//! unique in the device, so a handle names one object); a session that
//! leaves hands its PDs and MRs to one that stays ([`hand_over`]), whose
//! QPs may use them. Everything else (CQs, QPs, SRQs) stays per session.
//!
//! Errnos as the kernel's: an unknown PD or MR handle is ENOENT (the
//! object lookup of `ib_uverbs_ioctl`), an fd that is no context's here
//! ENOENT too (the provider tries the next device and reports ENODEV, as
//! libibverbs does for an fd of no device).

use std::os::fd::{AsFd, OwnedFd};

use crate::mem::DeviceMemory;
use rxu_abi::proto::Response;

use super::log::{debug, info};
use super::objects::Objects;
use super::quota::Kind;
use super::reply::{refuse, Handled, Reply};
use super::{fdcheck, sys};

/// The one fd a request carries.
fn one_fd(fds: Vec<OwnedFd>, what: &str) -> Result<OwnedFd, super::reply::Refused> {
    let [fd]: [OwnedFd; 1] = fds.try_into().or_else(|v: Vec<OwnedFd>| {
        refuse(
            libc::EINVAL,
            format!("{what} carries one fd (the cmd_fd), not {}", v.len()),
        )
    })?;
    fdcheck::opened_file(fd.as_fd(), &format!("the cmd_fd of {what}"))?;
    Ok(fd)
}

/// BindCmdFd: remember the context's cmd_fd.
pub fn bind_cmd_fd(objects: &mut Objects, id: u32, fds: Vec<OwnedFd>) -> Handled {
    let fd = one_fd(fds, "BindCmdFd")?;
    objects.session_mut(id)?.cmd_file = Some(fd);
    Ok(Reply::ok(Response::Ok))
}

/// ImportContext: join the group of the session whose cmd_fd is the same
/// open file.
pub fn import_context(objects: &mut Objects, id: u32, fds: Vec<OwnedFd>) -> Handled {
    let fd = one_fd(fds, "ImportContext")?;
    let mut found = None;
    for s in objects.sessions().filter(|s| s.id != id) {
        let Some(f) = &s.cmd_file else { continue };
        match sys::same_open_file(f.as_fd(), fd.as_fd()) {
            Ok(true) => {
                found = Some(s.group);
                break;
            }
            Ok(false) => {}
            Err(e) => {
                return refuse(
                    libc::EOPNOTSUPP,
                    format!("kcmp, needed to recognise a cmd_fd, failed: {e}"),
                )
            }
        }
    }
    let Some(group) = found else {
        return refuse(libc::ENOENT, "no context of this device on that fd");
    };
    let s = objects.session_mut(id)?;
    s.group = group;
    s.cmd_file = Some(fd);
    debug!("client {id}: imported the context of client {group}");
    Ok(Reply::ok(Response::Ok))
}

/// ImportPd: PD `pd` of the group becomes usable by session `id`.
pub fn import_pd(objects: &mut Objects, id: u32, pd: u32) -> Handled {
    let group = objects.session_mut(id)?.group;
    if objects.pd_owner(group, pd).is_none() {
        return refuse(libc::ENOENT, format!("no PD {pd} in this context"));
    }
    let s = objects.session_mut(id)?;
    if !s.pds.contains(&pd) {
        s.shared_pds.insert(pd);
    }
    Ok(Reply::ok(Response::Ok))
}

/// ImportMr: the keys and length of MR `mr` of the group.
pub fn import_mr(objects: &mut Objects, id: u32, mr: u32) -> Handled {
    let group = objects.session_mut(id)?.group;
    let Some(owner) = objects.mr_owner(group, mr) else {
        return refuse(libc::ENOENT, format!("no MR {mr} in this context"));
    };
    let m = objects
        .session(owner)
        .and_then(|s| s.mrs.get(&mr))
        .ok_or_else(|| super::reply::Refused {
            errno: libc::ENOENT,
            msg: format!("no MR {mr}"),
        })?;
    Ok(Reply::ok(Response::ImportedMr {
        pd: m.pd,
        lkey: m.lkey,
        rkey: m.rkey,
        len: m.len,
    }))
}

/// Session `id` is leaving: if others of its group stay, the first of
/// them takes over its PDs and — while the leaving client's process is
/// alive, whose memory they keep reaching — its MRs (a kernel keeps an
/// exited process's pages pinned; rxu cannot, and an access by key then
/// fails as for any unknown key, instead of reaching nothing silently);
/// the group is renamed after the heir if it was named after `id`.
pub fn hand_over(objects: &mut Objects, memory: &mut DeviceMemory, id: u32) {
    let Some(s) = objects.session(id) else { return };
    let group = s.group;
    let Some(heir) = objects
        .sessions()
        .find(|o| o.id != id && o.group == group)
        .map(|o| o.id)
    else {
        return;
    };
    let keep_mrs = !memory.client_gone(id);
    let Some(s) = objects.get_mut(id) else { return };
    let pds = std::mem::take(&mut s.pds);
    let mrs = if keep_mrs {
        std::mem::take(&mut s.mrs)
    } else {
        Default::default()
    };
    let (np, nm) = (pds.len(), mrs.len());
    // The heir's quota holds them from now on (the leaver's goes back
    // with its session).
    let bytes = mrs.values().fold(0u64, |a, m| a.saturating_add(m.len));
    objects.quota.add(heir, Kind::Pds, np as u64);
    objects.quota.add(heir, Kind::Mrs, nm as u64);
    objects.quota.add(heir, Kind::MrBytes, bytes);
    if let Some(h) = objects.get_mut(heir) {
        for pd in &pds {
            h.shared_pds.remove(pd);
        }
        h.pds.extend(pds);
        h.mrs.extend(mrs);
    }
    if keep_mrs {
        memory.reassign(id, heir);
    }
    if group == id {
        for o in objects.sessions_mut() {
            if o.group == id {
                o.group = heir;
            }
        }
    }
    if np + nm > 0 {
        info!("client {id} left a shared context: client {heir} keeps its {np} PDs and {nm} MRs");
    }
}
