//! Completion queues: create / resize / destroy, and delivery of
//! completions into the CQ rings, with a per-CQ backlog while a ring is
//! full, overrun detection and completion-channel notification of armed
//! CQs.
//!
//! A CQ has one queue: its ring, and the backlog behind it. The endpoint
//! posts each completion there in the call that produced it
//! ([`DeviceCqs`], [`SessionCqs`]: rxe's `rxe_cq_post()`), and the
//! daemon's own error entries ([`push_own`]) join the same FIFO, so they
//! are in order by construction. A delivery pass per turn
//! ([`deliver_cq`]) moves the backlog on, notifies the channel once and
//! detects overruns.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsFd, OwnedFd};

use transport::engine::CqSink;
use transport::qp::{wc_flags, Completion};

use crate::verbs;
use rxu_abi::proto::abi::{Cqe, CqeBytes, CQE_SIZE};
use rxu_abi::proto::Response;
use rxu_abi::ring::Ring;

use super::counters::DaemonCounters;
use super::device::Device;
use super::objects::Objects;
use super::reply::{refuse, Handled, Refused, Reply};
use super::session::{event, Cq};
use super::sys;

/// Arm values the client stores in a CQ ring's consumer-flag word.
const ARM_NEXT: u32 = 1;
const ARM_SOLICITED: u32 = 2;

/// The CQ entry of a transport completion (pkey index, LID, SL and path
/// bits are 0 on RoCE).
pub fn cqe_of(c: &Completion) -> CqeBytes {
    let mut e = Cqe::new_unchecked([0u8; CQE_SIZE]);
    e.set_wr_id(c.wr_id);
    e.set_status(c.status as u32);
    e.set_opcode(c.opcode as u32);
    e.set_vendor_err(c.vendor_err);
    e.set_byte_len(c.byte_len);
    e.set_imm_data(if c.wc_flags & wc_flags::WITH_INV != 0 {
        c.invalidated_rkey
    } else {
        c.imm
    });
    e.set_qp_num(c.qp_num);
    e.set_src_qp(c.src_qp);
    e.set_wc_flags(c.wc_flags);
    e.set_src_gid(&c.src_addr.map_or([0; 16], verbs::gid_of));
    e.into_inner()
}

/// Slots for a CQ of `cqe` entries and the capacity reported back (the
/// ring holds `slots` entries; one is kept spare as mlx5 does).
pub fn cq_geometry(cqe: u32) -> (u32, u32) {
    let slots = cqe.saturating_add(1).next_power_of_two();
    (slots, slots - 1)
}

fn push(cq: &mut Cq, e: &CqeBytes) -> bool {
    // A ring the client corrupted counts as full: the entry waits.
    matches!(cq.ring.try_push(e), Ok(true))
}

/// Whether a new entry may wake a CQ armed for solicited completions.
/// The transport does not report the SE bit, so every receive completion
/// and every error counts: a spurious wake-up is harmless, a lost one
/// hangs the application.
fn may_be_solicited(e: &CqeBytes) -> bool {
    let e = Cqe::new_unchecked(e);
    e.opcode() >= 128 || e.status() != 0
}

/// Result of one delivery pass over a CQ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivered {
    pub moved: usize,
    /// Raise IBV_EVENT_CQ_ERR for this CQ.
    pub overrun: bool,
}

/// Largest backlog kept; beyond it completions are dropped (the client
/// neither polls nor sized its CQ for its traffic).
fn backlog_cap(cq: &Cq) -> usize {
    (cq.cqe as usize).saturating_mul(2).max(1024)
}

/// Appends a completion the endpoint produced: to the ring, or behind the
/// backlog (dropped beyond its cap). The channel hears of it in the next
/// delivery pass.
fn post_completion(cq: &mut Cq, c: &Completion, counters: &mut DaemonCounters) {
    let e = cqe_of(c);
    if cq.backlog.is_empty() && push(cq, &e) {
        cq.wake |= may_be_solicited(&e);
    } else if cq.backlog.len() < backlog_cap(cq) {
        cq.backlog.push_back(e);
    } else {
        counters.cqes_dropped += 1;
        return;
    }
    cq.posted += 1;
    counters.cqes_delivered += 1;
}

/// Every client's CQs as the endpoint's completion sink (the data path
/// and control requests). A completion for a CQ that is gone (with its
/// client) goes nowhere.
pub struct DeviceCqs<'a> {
    objects: &'a mut Objects,
    counters: &'a mut DaemonCounters,
}

impl<'a> DeviceCqs<'a> {
    pub fn new(objects: &'a mut Objects, counters: &'a mut DaemonCounters) -> DeviceCqs<'a> {
        DeviceCqs { objects, counters }
    }
}

impl CqSink for DeviceCqs<'_> {
    fn post(&mut self, cq: u32, c: Completion) {
        if let Some(cq) = self.objects.cq_mut(cq) {
            post_completion(cq, &c, self.counters);
        }
    }
}

/// One client's CQs as the endpoint's completion sink while its rings
/// are read (a QP completes only on its own client's CQs; the few
/// completions of that path, flushes and errors, find theirs by id).
pub struct SessionCqs<'a> {
    pub cqs: &'a mut BTreeMap<u32, Cq>,
    pub counters: &'a mut DaemonCounters,
}

impl CqSink for SessionCqs<'_> {
    fn post(&mut self, cq: u32, c: Completion) {
        if let Some(cq) = self.cqs.values_mut().find(|q| q.id == cq) {
            post_completion(cq, &c, self.counters);
        }
    }
}

/// One delivery pass over `cq`: moves the backlog into the ring, notifies
/// the channel if armed and anything arrived since the last pass, and
/// flags an overrun.
pub fn deliver_cq(cq: &mut Cq, counters: &mut DaemonCounters) -> Delivered {
    let mut d = Delivered {
        moved: std::mem::take(&mut cq.posted),
        overrun: false,
    };
    let mut wake = std::mem::take(&mut cq.wake);
    // Bounded by the backlog's length.
    while let Some(&e) = cq.backlog.front() {
        if !push(cq, &e) {
            break;
        }
        wake |= may_be_solicited(&e);
        cq.backlog.pop_front();
        d.moved += 1;
        counters.cqes_delivered += 1;
    }
    if cq.backlog.len() > cq.cqe as usize {
        if !cq.overrun {
            cq.overrun = true;
            d.overrun = true;
            counters.cq_overruns += 1;
        }
    } else if cq.backlog.is_empty() {
        cq.overrun = false;
    }
    if d.moved > 0 {
        notify(cq, wake, counters);
    }
    d
}

/// Appends one entry the daemon made itself (a bad WQE's error), after
/// whatever the backlog holds.
pub fn push_own(cq: &mut Cq, e: CqeBytes, counters: &mut DaemonCounters) {
    if cq.backlog.is_empty() && push(cq, &e) {
        counters.cqes_delivered += 1;
        notify(cq, true, counters);
    } else if cq.backlog.len() < backlog_cap(cq) {
        cq.backlog.push_back(e);
    } else {
        counters.cqes_dropped += 1;
    }
}

/// If the CQ is armed (and, for solicited-only arming, an entry may be
/// solicited), disarm it and write one record to its channel.
fn notify(cq: &mut Cq, maybe_solicited: bool, counters: &mut DaemonCounters) {
    let Some(ch) = &cq.channel else {
        return;
    };
    // Read after publishing: pairs with the client's fence after arming.
    let f = cq.ring.flag();
    let fire = f == ARM_NEXT || (f == ARM_SOLICITED && maybe_solicited);
    if fire && cq.ring.clear_flag(f) {
        sys::send_record(ch.as_fd(), &cq.user_handle.to_ne_bytes());
        counters.channel_events += 1;
    }
}

pub(super) fn create(
    objects: &mut Objects,
    id: u32,
    cqe: u32,
    comp_vector: u32,
    user_handle: u64,
    channel: bool,
    fds: Vec<OwnedFd>,
) -> Handled {
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
                Some(fd) if sys::is_socket(fd.as_fd()) => Some(fd),
                _ => return refuse(libc::EINVAL, "the completion channel fd is not a socket"),
            }
        }
        _ => return refuse(libc::EINVAL, "a channel CQ carries exactly one fd"),
    };
    if objects.count(|s| s.cqs.len()) >= max_cq {
        return refuse(libc::ENOMEM, "device CQ limit reached");
    }
    let (slots, granted) = cq_geometry(cqe);
    let (ring, fd) = Ring::create("rxu-cq", CQE_SIZE as u32, slots).map_err(|e| Refused {
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
            posted: 0,
            wake: false,
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
    let unread = cq.ring.len().unwrap_or(0) as usize + cq.backlog.len();
    if (cqe as usize) < unread {
        return refuse(
            libc::EINVAL,
            format!("{unread} completions unread, more than {cqe}"),
        );
    }
    let (slots, granted) = cq_geometry(cqe);
    let (ring, fd) = Ring::create("rxu-cq", CQE_SIZE as u32, slots).map_err(|e| Refused {
        errno: libc::ENOMEM,
        msg: format!("CQ ring: {e}"),
    })?;
    let mut new = ring.into_producer();
    // Unread entries move over, oldest first; the client switches to
    // the new ring after this reply, holding its CQ lock meanwhile.
    let mut buf = [0u8; CQE_SIZE];
    let mut lost = 0usize;
    let _ = cq.ring.read_unconsumed(&mut buf, |b| {
        if !matches!(new.try_push(b), Ok(true)) {
            lost += 1;
        }
    });
    debug_assert_eq!(lost, 0, "new ring holds every unread entry");
    cq.ring = new;
    cq.cqe = granted;
    cq.overrun = false;
    while let Some(e) = cq.backlog.front() {
        if !matches!(cq.ring.try_push(e), Ok(true)) {
            break;
        }
        cq.backlog.pop_front();
    }
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
    /// One delivery pass over every CQ: returns how many entries moved.
    pub(super) fn deliver_cqs(&mut self) -> usize {
        let mut moved = 0;
        for s in self.objects.sessions_mut() {
            let mut overruns = Vec::new();
            for cq in s.cqs.values_mut() {
                let d = deliver_cq(cq, &mut self.counters);
                moved += d.moved;
                if d.overrun {
                    overruns.push(cq.user_handle);
                }
            }
            for uh in overruns {
                self.counters.async_events += 1;
                if !s.send_event(uh, event::CQ_ERR) {
                    self.counters.async_events_dropped += 1;
                }
            }
        }
        moved
    }
}
