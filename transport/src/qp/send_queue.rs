//! The send queue as the requester and the completer share it: posted
//! WQEs in order, the requester's cursor (next PSN to send and the WQE it
//! belongs to) and the completer's position (first PSN not yet answered).
//!
//! A WQE's PSNs are fixed when it is first sent and never change: a retry
//! re-sends the same PSNs, so every position can be recomputed from
//! `(entry, psn)` alone.

use super::error::QpError;
use super::sgl::SgCursor;
use super::types::*;
use crate::verbs::{wr_flags, WrKind};
use crate::Psn;
use std::collections::VecDeque;
use std::time::Instant;

/// Largest message the transport accepts. 2^30 keeps a READ at MTU 256
/// at 2^22 PSNs, well inside the 2^23 PSN comparison window.
pub const MAX_MSG_SIZE: u64 = 1 << 30;

/// The operation family of a WQE, from the WR opcode table.
pub(crate) fn kind_of(op: &SendOp) -> WrKind {
    match op.wr_opcode().info() {
        Some(i) => i.kind,
        // Every SendOp has a table entry (wr_opcode's tests).
        None => WrKind::Other,
    }
}

/// Completion opcode of a send WQE.
pub(crate) fn wc_opcode(op: &SendOp) -> WcOpcode {
    op.wr_opcode().wc_opcode()
}

/// Checks a WQE against the QP type; returns its kind and message length.
pub(crate) fn validate(
    qp_type: QpType,
    wqe: &SendWqe,
    ud_max: usize,
) -> Result<(WrKind, u64), QpError> {
    let kind = kind_of(&wqe.op);
    let plen = wqe.payload.len();
    if !wqe.op.wr_opcode().allowed_on(qp_type) {
        return Err(QpError::InvalidWr(match qp_type {
            QpType::Rc => "opcode not supported on RC",
            QpType::Uc => "opcode not supported on UC",
            QpType::Ud => "opcode not supported on UD",
            QpType::XrcSend => "opcode not supported on XRC_SEND",
            QpType::XrcRecv => "an XRC_RECV QP has no send queue",
        }));
    }
    match qp_type {
        QpType::Rc | QpType::Uc | QpType::XrcRecv => {}
        QpType::XrcSend => {
            if wqe.xrc_srqn.is_none_or(|n| n > 0xFF_FFFF) {
                return Err(QpError::InvalidWr(
                    "XRC send without a 24-bit remote SRQ number",
                ));
            }
        }
        QpType::Ud => {
            if wqe.ud.is_none() {
                return Err(QpError::InvalidWr("UD send without a destination"));
            }
            if plen > ud_max as u64 {
                return Err(QpError::InvalidWr("UD message larger than the MTU"));
            }
        }
    }
    let sges_only = matches!(wqe.payload, Payload::Sges(_));
    let len = match kind {
        WrKind::Send | WrKind::Write | WrKind::Read => plen,
        WrKind::Atomic => {
            if !sges_only || plen != 8 {
                return Err(QpError::InvalidWr("atomic needs an 8-byte local buffer"));
            }
            8
        }
        WrKind::AtomicWrite => {
            if plen != 8 {
                return Err(QpError::InvalidWr("ATOMIC WRITE carries exactly 8 bytes"));
            }
            8
        }
        WrKind::Flush => match wqe.op {
            SendOp::Flush { len, .. } => u64::from(len),
            _ => 0,
        },
        // LOCAL_INV and BIND_MW move no data.
        WrKind::LocalOp => 0,
        // No SendOp has this kind (refused above in any case).
        WrKind::Other => return Err(QpError::InvalidWr("opcode not supported")),
    };
    if kind == WrKind::Read && !sges_only {
        return Err(QpError::InvalidWr("READ needs a scatter list"));
    }
    if len > MAX_MSG_SIZE {
        return Err(QpError::InvalidWr("message too long"));
    }
    Ok((kind, len))
}

/// One posted send WQE and its progress.
#[derive(Debug)]
pub(crate) struct SqEntry {
    pub wqe: SendWqe,
    pub kind: WrKind,
    pub len: u64,
    /// Packets (or, for READ, response packets) the message spans; set
    /// when first sent.
    pub npkts: u32,
    pub started: bool,
    pub first_psn: Psn,
    pub signaled: bool,
    /// Holds an initiator-depth slot.
    pub holds_rd: bool,
    /// Answered completely (ACKed, or all response data placed).
    pub done: bool,
    /// Error status to report instead of success or flush.
    pub error: Option<WcStatus>,
    /// Response packets placed (READ, atomics).
    pub rcvd_pkts: u32,
    pub gather: SgCursor,
    pub scatter: SgCursor,
}

impl SqEntry {
    pub(crate) fn new(wqe: SendWqe, kind: WrKind, len: u64, sig_all: bool) -> SqEntry {
        let signaled = sig_all || wqe.flags & send_flags::SIGNALED != 0;
        SqEntry {
            wqe,
            kind,
            len,
            npkts: 1,
            started: false,
            first_psn: Psn::new(0),
            signaled,
            holds_rd: false,
            done: false,
            error: None,
            rcvd_pkts: 0,
            gather: SgCursor::default(),
            scatter: SgCursor::default(),
        }
    }

    /// The message takes a receive WQE at the responder (SEND, or WRITE
    /// with immediate): it needs an end-to-end credit.
    pub(crate) fn takes_recv(&self) -> bool {
        matches!(
            self.wqe.op,
            SendOp::Send
                | SendOp::SendImm { .. }
                | SendOp::SendInv { .. }
                | SendOp::WriteImm { .. }
        )
    }

    pub(crate) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }

    /// The PSN after the message.
    pub(crate) fn end_psn(&self) -> Psn {
        self.first_psn.add(self.npkts)
    }

    /// Packets a message of `len` bytes needs at `pmtu` (at least one).
    pub(crate) fn packets_for(kind: WrKind, len: u64, pmtu: usize) -> u32 {
        match kind {
            WrKind::Send | WrKind::Write | WrKind::Read => {
                len.div_ceil(pmtu as u64).clamp(1, u64::from(u32::MAX)) as u32
            }
            _ => 1,
        }
    }

    pub(crate) fn completion(&self, status: WcStatus, qpn: u32) -> Completion {
        let mut c = Completion::new(
            CqSide::Send,
            self.wqe.wr_id,
            status,
            wc_opcode(&self.wqe.op),
            qpn,
        );
        c.byte_len = self.len.min(u64::from(u32::MAX)) as u32;
        // rxe flags a successful SEND/WRITE WITH_IMM's own completion too.
        let imm = self
            .wqe
            .op
            .wr_opcode()
            .info()
            .is_some_and(|i| i.has(wr_flags::IMM));
        if status == WcStatus::Success && imm {
            c.wc_flags = wc_flags::WITH_IMM;
        }
        c
    }
}

/// Send queue state shared by requester and completer.
#[derive(Debug, Default)]
pub(crate) struct SendQueue {
    pub entries: VecDeque<SqEntry>,
    /// Requester: WQE the next packet belongs to (== len: none).
    pub cur_idx: usize,
    /// Requester: PSN of the next packet.
    pub cur_psn: Psn,
    /// RC: one past the highest PSN ever sent (responses beyond are bogus).
    pub sent_high: Psn,
    /// RC: packets sent since the last one with AckReq.
    pub since_ack_req: u32,
    /// RC: READ/atomic WQEs sent and not yet answered.
    pub rd_outstanding: u32,
    /// Completer: first PSN not yet acknowledged or answered.
    pub comp_psn: Psn,
    /// Retries left before RETRY_EXC_ERR / RNR_RETRY_EXC_ERR.
    pub retries_left: u8,
    pub rnr_left: u8,
    /// A go-back-N pass is under way: it restarted at this PSN and
    /// resends up to `retry_end`. A NAK or gap for a PSN the pass has
    /// already resent does not start another one (only the timer does):
    /// such a NAK comes from packets sent before the go-back, still
    /// queued ahead of the resent ones.
    pub retry_guard: Option<Psn>,
    /// One past the highest PSN sent when the pass started.
    pub retry_end: Psn,
    /// Unacknowledged PSNs allowed now, below the tuning's window: one
    /// after a local ACK timeout, doubling with each ACK that makes
    /// progress (slow start). A peer too slow for the timer is probed with
    /// one packet instead of a window it cannot take either.
    pub cwnd: u32,
    pub ack_deadline: Option<Instant>,
    /// Waiting out an RNR NAK: nothing is sent until then.
    pub rnr_deadline: Option<Instant>,
    /// End-to-end credits (IBA 9.7.7.2) from the newest ACK that gave
    /// any: receive WQEs the responder holds for messages after that ACK.
    /// None: the responder promises nothing (credit code 31, as kernel
    /// rxe always sends, or an SRQ behind it), and SENDs are not limited.
    pub credits: Option<u32>,
    /// PSN of the ACK that gave `credits` (an older ACK's count is stale).
    pub credit_psn: Psn,
    /// The responder has raised our credits with a repeated ACK (an
    /// unsolicited update): with none left, it is worth waiting for the
    /// next one before sending beyond them.
    pub peer_updates: bool,
    /// Out of credits, with a responder that sends updates: when one
    /// message may go beyond them anyway.
    pub probe_deadline: Option<Instant>,
    /// The probe deadline passed: one message may go beyond the credits.
    pub probe_ok: bool,
}

impl SendQueue {
    /// Forgets all WQEs and starts PSNs at `psn`.
    pub(crate) fn reset(&mut self, psn: Psn) {
        self.entries.clear();
        self.set_psn(psn);
    }

    /// Starts PSNs at `psn` (`sq_psn`).
    pub(crate) fn set_psn(&mut self, psn: Psn) {
        self.cur_idx = 0;
        self.cur_psn = psn;
        self.sent_high = psn;
        self.comp_psn = psn;
        self.since_ack_req = 0;
        self.rd_outstanding = 0;
        self.retry_guard = None;
        self.cwnd = u32::MAX;
        self.ack_deadline = None;
        self.rnr_deadline = None;
        self.credits = None;
        self.peer_updates = false;
        self.probe_deadline = None;
        self.probe_ok = false;
        for e in &mut self.entries {
            e.started = false;
            e.holds_rd = false;
        }
    }

    /// Sent PSNs not yet acknowledged or answered.
    pub(crate) fn outstanding(&self) -> bool {
        self.comp_psn != self.sent_high
    }

    /// True when `psn` lies in `[comp_psn, sent_high)`.
    pub(crate) fn in_flight(&self, psn: Psn) -> bool {
        psn.distance_from(self.comp_psn) < self.sent_high.distance_from(self.comp_psn)
    }

    /// Points the requester at `psn`: the WQE whose PSNs contain it, or
    /// the first WQE not yet sent. O(WQEs in flight); used on retries.
    pub(crate) fn seek(&mut self, psn: Psn) {
        for (i, e) in self.entries.iter().enumerate() {
            if !e.started {
                self.cur_idx = i;
                self.cur_psn = psn;
                return;
            }
            if !e.done && psn.in_range(e.first_psn, e.last_psn()) {
                self.cur_idx = i;
                self.cur_psn = psn;
                return;
            }
        }
        self.cur_idx = self.entries.len();
        self.cur_psn = psn;
    }

    /// The requester never sends below the completer's position: after
    /// ACKs overtook a retry, jump forward.
    pub(crate) fn fix_cursor(&mut self) {
        if self.cur_psn.is_before(self.comp_psn) {
            self.seek(self.comp_psn);
        }
    }

    /// Whether the go-back-N pass under way has already resent `psn`.
    pub(crate) fn resent_in_pass(&self, psn: Psn) -> bool {
        let Some(r) = self.retry_guard else {
            return false;
        };
        let d = psn.distance_from(r);
        psn == r || (d < self.cur_psn.distance_from(r) && d < self.retry_end.distance_from(r))
    }

    /// The pass is over once everything it resent is acknowledged.
    pub(crate) fn end_pass_if_done(&mut self) {
        if self.retry_guard.is_some() && !self.comp_psn.is_before(self.retry_end) {
            self.retry_guard = None;
        }
    }

    /// Moves the requester past WQEs already done: local operations
    /// behind a WQE that a retry is sending again.
    pub(crate) fn skip_done(&mut self) {
        while self.entries.get(self.cur_idx).is_some_and(|e| e.done) {
            self.cur_idx += 1;
        }
    }

    /// Index of the oldest WQE not yet answered.
    pub(crate) fn front_pending(&self) -> Option<usize> {
        self.entries.iter().position(|e| !e.done)
    }
}
