//! Responder (RC and UC): checks incoming requests (PSN, opcode sequence,
//! lengths, access), executes them against memory, produces receive
//! completions and queues ACKs, NAKs and READ / atomic responses
//! (`responses.rs`). UD receive lives in `resp_ud.rs`.
//!
//! RC: a PSN ahead of the expected one is NAKed once (sequence error)
//! until the expected PSN arrives; a PSN behind it is a duplicate: SEND /
//! WRITE are re-ACKed with the last acknowledged PSN, READs re-read from
//! the PSN asked for, atomics answered from the saved result. Errors NAK
//! and put the QP into ERR. A message longer than the receive buffer is
//! NAKed "invalid request" (the IBA's choice; rxe 6.1 sends "remote
//! operational error") and completes with LOC_LEN_ERR.
//!
//! UC: nothing is ACKed; on a PSN gap the rest of the message is dropped
//! and the responder resyncs at the next FIRST/ONLY.
//!
//! Memory whose owner has exited ([`MemError::Gone`]) is no fault of the
//! request: the packet is dropped as if the QP were already destroyed
//! (which the owner's exit is about to do), never NAKed or completed.

use super::memory::MemError;
use super::queue_pair::{Env, Qp};
use super::resources::{ResKind, Resource};
use super::resp_state::{HeldRecv, InMsg, ReadStream, RespOut, WriteCtx};
use super::sgl;
use super::types::*;
use crate::wire::opcode::{flags, OpcodeInfo};
use crate::wire::{Aeth, NakCode, Opcode, Packet};
use crate::Psn;

/// RETH lengths above this are refused (as rxe does).
const MAX_DMA_LEN: u32 = 1 << 31;

/// How a request failed: NAK code to send (RC) and the status of the
/// receive WQE involved.
#[derive(Clone, Copy, Debug)]
struct Fail {
    nak: NakCode,
    status: WcStatus,
}

const INVALID: Fail = Fail {
    nak: NakCode::InvalidRequest,
    status: WcStatus::RemInvReqErr,
};
const ACCESS: Fail = Fail {
    nak: NakCode::RemoteAccess,
    status: WcStatus::RemAccessErr,
};
const LENGTH: Fail = Fail {
    nak: NakCode::InvalidRequest,
    status: WcStatus::LocLenErr,
};
const LOCAL_PROT: Fail = Fail {
    nak: NakCode::RemoteOperational,
    status: WcStatus::LocProtErr,
};

fn mem_fail(e: MemError) -> Fail {
    match e {
        MemError::Misaligned => INVALID,
        _ => ACCESS,
    }
}

/// A failed remote access: the request's fault, or the owner's exit.
fn mem_step(e: MemError) -> Step {
    match e {
        MemError::Gone => Step::Gone,
        e => Step::Fail(mem_fail(e)),
    }
}

/// What a request needs before it can run.
enum Step {
    Done,
    /// No receive WQE: RNR NAK (RC) or drop (UC).
    NoRecv,
    /// Too many responses queued: drop, the requester will retry.
    Busy,
    /// The memory's owner exited: drop, as a destroyed QP would.
    Gone,
    Fail(Fail),
}

impl Qp {
    pub(crate) fn handle_request(
        &mut self,
        pkt: &Packet<'_>,
        meta: &super::queue_pair::RxMeta,
        env: &mut Env<'_>,
    ) {
        match self.cfg.qp_type {
            QpType::Rc | QpType::XrcRecv => self.rc_request(pkt, env),
            QpType::Uc => self.uc_request(pkt, env),
            QpType::Ud => self.ud_request(pkt, meta, env),
            // An initiator has no responder (handle_packet keeps requests
            // away from it).
            QpType::XrcSend => self.counters.dropped_pkts += 1,
        }
    }

    fn rc_request(&mut self, pkt: &Packet<'_>, env: &mut Env<'_>) {
        let Some(info) = pkt.opcode().info() else {
            return;
        };
        let psn = pkt.hdr.bth.psn;
        let d = psn.diff(self.resp.epsn);
        if d > 0 {
            self.counters.out_of_seq_request += 1;
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                let epsn = self.resp.epsn;
                self.push_ack(epsn, Aeth::nak(NakCode::PsnSequence, self.resp.msn));
            }
            return;
        }
        // An XRC target works in the PD of the SRQ the request names; a
        // request naming no XRC SRQ of its domain is invalid (a duplicate
        // of one is dropped).
        let xrc_ok = self.select_xrc_srq(env);
        if d < 0 {
            self.counters.duplicate_request += 1;
            if xrc_ok {
                self.rc_duplicate(pkt, info);
            } else {
                self.counters.dropped_pkts += 1;
            }
            return;
        }
        self.resp.nak_sent = false;
        if !xrc_ok {
            self.rc_fail(psn, INVALID);
            return;
        }
        if let Err(f) = self.check_sequence(pkt, info) {
            self.rc_fail(psn, f);
            return;
        }
        match self.execute(pkt, info, env) {
            Step::Done => {
                if pkt.hdr.bth.ack_req && (info.has(flags::SEND) || info.has(flags::WRITE)) {
                    self.push_ack(psn, Aeth::ack(Aeth::CREDIT_INVALID, self.resp.msn));
                }
            }
            Step::NoRecv => {
                self.counters.send_rnr_err += 1;
                let aeth = Aeth::rnr_nak(self.attr.min_rnr_timer, self.resp.msn);
                self.push_ack(psn, aeth);
                // The RNR NAK is this PSN's one NAK: the rest of the
                // message in flight is dropped without a sequence NAK
                // (the requester resends from here after its RNR timer
                // anyway). Kernel 6.1 rxe, given both, later resent a
                // multi-packet SEND as a zero-length SEND ONLY with every
                // PSN after it shifted by one.
                self.resp.nak_sent = true;
            }
            Step::Busy | Step::Gone => self.counters.dropped_pkts += 1,
            Step::Fail(f) => self.rc_fail(psn, f),
        }
    }

    /// XRC target: takes the PD of the XRC SRQ the packet names (false
    /// when it names none of the QP's domain). Other QPs: always true.
    fn select_xrc_srq(&mut self, env: &Env<'_>) -> bool {
        if self.cfg.qp_type != QpType::XrcRecv {
            return true;
        }
        match env.xrc {
            Some(x) => {
                self.resp.pd = x.pd;
                true
            }
            None => false,
        }
    }

    /// Fatal responder error: the receive WQE in use completes with the
    /// error, the QP goes to ERR, and the requester gets a NAK.
    fn rc_fail(&mut self, psn: Psn, f: Fail) {
        self.fail_held(f.status);
        self.enter_error(true);
        let aeth = Aeth::nak(f.nak, self.resp.msn);
        self.resp.out.push_back(RespOut::Ack { psn, aeth });
    }

    fn fail_held(&mut self, status: WcStatus) {
        if let Some(h) = self.resp.held.take() {
            self.cq.push_back(h.completion(status, self.cfg.qpn));
        }
    }

    /// Opcode order within a message and the per-packet length rules:
    /// FIRST/MIDDLE exactly one PMTU, LAST 1..=PMTU, ONLY 0..=PMTU.
    fn check_sequence(&self, pkt: &Packet<'_>, info: OpcodeInfo) -> Result<(), Fail> {
        let cont = info.has(flags::MIDDLE) || info.has(flags::LAST);
        let kind = if info.has(flags::SEND) {
            Some(InMsg::Send)
        } else if info.has(flags::WRITE) {
            Some(InMsg::Write)
        } else {
            None
        };
        match (self.resp.in_msg, cont) {
            (None, true) => return Err(INVALID),
            (Some(_), false) => return Err(INVALID),
            (Some(m), true) if Some(m) != kind => return Err(INVALID),
            _ => {}
        }
        let n = pkt.payload.len();
        let pmtu = self.attr.pmtu();
        let ok = if info.has(flags::FIRST) || info.has(flags::MIDDLE) {
            n == pmtu
        } else if info.has(flags::LAST) {
            (1..=pmtu).contains(&n)
        } else if info.has(flags::ATOMIC_WRITE) {
            n == 8
        } else {
            n <= pmtu
        };
        if ok {
            Ok(())
        } else {
            Err(INVALID)
        }
    }

    /// Runs an in-sequence request; on success the expected PSN moves on.
    fn execute(&mut self, pkt: &Packet<'_>, info: OpcodeInfo, env: &mut Env<'_>) -> Step {
        let psn = pkt.hdr.bth.psn;
        let step = if info.has(flags::SEND) {
            self.exec_send(pkt, info, env)
        } else if info.has(flags::WRITE) {
            self.exec_write(pkt, info, env)
        } else if !self.cfg.qp_type.is_reliable() {
            Step::Fail(INVALID)
        } else if self.resp.res.capacity() == 0 {
            // max_dest_rd_atomic 0: READ and atomics are not accepted.
            Step::Fail(INVALID)
        } else if self.resp.out.len() >= self.tuning.max_pending_responses {
            Step::Busy
        } else if info.has(flags::READ) {
            self.exec_read(pkt, env)
        } else if info.has(flags::ATOMIC) {
            self.exec_atomic(pkt, env)
        } else if info.has(flags::ATOMIC_WRITE) {
            self.exec_atomic_write(pkt, env)
        } else if info.has(flags::FLUSH) {
            self.exec_flush(pkt, env)
        } else {
            Step::Fail(INVALID)
        };
        if let Step::Done = step {
            if !info.has(flags::READ) {
                self.resp.epsn = psn.next();
            }
        }
        step
    }

    /// Takes a receive WQE from the RQ or the SRQ, unless one is held.
    fn take_recv(&mut self, env: &mut Env<'_>) -> bool {
        if self.resp.held.is_some() {
            return true;
        }
        let from_srq = self.cfg.srq.is_some() || self.cfg.qp_type == QpType::XrcRecv;
        let w = if from_srq {
            env.srq.as_deref_mut().and_then(|s| s.pop())
        } else {
            self.rq.pop_front()
        };
        match w {
            Some(w) => {
                let mut h = HeldRecv::new(w);
                h.xrc_srq = env.xrc.map(|x| x.srqn);
                self.resp.held = Some(h);
                true
            }
            None => false,
        }
    }

    fn exec_send(&mut self, pkt: &Packet<'_>, info: OpcodeInfo, env: &mut Env<'_>) -> Step {
        let start = info.has(flags::FIRST) || info.has(flags::ONLY);
        let end = info.has(flags::LAST) || info.has(flags::ONLY);
        if start {
            if !self.take_recv(env) {
                return Step::NoRecv;
            }
            if let Some(h) = self.resp.held.as_mut() {
                h.written = 0;
            }
        }
        let Some(h) = self.resp.held.as_mut() else {
            return Step::Fail(INVALID);
        };
        let n = pkt.payload.len() as u64;
        if h.written + n > h.cap {
            return Step::Fail(LENGTH);
        }
        if n > 0 {
            let r = sgl::scatter(
                env.mem,
                self.resp.pd,
                &h.wqe.sges,
                &mut h.cur,
                h.written,
                pkt.payload,
            );
            match r {
                Ok(()) => {}
                Err(MemError::Gone) => return Step::Gone,
                Err(_) => return Step::Fail(LOCAL_PROT),
            }
        }
        h.written += n;
        if !end {
            self.resp.in_msg = Some(InMsg::Send);
            return Step::Done;
        }
        let mut c = h.completion(WcStatus::Success, self.cfg.qpn);
        c.byte_len = h.written as u32;
        c.solicited = pkt.hdr.bth.se;
        if let Some(imm) = pkt.hdr.imm {
            c.wc_flags |= wc_flags::WITH_IMM;
            c.imm = imm;
        }
        if let Some(rkey) = pkt.hdr.ieth {
            if env
                .mem
                .invalidate(self.resp.pd, self.cfg.qpn, rkey)
                .is_err()
            {
                return Step::Fail(INVALID);
            }
            c.wc_flags |= wc_flags::WITH_INV;
            c.invalidated_rkey = rkey;
        }
        self.resp.held = None;
        self.cq.push_back(c);
        self.resp.in_msg = None;
        self.resp.bump_msn();
        Step::Done
    }

    fn exec_write(&mut self, pkt: &Packet<'_>, info: OpcodeInfo, env: &mut Env<'_>) -> Step {
        let end = info.has(flags::LAST) || info.has(flags::ONLY);
        let n = pkt.payload.len() as u64;
        let mut w = self.resp.write;
        if let Some(reth) = pkt.hdr.reth {
            if self.attr.access & access::REMOTE_WRITE == 0 || reth.dma_len > MAX_DMA_LEN {
                return Step::Fail(INVALID);
            }
            w = WriteCtx {
                va: reth.va,
                rkey: reth.rkey,
                total: u64::from(reth.dma_len),
                done: 0,
            };
            // A zero-byte WRITE needs no valid address or key.
            if w.total > 0 {
                if let Err(e) = env.mem.check_remote(
                    self.resp.pd,
                    self.cfg.qpn,
                    w.rkey,
                    w.va,
                    w.total,
                    access::REMOTE_WRITE,
                ) {
                    return mem_step(e);
                }
            }
        }
        if w.done + n > w.total || (end && w.done + n != w.total) {
            return Step::Fail(INVALID);
        }
        // WRITE with immediate consumes a receive WQE at its last packet;
        // take it before touching memory so an RNR retry is clean.
        if end && pkt.hdr.imm.is_some() && !self.take_recv(env) {
            return Step::NoRecv;
        }
        if n > 0 {
            let va = w.va.wrapping_add(w.done);
            if let Err(e) =
                env.mem
                    .write_remote(self.resp.pd, self.cfg.qpn, w.rkey, va, pkt.payload)
            {
                return mem_step(e);
            }
        }
        w.done += n;
        self.resp.write = w;
        if !end {
            self.resp.in_msg = Some(InMsg::Write);
            return Step::Done;
        }
        self.resp.in_msg = None;
        self.resp.bump_msn();
        if let Some(imm) = pkt.hdr.imm {
            if let Some(h) = self.resp.held.take() {
                let mut c = h.completion(WcStatus::Success, self.cfg.qpn);
                c.opcode = WcOpcode::RecvRdmaWithImm;
                c.byte_len = w.total as u32;
                c.solicited = pkt.hdr.bth.se;
                c.wc_flags |= wc_flags::WITH_IMM;
                c.imm = imm;
                self.cq.push_back(c);
            }
        }
        Step::Done
    }

    fn exec_read(&mut self, pkt: &Packet<'_>, env: &mut Env<'_>) -> Step {
        let Some(reth) = pkt.hdr.reth else {
            return Step::Fail(INVALID);
        };
        if self.attr.access & access::REMOTE_READ == 0 || reth.dma_len > MAX_DMA_LEN {
            return Step::Fail(INVALID);
        }
        let len = u64::from(reth.dma_len);
        if len > 0 {
            if let Err(e) = env.mem.check_remote(
                self.resp.pd,
                self.cfg.qpn,
                reth.rkey,
                reth.va,
                len,
                access::REMOTE_READ,
            ) {
                return mem_step(e);
            }
        }
        let psn = pkt.hdr.bth.psn;
        let npkts = len.div_ceil(self.attr.pmtu() as u64).max(1) as u32;
        let last = psn.add(npkts - 1);
        self.resp.res.insert(Resource {
            kind: ResKind::Read {
                va: reth.va,
                rkey: reth.rkey,
                len,
            },
            first_psn: psn,
            last_psn: last,
        });
        // C9-148: a READ counts as a message once accepted.
        self.resp.bump_msn();
        self.resp.out.push_back(RespOut::Read(ReadStream::new(
            psn,
            reth.va,
            reth.rkey,
            self.resp.pd,
            len,
        )));
        self.resp.epsn = last.next();
        Step::Done
    }

    fn exec_atomic(&mut self, pkt: &Packet<'_>, env: &mut Env<'_>) -> Step {
        let Some(a) = pkt.hdr.atomic_eth else {
            return Step::Fail(INVALID);
        };
        if self.attr.access & access::REMOTE_ATOMIC == 0 || a.va % 8 != 0 {
            return Step::Fail(INVALID);
        }
        let op = if pkt.opcode() == Opcode::RC_CMP_SWAP {
            super::memory::AtomicOp::CmpSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            super::memory::AtomicOp::FetchAdd { add: a.swap_add }
        };
        let orig = match env
            .mem
            .atomic_remote(self.resp.pd, self.cfg.qpn, a.rkey, a.va, op)
        {
            Ok(v) => v,
            Err(e) => return mem_step(e),
        };
        let psn = pkt.hdr.bth.psn;
        self.resp.res.insert(Resource {
            kind: ResKind::Atomic { orig },
            first_psn: psn,
            last_psn: psn,
        });
        self.resp.bump_msn();
        self.resp.out.push_back(RespOut::AtomicAck { psn, orig });
        Step::Done
    }

    fn exec_atomic_write(&mut self, pkt: &Packet<'_>, env: &mut Env<'_>) -> Step {
        let Some(reth) = pkt.hdr.reth else {
            return Step::Fail(INVALID);
        };
        if self.attr.access & access::REMOTE_WRITE == 0 || reth.va % 8 != 0 {
            return Step::Fail(INVALID);
        }
        let mut b = [0u8; 8];
        if pkt.payload.len() != 8 {
            return Step::Fail(INVALID);
        }
        b.copy_from_slice(pkt.payload);
        // The 8 bytes are stored as they came (memory order).
        let op = super::memory::AtomicOp::Write {
            value: u64::from_ne_bytes(b),
        };
        if let Err(e) = env
            .mem
            .atomic_remote(self.resp.pd, self.cfg.qpn, reth.rkey, reth.va, op)
        {
            return mem_step(e);
        }
        let psn = pkt.hdr.bth.psn;
        self.resp.res.insert(Resource {
            kind: ResKind::AtomicWrite,
            first_psn: psn,
            last_psn: psn,
        });
        self.resp.bump_msn();
        self.resp.out.push_back(RespOut::Empty { psn });
        Step::Done
    }

    fn exec_flush(&mut self, pkt: &Packet<'_>, env: &mut Env<'_>) -> Step {
        let (Some(feth), Some(reth)) = (pkt.hdr.feth, pkt.hdr.reth) else {
            return Step::Fail(INVALID);
        };
        // Placement type: bit 0 global visibility, bit 1 persistence.
        let mut need = 0;
        if feth.plt & 1 != 0 {
            need |= access::FLUSH_GLOBAL;
        }
        if feth.plt & 2 != 0 {
            need |= access::FLUSH_PERSISTENT;
        }
        if need == 0 || feth.sel > 1 {
            return Step::Fail(INVALID);
        }
        let len = if feth.sel == 1 {
            0
        } else {
            u64::from(reth.dma_len)
        };
        match env
            .mem
            .check_remote(self.resp.pd, self.cfg.qpn, reth.rkey, reth.va, len, need)
        {
            Ok(()) => {}
            // Selectivity "whole region": the address does not matter.
            Err(MemError::OutOfBounds) if feth.sel == 1 => {}
            Err(e) => return mem_step(e),
        }
        // Memory here is coherent host memory: placement is immediate.
        let psn = pkt.hdr.bth.psn;
        self.resp.res.insert(Resource {
            kind: ResKind::Flush,
            first_psn: psn,
            last_psn: psn,
        });
        self.resp.bump_msn();
        self.resp.out.push_back(RespOut::Empty { psn });
        Step::Done
    }

    /// A request the responder has already executed.
    fn rc_duplicate(&mut self, pkt: &Packet<'_>, info: OpcodeInfo) {
        let psn = pkt.hdr.bth.psn;
        if info.has(flags::SEND) || info.has(flags::WRITE) {
            // C9-105: ACK again with the last PSN acknowledged.
            let last = self.resp.epsn.sub(1);
            self.push_ack(last, Aeth::ack(Aeth::CREDIT_INVALID, self.resp.msn));
            return;
        }
        if self.resp.out.len() >= self.tuning.max_pending_responses {
            self.counters.dropped_pkts += 1;
            return;
        }
        // A duplicate for a recycled (or never held) resource is dropped.
        let Some(r) = self.resp.res.find(psn) else {
            self.counters.dropped_pkts += 1;
            return;
        };
        let out = match (r.kind, pkt.hdr.reth) {
            (ResKind::Read { va, rkey, len }, Some(reth)) if info.has(flags::READ) => {
                let end = va.checked_add(len);
                let new_end = reth.va.checked_add(u64::from(reth.dma_len));
                let inside = reth.va >= va && new_end.is_some() && new_end <= end;
                if !inside || reth.rkey != rkey {
                    self.counters.dropped_pkts += 1;
                    return;
                }
                RespOut::Read(ReadStream::new(
                    psn,
                    reth.va,
                    rkey,
                    self.resp.pd,
                    u64::from(reth.dma_len),
                ))
            }
            (ResKind::Atomic { orig }, _) if info.has(flags::ATOMIC) && r.first_psn == psn => {
                RespOut::AtomicAck { psn, orig }
            }
            (ResKind::Flush, _) if info.has(flags::FLUSH) && r.first_psn == psn => {
                RespOut::Empty { psn }
            }
            (ResKind::AtomicWrite, _) if info.has(flags::ATOMIC_WRITE) && r.first_psn == psn => {
                RespOut::Empty { psn }
            }
            _ => {
                self.counters.dropped_pkts += 1;
                return;
            }
        };
        self.resp.out.push_back(out);
    }

    fn uc_request(&mut self, pkt: &Packet<'_>, env: &mut Env<'_>) {
        let Some(info) = pkt.opcode().info() else {
            return;
        };
        if !(info.has(flags::SEND) || info.has(flags::WRITE)) {
            self.counters.dropped_pkts += 1;
            return;
        }
        let psn = pkt.hdr.bth.psn;
        let start = info.has(flags::FIRST) || info.has(flags::ONLY);
        if psn.is_before(self.resp.epsn) {
            // UC PSNs only move forward, so a packet behind the expected PSN
            // is a duplicate of something already delivered (or dropped):
            // never deliver it twice, and leave the current message alone.
            self.counters.duplicate_request += 1;
            self.counters.dropped_pkts += 1;
            return;
        }
        if self.resp.uc_drop || psn != self.resp.epsn {
            if !start {
                // Lost packets: the rest of this message is gone.
                self.uc_drop_msg();
                return;
            }
            // Resync on the first packet of the next message.
            self.resp.uc_drop = false;
            self.resp.in_msg = None;
            self.resp.epsn = psn;
        }
        if self.check_sequence(pkt, info).is_err() {
            self.uc_drop_msg();
            return;
        }
        match self.execute(pkt, info, env) {
            Step::Done => {}
            Step::Fail(f) if f.status == WcStatus::LocProtErr => {
                // A receive WQE we cannot write: fatal even on UC.
                self.fail_held(f.status);
                self.enter_error(true);
            }
            // No WQE, bad length, bad key, owner gone: the message is
            // silently lost; a held WQE stays for the next message.
            _ => self.uc_drop_msg(),
        }
    }

    fn uc_drop_msg(&mut self) {
        self.counters.dropped_pkts += 1;
        self.resp.uc_drop = true;
        self.resp.in_msg = None;
        if let Some(h) = self.resp.held.as_mut() {
            h.written = 0;
        }
    }
}
