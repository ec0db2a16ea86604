//! Completer (RC): matches ACKs, NAKs, READ responses and atomic ACKs to
//! send WQEs, places response data, produces send completions in WQE
//! order, and starts retries: go-back-N on a PSN sequence NAK, on a gap
//! in READ responses and on the local ACK timeout; waits out RNR NAKs.
//!
//! `comp_psn` is the first PSN not yet acknowledged or answered. An ACK
//! for PSN a acknowledges every SEND/WRITE packet up to a; a READ or
//! atomic is only done when its response data arrived, so an ACK beyond
//! an unanswered one means its responses were lost.

use super::queue_pair::{Env, Qp};
use super::sgl;
use super::timers;
use super::types::*;
use crate::verbs::WrKind;
use crate::wire::{credit, AethKind, NakCode, Opcode, Packet};
use crate::Psn;
use std::time::Instant;

impl Qp {
    pub(crate) fn handle_response(&mut self, now: Instant, pkt: &Packet<'_>, env: &mut Env<'_>) {
        if self.cfg.qp_type != QpType::Rc && self.cfg.qp_type != QpType::XrcSend
            || !matches!(self.state, QpState::Rts | QpState::Sqd)
        {
            self.counters.dropped_pkts += 1;
            return;
        }
        let psn = pkt.hdr.bth.psn;
        let op = pkt.opcode();
        let Some(aeth) = pkt.hdr.aeth else {
            // READ RESPONSE MIDDLE carries no AETH.
            if op == Opcode::RC_READ_RESPONSE_MIDDLE {
                self.on_read_response(now, pkt, env);
            } else {
                self.counters.dropped_pkts += 1;
            }
            return;
        };
        match (op, aeth.kind()) {
            (Opcode::RC_ACK, AethKind::Ack { credit }) => {
                self.take_credit(now, psn, credit);
                self.on_ack(now, psn);
            }
            (Opcode::RC_ACK, AethKind::RnrNak { timer }) => self.on_rnr_nak(now, psn, timer),
            (Opcode::RC_ACK, AethKind::Nak(NakCode::PsnSequence)) => self.on_seq_nak(now, psn),
            (Opcode::RC_ACK, AethKind::Nak(code)) => self.on_fatal_nak(now, psn, code),
            (Opcode::RC_ATOMIC_ACK, AethKind::Ack { .. }) => self.on_atomic_ack(now, pkt, env),
            (_, AethKind::Ack { .. }) => self.on_read_response(now, pkt, env),
            _ => self.counters.dropped_pkts += 1,
        }
    }

    /// The credit count of an ACK for `psn` (also of a re-ACK of the last
    /// PSN: that is how a responder hands out credits unasked), unless an
    /// ACK for a later PSN already gave one.
    fn take_credit(&mut self, now: Instant, psn: Psn, code: u8) {
        let current = psn == self.sq.comp_psn.sub(1) || self.sq.in_flight(psn);
        if !current || self.sq.credits.is_some() && psn.is_before(self.sq.credit_psn) {
            return;
        }
        let new = credit::decode(code);
        if psn == self.sq.credit_psn && new > self.sq.credits && self.sq.credits.is_some() {
            // The same PSN with more credits: an update sent unasked.
            self.sq.peer_updates = true;
        }
        self.sq.credits = new;
        self.sq.credit_psn = psn;
        self.sq.probe_ok = false;
        self.sq.probe_deadline = match new {
            Some(c) if self.sq.peer_updates && c <= self.receive_msgs_out() => {
                Some(now + self.credit_wait())
            }
            _ => None,
        };
    }

    /// How long to wait for a credit update before sending beyond the
    /// credits: as long as for a lost ACK (the update is one; the local
    /// ACK timeout), and at least `QpTuning::credit_probe_delay`. Measured
    /// with ib_send_bw -s 2 on one device: with 500 us the probes went
    /// while the server was still off the CPU and met RNR NAKs (1040 in
    /// 3 s, each 0.64 ms of an idle QP); the update comes when it posts.
    fn credit_wait(&self) -> std::time::Duration {
        let floor = self.tuning.credit_probe_delay;
        self.attr.ack_timeout().map_or(floor, |t| t.max(floor))
    }

    /// Plain ACK: everything up to `psn` arrived.
    fn on_ack(&mut self, now: Instant, psn: Psn) {
        // A re-ACK of what we already know (duplicate) is harmless.
        if psn == self.sq.comp_psn.sub(1) {
            return;
        }
        if !self.sq.in_flight(psn) {
            self.counters.dropped_pkts += 1;
            return;
        }
        if self.ack_upto(now, psn) {
            self.start_retry(now, false);
        }
    }

    /// Acknowledges PSNs up to `a`: completes SEND/WRITE WQEs that end at
    /// or before it. Returns true when it passes a READ/atomic whose
    /// responses never arrived (they were lost: retry).
    fn ack_upto(&mut self, now: Instant, a: Psn) -> bool {
        let mut lost = false;
        let mut stop = None;
        for e in self.sq.entries.iter_mut() {
            if !e.started {
                break;
            }
            if e.done {
                continue;
            }
            if e.kind.is_rd_atomic() {
                lost = !e.first_psn.add(e.rcvd_pkts).is_after(a);
                stop = Some(e.first_psn.add(e.rcvd_pkts));
                break;
            }
            if e.last_psn().is_after(a) {
                stop = Some(a.next());
                break;
            }
            e.done = true;
        }
        let new_c = stop.unwrap_or(a.next());
        if new_c.is_after(self.sq.comp_psn) {
            self.sq.comp_psn = new_c;
            self.progress(now);
        }
        self.complete_front();
        lost
    }

    /// Forward progress: retry budgets refill, the ACK timer restarts,
    /// the window grows back after a timeout.
    fn progress(&mut self, now: Instant) {
        self.sq.cwnd = self.sq.cwnd.saturating_mul(2);
        self.sq.retries_left = self.attr.retry_cnt;
        self.sq.rnr_left = self.attr.rnr_retry;
        self.sq.end_pass_if_done();
        self.sq.ack_deadline = match self.sq.outstanding() {
            true => self.attr.ack_timeout().map(|t| now + t),
            false => None,
        };
    }

    /// Pops answered WQEs off the front and reports them, in order.
    pub(crate) fn complete_front(&mut self) {
        while self.sq.entries.front().is_some_and(|e| e.done) {
            let Some(e) = self.sq.entries.pop_front() else {
                break;
            };
            self.sq.cur_idx = self.sq.cur_idx.saturating_sub(1);
            if e.signaled {
                self.cq
                    .push_back(e.completion(WcStatus::Success, self.cfg.qpn));
            }
        }
    }

    /// Marks WQE `i` answered and releases its initiator-depth slot.
    fn finish_entry(&mut self, i: usize) {
        let e = &mut self.sq.entries[i];
        e.done = true;
        if e.holds_rd {
            e.holds_rd = false;
            self.sq.rd_outstanding = self.sq.rd_outstanding.saturating_sub(1);
        }
    }

    /// Before a response at `psn` is used, everything before it counts as
    /// acknowledged. Returns false when the response cannot be used
    /// (stale, or a gap before it: then a retry is started).
    fn accept_at(&mut self, now: Instant, psn: Psn) -> bool {
        if !self.sq.in_flight(psn) {
            return false;
        }
        if psn != self.sq.comp_psn {
            let lost = self.ack_upto(now, psn.sub(1));
            if lost || psn != self.sq.comp_psn {
                self.start_retry(now, false);
                return false;
            }
        }
        true
    }

    fn on_read_response(&mut self, now: Instant, pkt: &Packet<'_>, env: &mut Env<'_>) {
        let psn = pkt.hdr.bth.psn;
        if !self.accept_at(now, psn) {
            self.counters.dropped_pkts += 1;
            return;
        }
        let pmtu = self.attr.pmtu() as u64;
        let Some(i) = self.sq.front_pending() else {
            return;
        };
        let op = pkt.opcode();
        let e = &mut self.sq.entries[i];
        let k = e.rcvd_pkts;
        let offset = u64::from(k) * pmtu;
        let remaining = e.len.saturating_sub(offset);
        let final_pkt = remaining <= pmtu;
        // A retried READ may be answered as a new one (FIRST/ONLY) or as
        // a continuation (MIDDLE/LAST), whichever the responder chose.
        let ok_op = match (e.kind, final_pkt, k == 0) {
            (WrKind::Read, true, true) => op == Opcode::RC_READ_RESPONSE_ONLY,
            (WrKind::Read, true, false) => {
                op == Opcode::RC_READ_RESPONSE_LAST || op == Opcode::RC_READ_RESPONSE_ONLY
            }
            (WrKind::Read, false, true) => op == Opcode::RC_READ_RESPONSE_FIRST,
            (WrKind::Read, false, false) => {
                op == Opcode::RC_READ_RESPONSE_MIDDLE || op == Opcode::RC_READ_RESPONSE_FIRST
            }
            (WrKind::Flush | WrKind::AtomicWrite, _, _) => op == Opcode::RC_READ_RESPONSE_ONLY,
            _ => false,
        };
        let want = if e.kind == WrKind::Read {
            remaining.min(pmtu)
        } else {
            0
        };
        if !ok_op || pkt.payload.len() as u64 != want || e.first_psn.add(k) != psn {
            self.counters.dropped_pkts += 1;
            return;
        }
        if let (Payload::Sges(sges), true) = (&e.wqe.payload, want > 0) {
            if sgl::scatter(
                env.mem,
                self.cfg.pd,
                sges,
                &mut e.scatter,
                offset,
                pkt.payload,
            )
            .is_err()
            {
                e.error = Some(WcStatus::LocProtErr);
                self.enter_error(true);
                return;
            }
        }
        e.rcvd_pkts += 1;
        let done = e.rcvd_pkts >= e.npkts;
        self.sq.comp_psn = psn.next();
        if done {
            self.finish_entry(i);
        }
        self.progress(now);
        self.complete_front();
    }

    fn on_atomic_ack(&mut self, now: Instant, pkt: &Packet<'_>, env: &mut Env<'_>) {
        let psn = pkt.hdr.bth.psn;
        let Some(orig) = pkt.hdr.atomic_ack else {
            return;
        };
        if !self.accept_at(now, psn) {
            self.counters.dropped_pkts += 1;
            return;
        }
        let Some(i) = self.sq.front_pending() else {
            return;
        };
        let e = &mut self.sq.entries[i];
        if e.kind != WrKind::Atomic || e.first_psn != psn {
            self.counters.dropped_pkts += 1;
            return;
        }
        // The original value lands in host order, as the NIC returns it.
        if let Payload::Sges(sges) = &e.wqe.payload {
            let bytes = orig.orig.to_ne_bytes();
            if sgl::scatter(env.mem, self.cfg.pd, sges, &mut e.scatter, 0, &bytes).is_err() {
                e.error = Some(WcStatus::LocProtErr);
                self.enter_error(true);
                return;
            }
        }
        e.rcvd_pkts = 1;
        self.sq.comp_psn = psn.next();
        self.finish_entry(i);
        self.progress(now);
        self.complete_front();
    }

    /// The responder had no receive WQE for `psn`: wait out its timer,
    /// then resend from there.
    fn on_rnr_nak(&mut self, now: Instant, psn: Psn, timer: u8) {
        if self.sq.rnr_deadline.is_some() || !self.sq.in_flight(psn) {
            return;
        }
        if psn != self.sq.comp_psn {
            self.ack_upto(now, psn.sub(1));
            if psn != self.sq.comp_psn {
                return;
            }
        }
        self.counters.rcvd_rnr_err += 1;
        if self.sq.rnr_left == 0 {
            self.counters.rnr_nak_retry_err += 1;
            self.fail_front(WcStatus::RnrRetryExcErr);
            return;
        }
        if self.attr.rnr_retry != 7 {
            self.sq.rnr_left -= 1;
        }
        self.sq.rnr_deadline = Some(now + timers::rnr_timeout(timer));
        self.sq.ack_deadline = None;
    }

    /// The responder expects `psn`: everything before arrived, resend
    /// from there — unless a go-back pass already resent it (the ACK timer
    /// covers a lost resend).
    fn on_seq_nak(&mut self, now: Instant, psn: Psn) {
        if !self.sq.in_flight(psn) {
            return;
        }
        self.counters.rcvd_seq_err += 1;
        if psn != self.sq.comp_psn {
            self.ack_upto(now, psn.sub(1));
        }
        // Waiting out an RNR NAK: its resend covers this.
        if self.sq.rnr_deadline.is_none() {
            self.start_retry(now, false);
        }
    }

    /// Invalid request, remote access or remote operational error: the
    /// WQE at `psn` fails and the QP goes to ERR.
    fn on_fatal_nak(&mut self, now: Instant, psn: Psn, code: NakCode) {
        if !self.sq.in_flight(psn) {
            return;
        }
        if psn != self.sq.comp_psn {
            self.ack_upto(now, psn.sub(1));
        }
        let status = match code {
            NakCode::InvalidRequest => WcStatus::RemInvReqErr,
            NakCode::RemoteAccess => WcStatus::RemAccessErr,
            // 0x63 (rxe answers a too-long SEND with it), 0x64, reserved.
            _ => WcStatus::RemOpErr,
        };
        self.fail_front(status);
    }

    /// The oldest unanswered WQE completes with `status`; QP -> ERR.
    fn fail_front(&mut self, status: WcStatus) {
        if let Some(i) = self.sq.front_pending() {
            self.sq.entries[i].error = Some(status);
        }
        self.enter_error(true);
    }

    pub(crate) fn on_ack_timeout(&mut self, now: Instant) {
        if !self.sq.outstanding() {
            return;
        }
        self.counters.local_ack_timeout_err += 1;
        self.start_retry(now, true);
    }

    /// Go-back-N from `comp_psn`. Only the timer restarts a pass for a
    /// PSN the pass under way has already resent: a NAK for it was caused
    /// by packets sent before the go-back, which a deep queue (a slow peer
    /// behind a tap, as kernel rxe in a VM) still delivers ahead of the
    /// resent ones; answering each such NAK with a new pass resent a whole
    /// window per PSN of progress.
    pub(crate) fn start_retry(&mut self, _now: Instant, timeout: bool) {
        if !self.sq.outstanding() {
            return;
        }
        let c = self.sq.comp_psn;
        if !timeout && self.sq.resent_in_pass(c) {
            return;
        }
        if self.sq.retries_left == 0 {
            self.counters.retry_exceeded_err += 1;
            self.fail_front(WcStatus::RetryExcErr);
            return;
        }
        self.sq.retries_left -= 1;
        self.counters.completer_retry_err += 1;
        self.sq.retry_guard = Some(c);
        self.sq.retry_end = self.sq.sent_high;
        self.sq.seek(c);
        self.sq.since_ack_req = 0;
        if timeout {
            // Re-armed by the first resent packet.
            self.sq.ack_deadline = None;
            // Nothing came back for a whole timeout: the peer (or the path
            // to it) is slower than the timer. Probe with one packet.
            self.sq.cwnd = 1;
        }
    }
}
