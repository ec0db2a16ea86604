//! Completion queue requests (create / resize / destroy) and the
//! per-turn delivery pass over every CQ. A CQ's one queue (ring + backlog)
//! and how completions join it are in `completion.rs`.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};

use rxu_abi::proto::abi::{CQE_SIZE, CQE_STAMPED_SIZE};
use rxu_abi::proto::Response;
use rxu_abi::ring::Ring;

use super::completion::{cq_geometry, deliver_cq};
use super::device::Device;
use super::fdcheck;
use super::objects::{DeviceCqs, Objects};
use super::reply::{refuse, Handled, Refused, Reply};
use super::session::{event, Cq};

/// What a `CreateCq` request asks for.
pub(super) struct NewCq {
    pub cqe: u32,
    pub comp_vector: u32,
    pub user_handle: u64,
    pub channel: bool,
    pub timestamps: bool,
}

/// Ring slot size of a CQ: entries of a CQ with timestamps carry them.
fn slot_size(timestamps: bool) -> u32 {
    if timestamps {
        CQE_STAMPED_SIZE as u32
    } else {
        CQE_SIZE as u32
    }
}

pub(super) fn create(objects: &mut Objects, id: u32, new: NewCq, fds: Vec<OwnedFd>) -> Handled {
    let NewCq {
        cqe,
        comp_vector,
        user_handle,
        channel,
        timestamps,
    } = new;
    let a = objects.attr();
    let (max_cqe, max_cq) = (a.max_cqe, a.max_cq as usize);
    if cqe == 0 || cqe > max_cqe {
        return refuse(libc::EINVAL, format!("cqe {cqe} not in 1..={max_cqe}"));
    }
    if comp_vector != 0 {
        return refuse(libc::EINVAL, "the device has one completion vector");
    }
    let channel = match (channel, fds.len()) {
        (false, 0) => None,
        (true, 1) => {
            let fd = fds.into_iter().next();
            match fd {
                Some(fd) => {
                    let peer = objects.session_mut(id)?.pid;
                    fdcheck::event_socket(fd.as_fd(), peer, "the completion channel")?;
                    Some(fd)
                }
                None => return refuse(libc::EINVAL, "a channel CQ carries exactly one fd"),
            }
        }
        _ => return refuse(libc::EINVAL, "a channel CQ carries exactly one fd"),
    };
    if objects.count(|s| s.cqs.len()) >= max_cq {
        return refuse(libc::ENOMEM, "device CQ limit reached");
    }
    let (slots, granted) = cq_geometry(cqe);
    let (ring, fd) = Ring::create("rxu-cq", slot_size(timestamps), slots).map_err(|e| Refused {
        errno: libc::ENOMEM,
        msg: format!("CQ ring: {e}"),
    })?;
    let cq_id = objects.alloc_cq_id();
    let h = objects.add_cq(
        id,
        Cq {
            id: cq_id,
            cqe: granted,
            user_handle,
            ring: ring.into_producer(),
            backlog: VecDeque::new(),
            channel,
            overrun: false,
            lost: false,
            posted: 0,
            wake: false,
            timestamps,
        },
    )?;
    Ok(Reply::with_fds(
        Response::Cq {
            cq: h,
            cqe: granted,
        },
        vec![fd],
    ))
}

pub(super) fn resize(objects: &mut Objects, id: u32, h: u32, cqe: u32) -> Handled {
    let max = objects.attr().max_cqe;
    let s = objects.session_mut(id)?;
    let Some(cq) = s.cqs.get_mut(&h) else {
        return refuse(libc::EINVAL, format!("no CQ {h}"));
    };
    if cqe == 0 || cqe > max {
        return refuse(libc::EINVAL, format!("cqe {cqe} not in 1..={max}"));
    }
    let too_many = |unread: usize| {
        refuse(
            libc::EINVAL,
            format!("{unread} completions unread, more than {cqe}"),
        )
    };
    // An early answer only: the client's index may move before the copy.
    let unread = cq.ring.len().unwrap_or(0) as usize + cq.backlog.len();
    if (cqe as usize) < unread {
        return too_many(unread);
    }
    let (slots, granted) = cq_geometry(cqe);
    let (ring, fd) =
        Ring::create("rxu-cq", slot_size(cq.timestamps), slots).map_err(|e| Refused {
            errno: libc::ENOMEM,
            msg: format!("CQ ring: {e}"),
        })?;
    let mut new = ring.into_producer();
    // Unread entries move over, oldest first; the client switches to
    // the new ring after this reply, holding its CQ lock meanwhile. One
    // look at the client's index decides both what is copied and whether
    // it fits: an entry that does not is a refusal with the old ring
    // untouched, never a loss.
    let mut buf = [0u8; CQE_STAMPED_SIZE];
    let buf = &mut buf[..slot_size(cq.timestamps) as usize];
    let mut refused = 0usize;
    let copied = cq
        .ring
        .read_unconsumed(buf, |b| {
            if !matches!(new.try_push(b), Ok(true)) {
                refused += 1;
            }
        })
        .map_err(|e| Refused {
            errno: libc::EINVAL,
            msg: format!("the CQ ring's consumer index is not usable: {e}"),
        })?;
    let unread = copied as usize + cq.backlog.len();
    if refused > 0 || (cqe as usize) < unread {
        return too_many(unread);
    }
    cq.ring = new;
    cq.cqe = granted;
    cq.overrun = false;
    while let Some(e) = cq.backlog.front() {
        if !matches!(cq.ring.try_push(e), Ok(true)) {
            break;
        }
        cq.backlog.pop_front();
    }
    let cq_id = cq.id;
    objects.ready.cqs.insert(cq_id);
    Ok(Reply::with_fds(
        Response::Cq {
            cq: h,
            cqe: granted,
        },
        vec![fd],
    ))
}

pub(super) fn destroy(objects: &mut Objects, id: u32, h: u32) -> Handled {
    let s = objects.session_mut(id)?;
    if !s.cqs.contains_key(&h) {
        return refuse(libc::ENOENT, format!("no CQ {h}"));
    }
    if s.cq_in_use(h) {
        return refuse(libc::EBUSY, format!("CQ {h} still has QPs"));
    }
    objects.remove_cq(id, h);
    Ok(Reply::ok(Response::Ok))
}

impl Device {
    /// One delivery pass over the dirty CQs (those posted to since the
    /// last pass, or with a backlog or an overrun): returns how many
    /// entries moved. A CQ stays dirty while a backlog or an overrun
    /// remains. An overrun CQ's owner hears IBV_EVENT_CQ_ERR and the QPs
    /// that complete on it go to the error state (their flushes are lost
    /// with the rest: the CQ is full), as rxe's responder does on a full
    /// CQ.
    pub(super) fn deliver_cqs(&mut self) -> usize {
        let mut moved = 0;
        let mut to_err = Vec::new();
        for cq_id in std::mem::take(&mut self.objects.ready.cqs) {
            let Some((sid, h)) = self.objects.cq_owner(cq_id) else {
                continue;
            };
            let Some(s) = self.objects.get_mut(sid) else {
                continue;
            };
            let Some(cq) = s.cqs.get_mut(&h) else {
                continue;
            };
            let d = deliver_cq(cq, &mut self.counters);
            moved += d.moved;
            let keep = !cq.backlog.is_empty() || cq.overrun;
            if d.overrun {
                let uh = cq.user_handle;
                self.counters.async_events += 1;
                if !s.send_event(uh, event::CQ_ERR) {
                    self.counters.async_events_dropped += 1;
                }
                to_err.extend(
                    s.qps
                        .values()
                        .filter(|q| q.send_cq == h || q.recv_cq == h)
                        .map(|q| q.qpn),
                );
            }
            if keep {
                self.objects.ready.cqs.insert(cq_id);
            }
        }
        for qpn in to_err {
            let mut cqs = DeviceCqs::new(&mut self.objects, &mut self.counters);
            let _ = self.endpoint.modify_qp(qpn, &qp_to_error(), &mut cqs);
        }
        moved
    }
}

fn qp_to_error() -> transport::qp::QpAttr {
    transport::qp::QpAttr {
        state: Some(transport::qp::QpState::Err),
        ..Default::default()
    }
}
