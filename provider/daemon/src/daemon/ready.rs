//! What the loop looks at: the work that may be ready, not every object.
//! A turn of the data path reads the *watched* rings (SQ / RQ / SRQ of
//! QPs and SRQs that had work lately) and delivers the *dirty* CQs (those
//! with completions not yet delivered, a backlog or an overrun), so its
//! cost follows what is busy, not how many QPs, CQs and SRQs the clients
//! hold (issue 19: 16k idle QPs of one user must not slow the others).
//!
//! A ring that stayed empty for [`PARK_AFTER`] is *parked*: its
//! consumer-sleeping flag stays raised (the same store / fence / load as
//! before a sleep, so a post that raced it is seen) and it leaves the
//! watched set. A post to it then rings its client's doorbell, and the
//! doorbell puts that session's parked rings that hold work back in the
//! set. So does everything else that can make a parked ring matter: a
//! control request naming the QP or SRQ, a packet for a QP whose receive
//! ring is parked (its receives are taken before the packet, as for a
//! watched one), a control request of the client (what it posted before
//! is taken first: the doorbell it rang is read there and then).
//! Rings that are not empty are never parked; XRC SRQs are never parked
//! (the SRQ a packet to an XRC target QP needs is named in the packet).

use std::collections::BTreeSet;
use std::time::Instant;

use rxu_abi::ring::Consumer;

pub use super::idle::{Idle, PARK_AFTER};
use super::session::{Qp, Session, Srq};

/// The sets the loop walks instead of every object.
#[derive(Default)]
pub struct Ready {
    /// CQ ids that may have something to deliver (set on every post to
    /// the CQ; kept while a backlog or an overrun remains).
    pub cqs: BTreeSet<u32>,
    /// QPs (session, QPN) with a watched SQ or RQ.
    pub qps: BTreeSet<(u32, u32)>,
    /// SRQs (session, handle) whose ring is watched.
    pub srqs: BTreeSet<(u32, u32)>,
    /// Sessions whose doorbell rang since their parked rings were last
    /// looked at.
    pub rang: BTreeSet<u32>,
    /// Receive rings (RQs and SRQs) parked now: while there are any,
    /// every received packet's QP is looked up before it is dispatched.
    pub parked_recv: usize,
}

/// Raises `ring`'s sleeping flag if it is empty (true: parked). A ring
/// that is not empty, or whose indices are corrupt, stays watched, flag
/// down. `unusable` (a QP or SRQ whose rings are no longer read until a
/// reset) parks without the flag: nothing is read from it anyway, and
/// the request that makes it usable again watches it.
pub fn park(ring: &Consumer, unusable: bool) -> bool {
    unusable || matches!(ring.prepare_sleep(), Ok(true))
}

/// Whether a parked ring holds entries now (it must be watched again).
pub fn has_work(ring: &Consumer) -> bool {
    matches!(ring.unread(), Ok(n) if n > 0)
}

impl Ready {
    /// Session `sid` is gone: none of its rings is watched any more (the
    /// loop would otherwise keep visiting its entries, and they would
    /// pile up with every client that exits holding QPs).
    pub fn forget_session(&mut self, sid: u32) {
        let of = |set: &BTreeSet<(u32, u32)>| -> Vec<(u32, u32)> {
            set.range((sid, 0)..=(sid, u32::MAX)).copied().collect()
        };
        for k in of(&self.qps) {
            self.qps.remove(&k);
        }
        for k in of(&self.srqs) {
            self.srqs.remove(&k);
        }
        self.rang.remove(&sid);
    }

    /// QP `qp` is gone: its parked receive ring no longer counts.
    pub fn unparked_qp(&mut self, qp: &Qp) {
        if qp.idle.rq {
            self.parked_recv = self.parked_recv.saturating_sub(1);
        }
    }

    /// SRQ `srq` is gone: its parked ring no longer counts.
    pub fn unparked_srq(&mut self, srq: &Srq) {
        if srq.idle.rq {
            self.parked_recv = self.parked_recv.saturating_sub(1);
        }
    }

    /// Watches QP `qp` of session `sid` again: its flags lowered, busy
    /// at `now`.
    pub fn wake_qp(&mut self, sid: u32, qp: &mut Qp, now: Instant) {
        if std::mem::take(&mut qp.idle.sq) {
            qp.sq.end_sleep();
        }
        if std::mem::take(&mut qp.idle.rq) {
            if let Some(rq) = &qp.rq {
                rq.end_sleep();
            }
            self.parked_recv = self.parked_recv.saturating_sub(1);
        }
        qp.idle.busy_at = now;
        self.qps.insert((sid, qp.qpn));
    }

    /// Watches SRQ `h` of session `sid` again.
    pub fn wake_srq(&mut self, sid: u32, h: u32, srq: &mut Srq, now: Instant) {
        if std::mem::take(&mut srq.idle.rq) {
            srq.ring.end_sleep();
            self.parked_recv = self.parked_recv.saturating_sub(1);
        }
        srq.idle.busy_at = now;
        self.srqs.insert((sid, h));
    }

    /// Parks the rings of `qp` that were idle since [`PARK_AFTER`];
    /// true when all of them are parked (it leaves the watched set).
    pub fn park_qp(&mut self, qp: &mut Qp, now: Instant) -> bool {
        if !qp.idle.due(now) {
            return false;
        }
        if !qp.idle.sq && park(&qp.sq, qp.broken) {
            qp.idle.sq = true;
        }
        if let Some(rq) = &qp.rq {
            if !qp.idle.rq && park(rq, qp.broken) {
                qp.idle.rq = true;
                self.parked_recv += 1;
            }
        }
        qp.idle.sq && (qp.rq.is_none() || qp.idle.rq)
    }

    /// Parks `srq`'s ring if it was idle since [`PARK_AFTER`] (never an
    /// XRC SRQ's); true when parked.
    pub fn park_srq(&mut self, srq: &mut Srq, now: Instant) -> bool {
        if srq.xrc.is_some() || !srq.idle.due(now) {
            return false;
        }
        if !srq.idle.rq && park(&srq.ring, srq.broken) {
            srq.idle.rq = true;
            self.parked_recv += 1;
        }
        srq.idle.rq
    }

    /// Session `sid`'s doorbell rang: its parked rings that hold work
    /// are watched again. (Costs the session's own object count, on its
    /// own doorbell only.)
    pub fn wake_session(&mut self, sid: u32, s: &mut Session, now: Instant) {
        for qp in s.qps.values_mut() {
            let sq = qp.idle.sq && has_work(&qp.sq);
            let rq = qp.idle.rq && qp.rq.as_ref().is_some_and(has_work);
            if sq || rq {
                self.wake_qp(sid, qp, now);
            }
        }
        for (&h, srq) in s.srqs.iter_mut() {
            if srq.idle.rq && has_work(&srq.ring) {
                self.wake_srq(sid, h, srq, now);
            }
        }
    }
}
