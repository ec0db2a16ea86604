//! A CQ's one queue: its ring and the backlog behind it. The endpoint
//! posts each completion there in the call that produced it (a
//! [`transport::engine::CqSink`], as rxe's `rxe_cq_post()`); the daemon's
//! own error entries ([`push_own`]) join the same FIFO, so they are in order
//! by construction. A delivery pass per turn ([`deliver_cq`]) moves the
//! backlog on, notifies an armed channel once and detects overruns.
//! Requests that create, resize and destroy CQs are in `cq.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::AsFd;

use transport::engine::CqSink;
use transport::qp::{wc_flags, Completion};

use crate::verbs;
use rxu_abi::clock::completion_stamps;
use rxu_abi::proto::abi::{Cqe, CqeBytes, CQE_SIZE, CQE_STAMPED_SIZE};

use super::counters::DaemonCounters;
use super::session::Cq;
use super::sys;

/// Arm values the client stores in a CQ ring's consumer-flag word.
const ARM_NEXT: u32 = 1;
const ARM_SOLICITED: u32 = 2;

/// The CQ entry of a transport completion (pkey index, LID and path bits
/// are 0 on RoCE; SL is too, except that a UD receive reports the network
/// header it came in there, see [`transport::verbs::NetworkHdr`]).
pub fn cqe_of(c: &Completion) -> CqeBytes {
    let mut e = Cqe::new_unchecked([0u8; CQE_STAMPED_SIZE]);
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
    e.set_sl(c.network_hdr.map_or(0, |h| h.wc_sl()));
    e.set_src_gid(&c.src_addr.map_or([0; 16], verbs::gid_of));
    e.set_solicited(c.solicited);
    e.into_inner()
}

/// Slots for a CQ of `cqe` entries and the capacity reported back (the
/// ring holds `slots` entries; one is kept spare as mlx5 does). Any
/// `cqe` a client sends gives an answer, never an overflow: past 2^31
/// the slots stop at 2^31 (far over any device limit, which refuses it).
pub fn cq_geometry(cqe: u32) -> (u32, u32) {
    let slots = cqe
        .saturating_add(1)
        .checked_next_power_of_two()
        .unwrap_or(1 << 31);
    (slots, slots - 1)
}

/// The bytes of `e` the CQ's ring slots hold (with the timestamps or
/// without).
fn entry(cq: &Cq, e: &CqeBytes) -> usize {
    if cq.timestamps {
        e.len()
    } else {
        CQE_SIZE
    }
}

fn push(cq: &mut Cq, e: &CqeBytes) -> bool {
    // A ring the client corrupted counts as full: the entry waits.
    matches!(cq.ring.try_push(&e[..entry(cq, e)]), Ok(true))
}

/// Stamps an entry of a CQ created with timestamps as it is made (not
/// when it reaches the ring: a backlogged entry keeps its time).
fn stamp(cq: &Cq, e: &mut CqeBytes) {
    if cq.timestamps {
        let (ts, wall) = completion_stamps();
        Cqe::new_unchecked(&mut e[..]).set_completion_stamps(ts, wall);
    }
}

/// Whether a new entry wakes a CQ armed for solicited completions: a
/// receive of a message with the solicited-event bit, as rxe's, and any
/// error (the IBA has an unsuccessful completion raise the event too; a
/// spurious wake-up is harmless, a lost one hangs the application).
fn may_be_solicited(e: &CqeBytes) -> bool {
    let e = Cqe::new_unchecked(e);
    e.solicited() || e.status() != 0
}

/// Result of one delivery pass over a CQ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivered {
    pub moved: usize,
    /// Raise IBV_EVENT_CQ_ERR for this CQ.
    pub overrun: bool,
}

/// Largest backlog kept: the CQ's own depth, so a CQ holds at most twice
/// what it was granted (ring + backlog) and a client's CQ memory in the
/// daemon is bounded by its CQ depth quota. A completion that finds both
/// full is an overrun, as on a device whose CQ is full (rxe_cq_post:
/// -EBUSY and IB_EVENT_CQ_ERR): it is lost, the owner hears CQ_ERR and
/// the CQ's QPs go to the error state (`Device::deliver_cqs`).
fn backlog_cap(cq: &Cq) -> usize {
    cq.cqe as usize
}

/// A completion found the ring and the backlog full.
fn overflow(cq: &mut Cq, counters: &mut DaemonCounters) {
    counters.cqes_dropped += 1;
    cq.lost = true;
}

/// Appends a completion the endpoint produced: to the ring, or behind the
/// backlog (an overrun beyond its cap). The channel hears of it in the
/// next delivery pass.
pub(super) fn post_completion(cq: &mut Cq, c: &Completion, counters: &mut DaemonCounters) {
    let mut e = cqe_of(c);
    stamp(cq, &mut e);
    if cq.backlog.is_empty() && push(cq, &e) {
        cq.wake |= may_be_solicited(&e);
    } else if cq.backlog.len() < backlog_cap(cq) {
        cq.backlog.push_back(e);
    } else {
        return overflow(cq, counters);
    }
    cq.posted += 1;
    counters.cqes_delivered += 1;
}

/// One client's CQs as the endpoint's completion sink while its rings
/// are read (a QP completes only on its own client's CQs; the few
/// completions of that path, flushes and errors, find theirs by id).
/// A CQ posted to joins the dirty set the next delivery pass walks.
pub struct SessionCqs<'a> {
    /// The session's id: only its own CQs are posted to.
    pub sid: u32,
    pub cqs: &'a mut BTreeMap<u32, Cq>,
    /// CQ id -> (session, handle), device-wide.
    pub owner: &'a HashMap<u32, (u32, u32)>,
    pub dirty: &'a mut BTreeSet<u32>,
    pub counters: &'a mut DaemonCounters,
}

impl CqSink for SessionCqs<'_> {
    fn post(&mut self, cq: u32, c: Completion) {
        let Some(&(sid, h)) = self.owner.get(&cq) else {
            return;
        };
        if sid != self.sid {
            return;
        }
        if let Some(q) = self.cqs.get_mut(&h) {
            post_completion(q, &c, self.counters);
            self.dirty.insert(cq);
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
    // One CQ_ERR per overrun: until the client has drained the backlog,
    // further losses are the same overrun.
    if std::mem::take(&mut cq.lost) && !cq.overrun {
        cq.overrun = true;
        d.overrun = true;
        counters.cq_overruns += 1;
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
pub fn push_own(cq: &mut Cq, mut e: CqeBytes, counters: &mut DaemonCounters) {
    stamp(cq, &mut e);
    if cq.backlog.is_empty() && push(cq, &e) {
        counters.cqes_delivered += 1;
        notify(cq, true, counters);
    } else if cq.backlog.len() < backlog_cap(cq) {
        cq.backlog.push_back(e);
    } else {
        overflow(cq, counters);
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

#[cfg(test)]
mod tests {
    use super::*;
    use transport::qp::{CqSide, WcOpcode, WcStatus};
    use transport::verbs::NetworkHdr;

    /// Found by the control_sequence fuzz target: a CreateCq with cqe
    /// 0xFFFF_FFFF overflowed next_power_of_two (a panic in a debug
    /// build) in the quota's charge, which runs before the size check.
    #[test]
    fn any_cqe_has_a_geometry() {
        assert_eq!(cq_geometry(0), (1, 0));
        assert_eq!(cq_geometry(16), (32, 31));
        assert_eq!(cq_geometry(1 << 31), (1 << 31, (1 << 31) - 1));
        assert_eq!(cq_geometry(u32::MAX), (1 << 31, (1 << 31) - 1));
    }

    fn recv(hdr: Option<NetworkHdr>) -> Cqe<CqeBytes> {
        let mut c = Completion::new(CqSide::Recv, 7, WcStatus::Success, WcOpcode::Recv, 0x11);
        c.wc_flags = wc_flags::GRH;
        c.src_addr = Some("127.0.8.2".parse().unwrap());
        c.network_hdr = hdr;
        Cqe::new_unchecked(cqe_of(&c))
    }

    #[test]
    fn ud_receive_reports_its_network_header_in_sl() {
        assert_eq!(recv(Some(NetworkHdr::Ipv4)).sl(), 0xA);
        assert_eq!(recv(Some(NetworkHdr::Ipv6)).sl(), 0x9);
        // Any other completion: 0, as rxe's.
        assert_eq!(recv(None).sl(), 0);
        let e = recv(Some(NetworkHdr::Ipv4));
        assert_eq!((e.pkey_index(), e.slid(), e.dlid_path_bits()), (0, 0, 0));
        assert_eq!(e.src_gid()[10..], [0xff, 0xff, 127, 0, 8, 2]);
    }
}
