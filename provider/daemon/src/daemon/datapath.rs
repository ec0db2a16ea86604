//! The fast path between the rings and the transport: one turn of the
//! data path ([`Device::pump`]), taking posted WQEs from SQ / RQ / SRQ
//! rings (checked slot by slot), delivery passes over the CQ rings, async
//! events, and the rings' sleep protocol.
//!
//! Back-pressure instead of loss: a WQE stays in its ring while the
//! endpoint's queue for it is full or the CQ its completion would go to
//! has a backlog; the client then finds its ring full and gets ENOMEM
//! from post, as with a full hardware queue.

use std::collections::BTreeMap;
use std::time::Instant;

use transport::engine::{mcast, Endpoint, EngineError, RecvMeta, MCAST_QPN};
use transport::qp::{Memory, QpError, QpEvent, QpState, WcOpcode, WcStatus};

use crate::mem::DeviceMemory;
use rxu_abi::proto::abi::{Cqe, CqeBytes, CQE_STAMPED_SIZE};
use rxu_abi::ring::{Consumer, RingError};

use super::completion::{push_own, SessionCqs};
use super::counters::DaemonCounters;
use super::device::Device;
use super::log::{debug, warning};
use super::objects::{DeviceCqs, Objects, Parts};
use super::session::{event, Cq, Qp, Session, Srq};
use super::wqe::{self, BadWqe, SqLimits};

/// WQEs taken from one ring per pass (fairness between queues).
const BUDGET: usize = 64;
/// Send batches [`Device::take_posted`] makes at most (a batch is up to 8
/// GSO datagrams): enough for a full pass over one session's SQs.
const FLUSH_ROUNDS: usize = 16;

/// A WQE that will not run: its error completion and what follows.
struct Bad {
    qpn: u32,
    cq: u32,
    cqe: CqeBytes,
    /// Move the QP to ERR (a malformed WQE is fatal to its QP, as on an
    /// HCA); false for a post to a QP in RESET, which only fails itself.
    fatal: bool,
}

fn error_cqe(qpn: u32, b: &BadWqe) -> CqeBytes {
    let mut e = Cqe::new_unchecked([0u8; CQE_STAMPED_SIZE]);
    e.set_wr_id(b.wr_id);
    e.set_status(WcStatus::LocQpOpErr as u32);
    e.set_opcode(b.opcode as u32);
    e.set_qp_num(qpn);
    e.into_inner()
}

fn cq_clear(cqs: &BTreeMap<u32, Cq>, h: u32) -> bool {
    cqs.get(&h).is_some_and(|c| c.backlog.is_empty())
}

/// The SQ may not be read now (its WQE could not be accepted).
fn sq_blocked(e: &Endpoint<DeviceMemory>, qp: &Qp, cqs: &BTreeMap<u32, Cq>) -> bool {
    qp.broken
        || !cq_clear(cqs, qp.send_cq)
        || e.qp(qp.qpn).is_none_or(|q| {
            q.state() != QpState::Err && q.send_queue_len() >= qp.cap.max_send_wr as usize
        })
}

fn rq_blocked(e: &Endpoint<DeviceMemory>, qp: &Qp, cqs: &BTreeMap<u32, Cq>) -> bool {
    qp.broken
        || !cq_clear(cqs, qp.recv_cq)
        || e.qp(qp.qpn).is_none_or(|q| {
            q.state() != QpState::Err && q.recv_queue_len() >= qp.cap.max_recv_wr as usize
        })
}

fn srq_blocked(e: &Endpoint<DeviceMemory>, srq: &Srq) -> bool {
    srq.broken || e.srq_len(srq.id).is_none_or(|n| n >= srq.max_wr as usize)
}

/// Copies the next slot into `buf` and consumes it; None when empty.
fn take(ring: &mut Consumer, buf: &mut [u8]) -> Result<Option<usize>, RingError> {
    let Some(slot) = ring.peek()? else {
        return Ok(None);
    };
    let len = slot.len().min(buf.len());
    slot.read(0, &mut buf[..len])?;
    slot.release();
    Ok(Some(len))
}

fn consume_sq(
    e: &mut Endpoint<DeviceMemory>,
    qp: &mut Qp,
    cqs: &mut SessionCqs<'_>,
    (ipv6, dual): (bool, bool),
    buf: &mut [u8],
    bad: &mut Vec<Bad>,
) -> Result<usize, RingError> {
    let lim = SqLimits {
        qp_type: qp.qp_type,
        max_sge: qp.cap.max_send_sge,
        max_inline: qp.cap.max_inline_data,
        qkey: qp.attr.qkey,
        ipv6,
        dual,
    };
    let mut n = 0;
    while n < BUDGET && !sq_blocked(e, qp, cqs.cqs) {
        let Some(len) = take(&mut qp.sq, buf)? else {
            break;
        };
        n += 1;
        let w = match wqe::send_wqe(&buf[..len], &lim) {
            Ok(w) => w,
            Err(b) => {
                debug!("QP {:#x}: bad send WQE {:#x}: {}", qp.qpn, b.wr_id, b.why);
                bad.push(Bad {
                    qpn: qp.qpn,
                    cq: qp.send_cq,
                    cqe: error_cqe(qp.qpn, &b),
                    fatal: true,
                });
                // The rest waits until the QP is in ERR (then they flush).
                break;
            }
        };
        let b = BadWqe {
            wr_id: w.wr_id,
            opcode: w.op.wr_opcode().wc_opcode(),
            why: "",
        };
        match e.post_send(qp.qpn, w, cqs) {
            Ok(()) => {}
            Err(err) => {
                let in_reset =
                    matches!(err, EngineError::Qp(QpError::InvalidState(QpState::Reset)));
                debug!("QP {:#x}: send WQE {:#x} refused: {err}", qp.qpn, b.wr_id);
                bad.push(Bad {
                    qpn: qp.qpn,
                    cq: qp.send_cq,
                    cqe: error_cqe(qp.qpn, &b),
                    fatal: !in_reset,
                });
                if !in_reset {
                    break;
                }
            }
        }
    }
    Ok(n)
}

fn consume_rq(
    e: &mut Endpoint<DeviceMemory>,
    qp: &mut Qp,
    cqs: &mut SessionCqs<'_>,
    buf: &mut [u8],
    bad: &mut Vec<Bad>,
) -> Result<usize, RingError> {
    let mut n = 0;
    while n < BUDGET && !rq_blocked(e, qp, cqs.cqs) {
        let Some(rq) = qp.rq.as_mut() else {
            break;
        };
        let Some(len) = take(rq, buf)? else {
            break;
        };
        n += 1;
        let (in_reset, wr_id) = match wqe::recv_wqe(&buf[..len], qp.cap.max_recv_sge) {
            Ok(w) => {
                let wr_id = w.wr_id;
                match e.post_recv(qp.qpn, w, cqs) {
                    Ok(()) => continue,
                    Err(err) => (
                        matches!(err, EngineError::Qp(QpError::InvalidState(QpState::Reset))),
                        wr_id,
                    ),
                }
            }
            Err(b) => {
                debug!(
                    "QP {:#x}: bad receive WQE {:#x}: {}",
                    qp.qpn, b.wr_id, b.why
                );
                (false, b.wr_id)
            }
        };
        bad.push(Bad {
            qpn: qp.qpn,
            cq: qp.recv_cq,
            cqe: error_cqe(
                qp.qpn,
                &BadWqe {
                    wr_id,
                    opcode: WcOpcode::Recv,
                    why: "",
                },
            ),
            fatal: !in_reset,
        });
        if !in_reset {
            break;
        }
    }
    Ok(n)
}

/// Returns (taken, bad WQEs dropped). A receive taken into the endpoint
/// keeps its ring slot until a message uses it ([`release_used_srq_slots`]):
/// the client may have max_wr receives outstanding, not max_wr in the ring
/// and max_wr more in the endpoint.
fn consume_srq(
    e: &mut Endpoint<DeviceMemory>,
    srq: &mut Srq,
    buf: &mut [u8],
) -> Result<(usize, usize), RingError> {
    let (mut n, mut bad) = (0, 0);
    while n < BUDGET && !srq_blocked(e, srq) {
        let Some(slot) = srq.ring.peek()? else {
            break;
        };
        let len = slot.len().min(buf.len());
        slot.read(0, &mut buf[..len])?;
        slot.keep();
        n += 1;
        // An SRQ WQE belongs to no QP yet: a bad one has no CQ to complete
        // on. It is dropped (its slot given back) and reported with
        // IBV_EVENT_SRQ_ERR.
        let posted = wqe::recv_wqe(&buf[..len], srq.max_sge)
            .ok()
            .is_some_and(|w| e.post_srq_recv(srq.id, w).is_ok());
        if !posted {
            srq.ring.release_read(1);
            bad += 1;
        }
    }
    Ok((n, bad))
}

/// Gives back the ring slots of an SRQ's receives that messages have
/// taken from the endpoint and whose completions did not already give
/// them back ([`Srq::receive_used`]): afterwards the slots read ahead are
/// as many as the endpoint holds.
fn release_used_srq_slots(e: &Endpoint<DeviceMemory>, srq: &mut Srq) {
    srq.taken_up_to(e.srq_taken(srq.id).unwrap_or(0));
}

/// Posts to the endpoint every well-formed receive WQE waiting in
/// `qp`'s RQ ring, up to the queue's depth; returns how many.
/// [`Device::pump`] does this for the watched rings between a receive
/// system call and the dispatch of what it brought (and for a parked
/// one before a packet for its QP), so a receive posted before a packet
/// arrived is always there for it however late the loop got to the ring
/// (a UD or UC message that finds no receive is dropped). A slot that
/// does not parse, or that the endpoint refuses, stays in its ring for
/// [`Device::consume`], which turns it into an error completion.
fn refill_qp(
    e: &mut Endpoint<DeviceMemory>,
    qp: &mut Qp,
    cqs: &mut SessionCqs<'_>,
    buf: &mut [u8],
) -> usize {
    let mut n = 0;
    while !rq_blocked(e, qp, cqs.cqs) {
        let Some(rq) = qp.rq.as_mut() else {
            break;
        };
        let post = |w| e.post_recv(qp.qpn, w, &mut *cqs);
        if !post_one(rq, buf, qp.cap.max_recv_sge, post, false) {
            break;
        }
        n += 1;
    }
    n
}

/// [`refill_qp`] for an SRQ's ring.
fn refill_srq(e: &mut Endpoint<DeviceMemory>, srq: &mut Srq, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while !srq_blocked(e, srq) {
        let post = |w| e.post_srq_recv(srq.id, w);
        if !post_one(&mut srq.ring, buf, srq.max_sge, post, true) {
            break;
        }
        n += 1;
    }
    n
}

/// [`refill_qp`] / [`refill_srq`] over every watched receive ring.
fn refill_receives(
    e: &mut Endpoint<DeviceMemory>,
    objects: &mut Objects,
    counters: &mut DaemonCounters,
    buf: &mut [u8],
) -> usize {
    let mut n = 0;
    let qps: Vec<(u32, u32)> = objects.ready.qps.iter().copied().collect();
    for (sid, qpn) in qps {
        let Some(Parts { s, cq_owner, ready }) = objects.parts(sid) else {
            continue;
        };
        let Session { qps, cqs, .. } = s;
        let Some(qp) = qps.get_mut(&qpn).filter(|q| !q.idle.rq) else {
            continue;
        };
        let mut cqs = SessionCqs {
            sid,
            cqs,
            owner: cq_owner,
            dirty: &mut ready.cqs,
            counters: &mut *counters,
        };
        n += refill_qp(e, qp, &mut cqs, buf);
    }
    let srqs: Vec<(u32, u32)> = objects.ready.srqs.iter().copied().collect();
    for (sid, h) in srqs {
        let Some(s) = objects.get_mut(sid) else {
            continue;
        };
        if let Some(srq) = s.srqs.get_mut(&h).filter(|q| !q.idle.rq) {
            n += refill_srq(e, srq, buf);
        }
    }
    n
}

/// A packet is about to be dispatched: if a QP it is for has its receive
/// ring (RQ or SRQ) parked, that ring is watched again and what it holds
/// taken first (as a watched ring's was before the batch). Returns the
/// receives taken.
fn wake_receivers(
    e: &mut Endpoint<DeviceMemory>,
    objects: &mut Objects,
    counters: &mut DaemonCounters,
    buf: &mut [u8],
    (meta, pkt): (&RecvMeta, &[u8]),
    now: Instant,
) -> usize {
    // BTH DestQP: bytes 5..8 of the UDP payload (a runt is dropped by the
    // endpoint anyway).
    let Some(d) = pkt.get(5..8) else {
        return 0;
    };
    let qpn = u32::from_be_bytes([0, d[0], d[1], d[2]]);
    let group = meta.dst.filter(|&a| qpn == MCAST_QPN || mcast::is_group(a));
    match group {
        Some(g) => {
            let members = e.mcast_members(g).to_vec();
            members
                .into_iter()
                .map(|q| wake_receiver(e, objects, counters, buf, q, now))
                .sum()
        }
        None => wake_receiver(e, objects, counters, buf, qpn, now),
    }
}

/// [`wake_receivers`] for one QP.
fn wake_receiver(
    e: &mut Endpoint<DeviceMemory>,
    objects: &mut Objects,
    counters: &mut DaemonCounters,
    buf: &mut [u8],
    qpn: u32,
    now: Instant,
) -> usize {
    let Some(sid) = objects.qp_owner(qpn) else {
        return 0;
    };
    let Some(Parts { s, cq_owner, ready }) = objects.parts(sid) else {
        return 0;
    };
    let Session { qps, cqs, srqs, .. } = s;
    let Some(qp) = qps.get_mut(&qpn) else {
        return 0;
    };
    let mut n = 0;
    if qp.idle.rq {
        ready.wake_qp(sid, qp, now);
        let mut cqs = SessionCqs {
            sid,
            cqs,
            owner: cq_owner,
            dirty: &mut ready.cqs,
            counters,
        };
        n += refill_qp(e, qp, &mut cqs, buf);
    }
    if let Some(h) = qp.srq {
        if let Some(srq) = srqs.get_mut(&h).filter(|q| q.idle.rq) {
            ready.wake_srq(sid, h, srq, now);
            n += refill_srq(e, srq, buf);
        }
    }
    n
}

/// Parses the next slot of a receive ring and posts it; releases the slot
/// (an SRQ's, `read_ahead`: keeps it, see [`consume_srq`]) only if that
/// worked. False: empty, unusable or refused (left in place).
fn post_one(
    ring: &mut Consumer,
    buf: &mut [u8],
    max_sge: u32,
    post: impl FnOnce(transport::qp::RecvWqe) -> Result<(), EngineError>,
    read_ahead: bool,
) -> bool {
    let Ok(Some(slot)) = ring.peek() else {
        return false;
    };
    let len = slot.len().min(buf.len());
    if slot.read(0, &mut buf[..len]).is_err() {
        return false;
    }
    let Ok(w) = wqe::recv_wqe(&buf[..len], max_sge) else {
        return false;
    };
    if post(w).is_err() {
        return false;
    }
    if read_ahead {
        slot.keep();
    } else {
        slot.release();
    }
    true
}

impl Device {
    /// One turn of the data path, never sleeping: fire due QP timers, then
    /// up to `io_rounds` times: receive a batch -> post the receives the
    /// clients posted so far (so one posted before a packet arrived is
    /// there for it) -> dispatch the batch -> (first round) take new work
    /// from the rings -> transmit, until both directions are quiet.
    /// Completions go straight into the CQs. Returns how much happened
    /// (packets, timers, WQEs taken); a socket error ends the turn.
    pub fn pump(&mut self) -> Result<usize, EngineError> {
        let mut now = Instant::now();
        let mut cqs = DeviceCqs::new(&mut self.objects, &mut self.counters);
        let mut work = self.endpoint.handle_timeout(now, &mut cqs);
        for round in 0..self.rounds {
            let got = self.driver.recv();
            if self.driver.received() > 0 {
                self.refill_receives();
            }
            let r = self.dispatch_packets(now);
            // Writes combined over the batch land before anything else.
            self.endpoint.memory_mut().flush_writes();
            if round == 0 {
                work += self.consume();
            }
            // MADs that reached QP 1, CM timers, and what the CM sends.
            work += self.cm.pump(now, &mut self.endpoint);
            got?;
            let s = self.transmit_packets(now);
            work += r + s;
            if r == 0 && s == 0 {
                break;
            }
            now = Instant::now();
        }
        Ok(work)
    }

    /// [`refill_receives`] over the watched rings.
    fn refill_receives(&mut self) {
        let Device {
            endpoint,
            objects,
            counters,
            slot_buf,
            ..
        } = self;
        endpoint.take_recv_starved();
        let n = refill_receives(endpoint, objects, counters, slot_buf);
        counters.wqes_posted += n as u64;
    }

    /// The received packets to the endpoint; returns how many. When a
    /// packet took a QP's last receive WQE, the receives posted to the
    /// rings since are taken before the next packet (a batch of small
    /// SENDs can use up an RQ within one receive batch, and a SEND that
    /// finds no receive costs an RNR NAK, the requester's RNR timer and
    /// the resend of everything behind it).
    fn dispatch_packets(&mut self, now: Instant) -> usize {
        let Device {
            endpoint,
            driver,
            objects,
            counters,
            slot_buf,
            ..
        } = self;
        driver.dispatch(|m, b| {
            if endpoint.take_recv_starved() {
                let n = refill_receives(endpoint, objects, counters, slot_buf);
                counters.wqes_posted += n as u64;
                counters.recv_refills += 1;
            }
            if objects.ready.parked_recv > 0 {
                let n = wake_receivers(endpoint, objects, counters, slot_buf, (m, b), now);
                counters.wqes_posted += n as u64;
            }
            let mut cqs = DeviceCqs::new(objects, counters);
            endpoint.handle_datagram(now, m, b, &mut cqs)
        })
    }

    /// One send batch from the endpoint; returns the packets it made.
    fn transmit_packets(&mut self, now: Instant) -> usize {
        let Device {
            endpoint,
            driver,
            objects,
            counters,
            ..
        } = self;
        let mut cqs = DeviceCqs::new(objects, counters);
        let n = driver.transmit(|b| endpoint.poll_transmit(now, b, &mut cqs));
        // What was read ahead for this batch is not kept for the next.
        endpoint.memory_mut().end_batch();
        n
    }

    /// Takes posted work from the watched rings (after watching again the
    /// parked rings with work of the sessions whose doorbell rang), then
    /// parks those idle for [`PARK_AFTER`](super::ready::PARK_AFTER);
    /// returns WQEs taken.
    pub fn consume(&mut self) -> usize {
        let now = Instant::now();
        for sid in std::mem::take(&mut self.objects.ready.rang) {
            if let Some(Parts { s, ready, .. }) = self.objects.parts(sid) {
                ready.wake_session(sid, s, now);
            }
        }
        let mut taken = 0;
        let mut from = 0;
        // The sessions with watched rings, in order, without collecting
        // them (this runs on every turn of the loop).
        loop {
            let r = &self.objects.ready;
            let q = r.qps.range((from, 0)..).next().map(|&(s, _)| s);
            let b = r.srqs.range((from, 0)..).next().map(|&(s, _)| s);
            let Some(id) = q.into_iter().chain(b).min() else {
                break;
            };
            taken += self.consume_session(id, now);
            if id == u32::MAX {
                break;
            }
            from = id + 1;
        }
        taken
    }

    /// Takes what session `id` posted so far and sends the packets that
    /// made, before one of its control requests is handled: work posted
    /// before a modify or destroy of its QP reaches the wire first, as on
    /// an HCA (and on kernel rxe, whose ibv_post_send runs the requester).
    /// A UD send posted just before ibv_destroy_qp (libfabric's rxd ACKs
    /// the peer's last message and closes) is then not lost. A post to a
    /// parked ring rang the session's doorbell before the request was
    /// sent: the doorbell is read here, so that ring is watched and read
    /// too. Returns the WQEs taken.
    pub(super) fn take_posted(&mut self, id: u32) -> usize {
        let now = Instant::now();
        let rang = self
            .objects
            .session(id)
            .and_then(|s| s.bell.as_ref())
            .is_some_and(|b| matches!(b.drain(), Ok(n) if n > 0));
        if rang {
            self.counters.doorbells += 1;
        }
        if rang || self.objects.ready.rang.remove(&id) {
            if let Some(Parts { s, ready, .. }) = self.objects.parts(id) {
                ready.wake_session(id, s, now);
            }
        }
        let taken = self.consume_session(id, now);
        if taken > 0 {
            for _ in 0..FLUSH_ROUNDS {
                if self.transmit_packets(now) == 0 {
                    break;
                }
            }
        }
        taken
    }

    /// Takes posted work from one client's watched rings, then parks
    /// those idle long enough.
    pub(super) fn consume_session(&mut self, id: u32, now: Instant) -> usize {
        let fam = (
            self.driver.local_addr().is_ipv6(),
            self.driver.has_v6_side(),
        );
        let Some(Parts { s, cq_owner, ready }) = self.objects.parts(id) else {
            self.objects.ready.forget_session(id);
            return 0;
        };
        let qpns: Vec<u32> = ready
            .qps
            .range((id, 0)..=(id, u32::MAX))
            .map(|&(_, q)| q)
            .collect();
        let srq_hs: Vec<u32> = ready
            .srqs
            .range((id, 0)..=(id, u32::MAX))
            .map(|&(_, h)| h)
            .collect();
        let e = &mut self.endpoint;
        let buf = &mut self.slot_buf;
        let mut bad = Vec::new();
        let mut broken = Vec::new();
        let mut srq_errs = Vec::new();
        let mut taken = 0;
        let Session { qps, cqs, srqs, .. } = &mut *s;
        let mut cqs = SessionCqs {
            sid: id,
            cqs,
            owner: cq_owner,
            dirty: &mut ready.cqs,
            counters: &mut self.counters,
        };
        for &qpn in &qpns {
            let Some(qp) = qps.get_mut(&qpn) else {
                continue;
            };
            let mut r = Ok(0);
            if !qp.idle.sq {
                r = consume_sq(e, qp, &mut cqs, fam, buf, &mut bad);
            }
            if !qp.idle.rq {
                r = r.and_then(|a| Ok(a + consume_rq(e, qp, &mut cqs, buf, &mut bad)?));
            }
            match r {
                Ok(0) => {}
                Ok(n) => {
                    taken += n;
                    qp.idle.busy_at = now;
                }
                Err(err) => {
                    warning!(
                        "client {id}: QP {:#x}: ring unusable ({err}); QP to error",
                        qp.qpn
                    );
                    qp.broken = true;
                    broken.push((qp.qpn, qp.user_handle));
                }
            }
        }
        for &h in &srq_hs {
            let Some(srq) = srqs.get_mut(&h) else {
                continue;
            };
            if srq.idle.rq {
                continue;
            }
            match consume_srq(e, srq, buf) {
                Ok((n, nbad)) => {
                    taken += n;
                    if n > 0 {
                        srq.idle.busy_at = now;
                    }
                    if nbad > 0 {
                        cqs.counters.bad_wqes += nbad as u64;
                        srq_errs.push(srq.user_handle);
                    }
                }
                Err(err) => {
                    warning!("client {id}: SRQ ring unusable ({err})");
                    srq.broken = true;
                    srq_errs.push(srq.user_handle);
                }
            }
        }
        cqs.counters.wqes_posted += taken as u64;
        cqs.counters.bad_wqes += bad.len() as u64;
        // The CQ's one FIFO already holds everything the endpoint completed
        // for it: the daemon's own entry goes behind.
        for b in bad {
            if let Some(cq) = cqs.cqs.get_mut(&b.cq) {
                push_own(cq, b.cqe, cqs.counters);
                cqs.dirty.insert(cq.id);
            }
            if b.fatal {
                let _ = e.modify_qp(b.qpn, &to_error(), &mut cqs);
            }
        }
        for &(qpn, _) in &broken {
            let _ = e.modify_qp(qpn, &to_error(), &mut cqs);
        }
        for (_, uh) in broken {
            self.counters.async_events += 1;
            s.send_event(uh, event::QP_FATAL);
        }
        for uh in srq_errs {
            self.counters.async_events += 1;
            s.send_event(uh, event::SRQ_ERR);
        }
        // Rings idle long enough leave the watched set.
        for qpn in qpns {
            let gone = s.qps.get_mut(&qpn).is_none_or(|qp| ready.park_qp(qp, now));
            if gone {
                ready.qps.remove(&(id, qpn));
            }
        }
        for h in srq_hs {
            let gone = s
                .srqs
                .get_mut(&h)
                .is_none_or(|srq| ready.park_srq(srq, now));
            if gone {
                ready.srqs.remove(&(id, h));
            }
        }
        taken
    }

    /// Moves completions to CQ rings, delivers async events and SRQ
    /// limit events; returns how many things happened.
    pub fn deliver(&mut self) -> usize {
        self.deliver_cqs() + self.deliver_events() + self.check_srq_limits()
    }

    fn deliver_events(&mut self) -> usize {
        let mut n = 0;
        while let Some((qpn, ev)) = self.endpoint.poll_event() {
            n += 1;
            let t = match ev {
                QpEvent::Fatal => event::QP_FATAL,
                QpEvent::LastWqeReached => event::QP_LAST_WQE_REACHED,
                QpEvent::CommEstablished => event::COMM_EST,
            };
            // Events of a QP destroyed meanwhile have no one to go to.
            let Some(s) = self.objects.owner_of_qp_mut(qpn) else {
                continue;
            };
            let Some(uh) = s.qps.get(&qpn).map(|q| q.user_handle) else {
                continue;
            };
            self.counters.async_events += 1;
            if !s.send_event(uh, t) {
                self.counters.async_events_dropped += 1;
            }
        }
        n
    }

    /// Gives back the ring slots of the SRQ receives messages took
    /// ([`release_used_srq_slots`]), then raises
    /// IBV_EVENT_SRQ_LIMIT_REACHED when taking WQEs left an armed SRQ
    /// with fewer than its limit (counting those still in its ring), as
    /// ibv_modify_srq(3) says ("once the number of WRs drops below") and
    /// rxe does: arming an SRQ that already holds fewer raises nothing
    /// until a WQE is taken. Disarms it.
    fn check_srq_limits(&mut self) -> usize {
        let mut n = 0;
        let mut touched = Vec::new();
        // Only SRQs whose QPs took receives since the last pass: for the
        // others nothing changed.
        self.endpoint.take_touched_srqs(&mut touched);
        for srq_id in touched {
            let Some((sid, h)) = self.objects.srq_owner(srq_id) else {
                continue;
            };
            let Some(s) = self.objects.get_mut(sid) else {
                continue;
            };
            let Some(srq) = s.srqs.get_mut(&h) else {
                continue;
            };
            release_used_srq_slots(&self.endpoint, srq);
            let taken = self.endpoint.srq_taken(srq.id).unwrap_or(0);
            let dropped = taken != srq.taken_seen;
            srq.taken_seen = taken;
            if srq.limit == 0 || !dropped {
                continue;
            }
            let posted = self.endpoint.srq_len(srq.id).unwrap_or(0)
                + srq.ring.unread().unwrap_or(0) as usize;
            if posted < srq.limit as usize {
                srq.limit = 0;
                let uh = srq.user_handle;
                n += 1;
                self.counters.async_events += 1;
                if !s.send_event(uh, event::SRQ_LIMIT_REACHED) {
                    self.counters.async_events_dropped += 1;
                }
            }
        }
        n
    }

    /// Raises the consumer-sleeping flag on every watched ring the daemon
    /// would read now (the parked ones have theirs raised already). False
    /// (and every watched flag lowered again) if one of them is not
    /// empty. Rings that are blocked are left alone: what unblocks them
    /// (transport progress, a client polling its CQ) is waited for
    /// otherwise.
    pub fn prepare_sleep(&mut self) -> bool {
        let ok = self.watched_qps().all(|(s, qp)| {
            let sq = qp.idle.sq
                || sq_blocked(&self.endpoint, qp, &s.cqs)
                || matches!(qp.sq.prepare_sleep(), Ok(true));
            sq && (qp.idle.rq
                || qp.rq.as_ref().is_none_or(|rq| {
                    rq_blocked(&self.endpoint, qp, &s.cqs) || matches!(rq.prepare_sleep(), Ok(true))
                }))
        }) && self.watched_srqs().all(|srq| {
            srq.idle.rq
                || srq_blocked(&self.endpoint, srq)
                || matches!(srq.ring.prepare_sleep(), Ok(true))
        });
        if !ok {
            self.end_sleep();
        }
        ok
    }

    /// Lowers the consumer-sleeping flag of every watched ring (producers
    /// stop ringing); parked rings keep theirs.
    pub fn end_sleep(&self) {
        for (_, qp) in self.watched_qps() {
            if !qp.idle.sq {
                qp.sq.end_sleep();
            }
            if let Some(rq) = qp.rq.as_ref().filter(|_| !qp.idle.rq) {
                rq.end_sleep();
            }
        }
        for srq in self.watched_srqs() {
            if !srq.idle.rq {
                srq.ring.end_sleep();
            }
        }
    }

    /// The watched QPs with their sessions.
    fn watched_qps(&self) -> impl Iterator<Item = (&Session, &Qp)> {
        let o = &self.objects;
        o.ready.qps.iter().filter_map(|&(sid, qpn)| {
            let s = o.session(sid)?;
            Some((s, s.qps.get(&qpn)?))
        })
    }

    /// The watched SRQs.
    fn watched_srqs(&self) -> impl Iterator<Item = &Srq> {
        let o = &self.objects;
        o.ready
            .srqs
            .iter()
            .filter_map(|&(sid, h)| o.session(sid)?.srqs.get(&h))
    }

    /// Some CQ has a backlog that only the client's polling can drain:
    /// the loop must look again soon even without any wake-up. (Only
    /// dirty CQs can have one.)
    pub fn has_backlog(&self) -> bool {
        let o = &self.objects;
        self.cm.has_pending()
            || o.ready.cqs.iter().any(|&id| {
                o.cq_owner(id)
                    .and_then(|(sid, h)| o.session(sid)?.cqs.get(&h))
                    .is_some_and(|c| !c.backlog.is_empty())
            })
    }
}

fn to_error() -> transport::qp::QpAttr {
    transport::qp::QpAttr {
        state: Some(QpState::Err),
        ..Default::default()
    }
}
