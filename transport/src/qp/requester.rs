//! Requester: turns send WQEs into request packets, written straight into
//! the caller's buffer (headers, then payload read from local memory into
//! place, pad, 4 bytes for the ICRC).
//!
//! Every packet is a pure function of (WQE, PSN): opcode position, offset
//! and length follow from `psn - first_psn`, so a go-back-N only moves the
//! cursor. RC limits the PSNs in flight (window), READ/atomic WQEs in
//! flight (initiator depth) and honours the fence; UC and UD complete a
//! WQE when its last packet is out.
//!
//! Local operations (LOCAL_INV, BIND_MW) send nothing: the requester runs
//! them against memory when it reaches them, in posting order, and they
//! complete in WQE order behind what was posted before them, as rxe's
//! requester does. A failed one completes with LOC_QP_OP_ERR (LOCAL_INV)
//! or MW_BIND_ERR (BIND_MW) and the QP goes to ERR.

use super::queue_pair::{Env, Qp};
use super::send_queue::SqEntry;
use super::sgl;
use super::types::*;
use crate::verbs::WrKind;
use crate::wire::{pad_for, AtomicEth, Deth, Feth, Headers, Opcode, Reth, Service, ICRC_LEN};
use crate::Psn;
use std::net::IpAddr;
use std::time::Instant;

/// Keeps the PSNs between the completer and the end of the newest
/// request well inside the 2^23 comparison window.
const MAX_PSN_SPAN: u32 = 1 << 22;

/// Position of a packet in its message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pos {
    First,
    Middle,
    Last,
    Only,
}

fn pos_of(k: u32, n: u32) -> Pos {
    match (k == 0, k + 1 >= n) {
        (true, true) => Pos::Only,
        (true, false) => Pos::First,
        (false, true) => Pos::Last,
        (false, false) => Pos::Middle,
    }
}

/// RC opcode of a SEND/WRITE packet (UC adds 0x20).
fn send_write_opcode(op: &SendOp, pos: Pos) -> Opcode {
    match (op, pos) {
        (SendOp::Write { .. } | SendOp::WriteImm { .. }, Pos::First) => Opcode::RC_WRITE_FIRST,
        (SendOp::Write { .. } | SendOp::WriteImm { .. }, Pos::Middle) => Opcode::RC_WRITE_MIDDLE,
        (SendOp::Write { .. }, Pos::Last) => Opcode::RC_WRITE_LAST,
        (SendOp::Write { .. }, Pos::Only) => Opcode::RC_WRITE_ONLY,
        (SendOp::WriteImm { .. }, Pos::Last) => Opcode::RC_WRITE_LAST_IMM,
        (SendOp::WriteImm { .. }, Pos::Only) => Opcode::RC_WRITE_ONLY_IMM,
        (_, Pos::First) => Opcode::RC_SEND_FIRST,
        (_, Pos::Middle) => Opcode::RC_SEND_MIDDLE,
        (SendOp::SendImm { .. }, Pos::Last) => Opcode::RC_SEND_LAST_IMM,
        (SendOp::SendImm { .. }, Pos::Only) => Opcode::RC_SEND_ONLY_IMM,
        (SendOp::SendInv { .. }, Pos::Last) => Opcode::RC_SEND_LAST_INV,
        (SendOp::SendInv { .. }, Pos::Only) => Opcode::RC_SEND_ONLY_INV,
        (_, Pos::Last) => Opcode::RC_SEND_LAST,
        (_, Pos::Only) => Opcode::RC_SEND_ONLY,
    }
}

impl Qp {
    /// Payload bytes per packet: the path MTU, or for UD (one packet per
    /// message, checked at post time) the port MTU.
    fn seg_mtu(&self) -> usize {
        match self.cfg.qp_type {
            QpType::Ud => self.tuning.port_mtu.bytes(),
            _ => self.attr.pmtu(),
        }
    }

    /// Unacknowledged PSNs the RC requester may have now.
    pub(crate) fn window(&self) -> u32 {
        self.tuning.max_unacked_psns.min(self.sq.cwnd).max(1)
    }

    /// Whether the requester has a packet it may send now.
    pub(crate) fn requester_ready(&self) -> bool {
        if self.sq.rnr_deadline.is_some() {
            return false;
        }
        let Some(e) = self.sq.entries.get(self.sq.cur_idx) else {
            return false;
        };
        if !e.started && self.state != super::types::QpState::Rts {
            // SQD / SQE: finish what was started, start nothing new.
            return false;
        }
        if e.kind == WrKind::LocalOp {
            return e.wqe.flags & send_flags::FENCE == 0 || self.sq.rd_outstanding == 0;
        }
        if !self.cfg.qp_type.is_reliable() {
            return true;
        }
        let sq = &self.sq;
        let ahead = sq.cur_psn.distance_from(sq.comp_psn);
        if ahead >= self.window() {
            return false;
        }
        if e.started {
            return true;
        }
        if e.wqe.flags & send_flags::FENCE != 0 && sq.rd_outstanding > 0 {
            return false;
        }
        // max_rd_atomic 0 is treated as 1: the peer refuses what it must.
        let depth = u32::from(self.attr.max_rd_atomic.max(1));
        if e.kind.is_rd_atomic() && sq.rd_outstanding >= depth {
            return false;
        }
        if e.takes_recv() && !self.has_credit() {
            return false;
        }
        let span = ahead + SqEntry::packets_for(e.kind, e.len, self.seg_mtu());
        ahead == 0 || span <= MAX_PSN_SPAN
    }

    /// Whether a new message that takes a receive WQE may start: fewer
    /// such messages unacknowledged than the responder's credits, or one
    /// beyond them (the IBA lets a requester send one message past its
    /// limit so the responder can answer with new credits; rdmavt does
    /// the same). Against a responder known to send unsolicited credit
    /// updates, the one beyond waits (`Qp::credit_wait`) for
    /// such an update first, so that a receive queue the application is
    /// about to refill does not cost an RNR NAK and its timer. Messages
    /// already started (resends) need no credit.
    fn has_credit(&self) -> bool {
        let Some(credits) = self.sq.credits else {
            return true;
        };
        let out = self.receive_msgs_out();
        out < credits || out == credits && (self.sq.probe_ok || !self.sq.peer_updates)
    }

    /// Credits not yet used by unacknowledged messages that take a
    /// receive WQE; None when the responder promised nothing.
    fn credits_left(&self) -> Option<u32> {
        let credits = self.sq.credits?;
        Some(credits.saturating_sub(self.receive_msgs_out()))
    }

    /// Messages sent, not yet acknowledged, that take a receive WQE.
    pub(crate) fn receive_msgs_out(&self) -> u32 {
        let n = self
            .sq
            .entries
            .iter()
            .take_while(|e| e.started)
            .filter(|e| !e.done && e.takes_recv())
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Builds the next request packet, if the requester may send one.
    pub(crate) fn poll_request(
        &mut self,
        now: Instant,
        env: &mut Env<'_>,
        buf: &mut [u8],
    ) -> Option<(usize, IpAddr)> {
        while self.requester_ready() && self.sq.entries[self.sq.cur_idx].kind == WrKind::LocalOp {
            if !self.run_local_op(env) {
                return None;
            }
        }
        if !self.requester_ready() {
            return None;
        }
        let pmtu = self.seg_mtu();
        let idx = self.sq.cur_idx;
        let psn = self.sq.cur_psn;
        if !self.sq.entries[idx].started
            && self.sq.entries[idx].takes_recv()
            && self.credits_left() == Some(0)
        {
            // The one message the IBA lets go without credit.
            self.sq.probe_ok = false;
            self.counters.credit_probes += 1;
        }
        {
            let e = &mut self.sq.entries[idx];
            if !e.started {
                e.started = true;
                e.first_psn = psn;
                e.npkts = SqEntry::packets_for(e.kind, e.len, pmtu);
                e.rcvd_pkts = 0;
                if self.cfg.qp_type.is_reliable() && e.kind.is_rd_atomic() && !e.holds_rd {
                    e.holds_rd = true;
                    self.sq.rd_outstanding += 1;
                }
            }
        }
        let built = self.build_request(idx, psn, env, buf);
        let (len, dst, last) = match built {
            Ok(v) => v,
            Err(_) => {
                // Local data unreadable: the WQE fails, the QP goes to ERR.
                self.sq.entries[idx].error = Some(WcStatus::LocProtErr);
                self.enter_error(true);
                return None;
            }
        };
        let e = &self.sq.entries[idx];
        let next = if e.kind == WrKind::Read {
            e.end_psn()
        } else {
            psn.next()
        };
        self.sq.cur_psn = next;
        if last {
            self.sq.cur_idx += 1;
            self.sq.skip_done();
        }
        match self.cfg.qp_type {
            QpType::Rc | QpType::XrcSend | QpType::XrcRecv => {
                if psn.is_before(self.sq.sent_high) {
                    self.counters.retransmitted_pkts += 1;
                } else {
                    self.sq.sent_high = next;
                }
                if self.sq.ack_deadline.is_none() {
                    self.sq.ack_deadline = self.attr.ack_timeout().map(|t| now + t);
                }
            }
            QpType::Uc | QpType::Ud => {
                self.sq.sent_high = next;
                self.sq.comp_psn = next;
                if last {
                    // Unreliable: done once on the wire.
                    self.sq.cur_idx = 0;
                    if let Some(e) = self.sq.entries.pop_front() {
                        if e.signaled {
                            self.cq
                                .push_back(e.completion(WcStatus::Success, self.cfg.qpn));
                        }
                    }
                }
            }
        }
        Some((len, dst))
    }

    /// Runs the local operation at the requester's cursor; false when it
    /// failed (the QP is then in ERR).
    fn run_local_op(&mut self, env: &mut Env<'_>) -> bool {
        let (pd, qpn) = (self.cfg.pd, self.cfg.qpn);
        let idx = self.sq.cur_idx;
        let e = &mut self.sq.entries[idx];
        let r = match e.wqe.op {
            SendOp::LocalInv { rkey } => env
                .mem
                .invalidate(pd, qpn, rkey)
                .map_err(|_| WcStatus::LocQpOpErr),
            SendOp::BindMw(b) => env
                .mem
                .bind_mw(pd, qpn, &b)
                .map_err(|_| WcStatus::MwBindErr),
            // The kind is derived from the op: no other op is local.
            _ => Err(WcStatus::LocQpOpErr),
        };
        e.started = true;
        e.first_psn = self.sq.cur_psn;
        e.npkts = 0;
        if let Err(status) = r {
            e.error = Some(status);
            self.enter_error(true);
            return false;
        }
        e.done = true;
        self.sq.cur_idx += 1;
        self.sq.skip_done();
        self.complete_front();
        true
    }

    /// Writes the packet for PSN `psn` of WQE `idx`; returns its length,
    /// destination and whether it ends the WQE.
    fn build_request(
        &mut self,
        idx: usize,
        psn: Psn,
        env: &mut Env<'_>,
        buf: &mut [u8],
    ) -> Result<(usize, IpAddr, bool), super::memory::MemError> {
        let pmtu = self.seg_mtu();
        let qp_type = self.cfg.qp_type;
        let pd = self.cfg.pd;
        let qkey = self.attr.qkey;
        let qpn = self.cfg.qpn;
        let window_end = self.sq.comp_psn.add(self.window());
        let interval = self.tuning.ack_req_interval;
        let mut dst = self.attr.dst();
        let e = &mut self.sq.entries[idx];
        let k = psn.distance_from(e.first_psn).min(e.npkts - 1);
        let offset = u64::from(k) * pmtu as u64;
        let mut hdr = Headers::default();
        hdr.bth.dest_qpn = self.attr.dest_qpn;
        hdr.bth.psn = psn;
        let (n, last) = match (e.kind, &e.wqe.op) {
            (WrKind::Send | WrKind::Write, op) => {
                let pos = pos_of(k, e.npkts);
                let n = (e.len - offset).min(pmtu as u64) as usize;
                let mut opc = send_write_opcode(op, pos);
                let end = matches!(pos, Pos::Last | Pos::Only);
                if matches!(pos, Pos::First | Pos::Only) {
                    if let SendOp::Write { remote_addr, rkey }
                    | SendOp::WriteImm {
                        remote_addr, rkey, ..
                    } = *op
                    {
                        hdr.reth = Some(Reth {
                            va: remote_addr,
                            rkey,
                            dma_len: e.len as u32,
                        });
                    }
                }
                if end {
                    match *op {
                        SendOp::SendImm { imm } | SendOp::WriteImm { imm, .. } => {
                            hdr.imm = Some(imm)
                        }
                        SendOp::SendInv { rkey } => hdr.ieth = Some(rkey),
                        _ => {}
                    }
                    hdr.bth.se = e.wqe.flags & send_flags::SOLICITED != 0
                        && matches!(
                            op,
                            SendOp::Send
                                | SendOp::SendImm { .. }
                                | SendOp::SendInv { .. }
                                | SendOp::WriteImm { .. }
                        );
                }
                match qp_type {
                    QpType::Uc => opc = Opcode(opc.0 + 0x20),
                    QpType::Ud => {
                        opc = if hdr.imm.is_some() {
                            Opcode::UD_SEND_ONLY_IMM
                        } else {
                            Opcode::UD_SEND_ONLY
                        };
                        // Checked at post time.
                        let ud = e.wqe.ud.unwrap_or(UdDest {
                            addr: dst,
                            qpn: 0,
                            qkey: 0,
                        });
                        let qk = if ud.qkey & 0x8000_0000 != 0 {
                            qkey
                        } else {
                            ud.qkey
                        };
                        hdr.deth = Some(Deth {
                            qkey: qk,
                            src_qpn: qpn,
                        });
                        hdr.bth.dest_qpn = ud.qpn;
                        dst = ud.addr;
                    }
                    QpType::Rc | QpType::XrcSend | QpType::XrcRecv => {}
                }
                hdr.bth.opcode = opc;
                (n, end)
            }
            (WrKind::Read, &SendOp::Read { remote_addr, rkey }) => {
                hdr.bth.opcode = Opcode::RC_READ_REQUEST;
                // A re-issued READ asks only for what has not arrived.
                hdr.reth = Some(Reth {
                    va: remote_addr.wrapping_add(offset),
                    rkey,
                    dma_len: (e.len - offset) as u32,
                });
                (0, true)
            }
            (WrKind::Atomic, op) => {
                let (va, rkey, swap_add, compare, opc) = match *op {
                    SendOp::CmpSwap {
                        remote_addr,
                        rkey,
                        compare,
                        swap,
                    } => (remote_addr, rkey, swap, compare, Opcode::RC_CMP_SWAP),
                    SendOp::FetchAdd {
                        remote_addr,
                        rkey,
                        add,
                    } => (remote_addr, rkey, add, 0, Opcode::RC_FETCH_ADD),
                    _ => (0, 0, 0, 0, Opcode::RC_FETCH_ADD),
                };
                hdr.bth.opcode = opc;
                hdr.atomic_eth = Some(AtomicEth {
                    va,
                    rkey,
                    swap_add,
                    compare,
                });
                (0, true)
            }
            (WrKind::AtomicWrite, &SendOp::AtomicWrite { remote_addr, rkey }) => {
                hdr.bth.opcode = Opcode::RC_ATOMIC_WRITE;
                hdr.reth = Some(Reth {
                    va: remote_addr,
                    rkey,
                    dma_len: 8,
                });
                (8, true)
            }
            (
                WrKind::Flush,
                &SendOp::Flush {
                    remote_addr,
                    rkey,
                    len,
                    plt,
                    sel,
                },
            ) => {
                hdr.bth.opcode = Opcode::RC_FLUSH;
                hdr.feth = Some(Feth { plt, sel });
                hdr.reth = Some(Reth {
                    va: remote_addr,
                    rkey,
                    dma_len: len,
                });
                (0, true)
            }
            // The kind is derived from the op: no other pairs exist.
            _ => return Err(super::memory::MemError::InvalidKey),
        };
        if qp_type == QpType::XrcSend {
            // XRC: RC's packet with the operation on the XRC service and
            // the target SRQ in an XRCETH (checked at post time).
            hdr.bth.opcode = hdr.bth.opcode.on_service(Service::Xrc);
            hdr.xrceth = Some(e.wqe.xrc_srqn.unwrap_or(0) & 0xFF_FFFF);
        }
        if qp_type.is_reliable() {
            let fills_window = psn.next() == window_end;
            let ack_req = last || fills_window || self.sq.since_ack_req + 1 >= interval;
            hdr.bth.ack_req = ack_req;
            self.sq.since_ack_req = if ack_req {
                0
            } else {
                self.sq.since_ack_req + 1
            };
        }
        hdr.bth.pad = pad_for(n);
        let hl = hdr
            .emit(buf)
            .map_err(|_| super::memory::MemError::OutOfBounds)?;
        let e = &mut self.sq.entries[idx];
        if n > 0 {
            sgl::gather(
                env.mem,
                pd,
                &e.wqe.payload,
                &mut e.gather,
                offset,
                &mut buf[hl..hl + n],
            )?;
        }
        let end = hl + n + usize::from(hdr.bth.pad);
        buf[hl + n..end + ICRC_LEN].fill(0);
        Ok((end + ICRC_LEN, dst, last))
    }
}
