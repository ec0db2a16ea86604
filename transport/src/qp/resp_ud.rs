//! UD receive: Q_Key check, one SEND ONLY per message, the 40-byte
//! network header area ahead of the payload, and the completion with the
//! sender's QPN, address and network header. Nothing is acknowledged; what cannot be
//! received is dropped and counted.

use super::grh;
use super::memory::MemError;
use super::queue_pair::{recv_completion, Env, Qp, RxMeta};
use super::resp_state::HeldRecv;
use super::sgl;
use super::types::*;
use crate::wire::{Opcode, Packet, ICRC_LEN};

impl Qp {
    pub(crate) fn ud_request(&mut self, pkt: &Packet<'_>, meta: &RxMeta, env: &mut Env<'_>) {
        let op = pkt.opcode();
        let Some(deth) = pkt.hdr.deth else {
            self.counters.dropped_pkts += 1;
            return;
        };
        if op != Opcode::UD_SEND_ONLY && op != Opcode::UD_SEND_ONLY_IMM {
            self.counters.dropped_pkts += 1;
            return;
        }
        if deth.qkey != self.attr.qkey {
            self.counters.qkey_violations += 1;
            self.counters.dropped_pkts += 1;
            return;
        }
        if !self
            .resp
            .ud_seen
            .accept(meta.src, deth.src_qpn, pkt.hdr.bth.psn)
        {
            self.counters.duplicate_request += 1;
            self.counters.dropped_pkts += 1;
            return;
        }
        let n = pkt.payload.len();
        if n > self.tuning.port_mtu.bytes() {
            self.counters.dropped_pkts += 1;
            return;
        }
        let need = (grh::GRH_LEN + n) as u64;
        let qpn = self.cfg.qpn;
        let wqe = match self.cfg.srq {
            None => {
                // Too small a buffer: the packet is dropped, the WQE stays.
                match self.rq.front() {
                    Some(w) if sgl::capacity(&w.sges) >= need => self.rq.pop_front(),
                    _ => None,
                }
            }
            Some(_) => match env.srq.as_deref_mut().and_then(|s| s.pop()) {
                // An SRQ WQE cannot be put back: it completes in error.
                Some(w) if sgl::capacity(&w.sges) < need => {
                    self.cq
                        .push_back(recv_completion(&w, WcStatus::LocLenErr, qpn));
                    None
                }
                w => w,
            },
        };
        let Some(wqe) = wqe else {
            self.counters.dropped_pkts += 1;
            return;
        };
        let mut h = HeldRecv::new(wqe);
        let udp_len = pkt.hdr.len() + n + usize::from(pkt.hdr.bth.pad) + ICRC_LEN;
        let ip = grh::ip_header(meta, udp_len);
        let g = grh::area(&ip);
        let pd = self.cfg.pd;
        let r = sgl::scatter(env.mem, pd, &h.wqe.sges, &mut h.cur, 0, &g).and_then(|()| {
            sgl::scatter(
                env.mem,
                pd,
                &h.wqe.sges,
                &mut h.cur,
                grh::GRH_LEN as u64,
                pkt.payload,
            )
        });
        match r {
            Ok(()) => {}
            Err(MemError::Gone) => {
                // The owner exited: drop, as its QP is about to be; the
                // WQE goes back (an SRQ's has the same owner).
                self.counters.dropped_pkts += 1;
                if self.cfg.srq.is_none() {
                    self.rq.push_front(h.wqe);
                }
                return;
            }
            Err(_) => {
                self.cq
                    .push_back(recv_completion(&h.wqe, WcStatus::LocProtErr, qpn));
                self.enter_error(true);
                return;
            }
        }
        let mut c = recv_completion(&h.wqe, WcStatus::Success, qpn);
        c.byte_len = need as u32;
        c.solicited = pkt.hdr.bth.se;
        if let Some(imm) = pkt.hdr.imm {
            c.wc_flags |= wc_flags::WITH_IMM;
            c.imm = imm;
        }
        c.src_qp = deth.src_qpn;
        c.src_addr = Some(meta.src);
        c.network_hdr = Some(grh::network_hdr(&ip));
        self.cq.push_back(c);
    }
}
