//! Responder output: the queue of ACKs, NAKs, atomic ACKs and READ
//! response streams, in PSN order, and the packets built from it. READ
//! response payload is read from memory straight into the caller's
//! buffer. Consecutive plain ACKs coalesce: only the newest is sent,
//! since an ACK covers every PSN before it.

use super::memory::MemError;
use super::queue_pair::{Env, Qp};
use super::resp_state::RespOut;
use crate::wire::{pad_for, Aeth, AethKind, AtomicAckEth, Headers, NakCode, Opcode, ICRC_LEN};
use crate::Psn;
use std::net::IpAddr;

fn plain_ack(o: &RespOut) -> bool {
    matches!(o, RespOut::Ack { aeth, .. } if matches!(aeth.kind(), AethKind::Ack { .. }))
}

impl Qp {
    /// Queues an ACK or NAK, replacing a plain ACK still waiting at the
    /// tail.
    pub(crate) fn push_ack(&mut self, psn: Psn, aeth: Aeth) {
        let new = RespOut::Ack { psn, aeth };
        match self.resp.out.back_mut() {
            Some(last) if plain_ack(last) && plain_ack(&new) => *last = new,
            _ => self.resp.out.push_back(new),
        }
    }

    /// Builds the next response packet.
    pub(crate) fn poll_response(
        &mut self,
        env: &mut Env<'_>,
        buf: &mut [u8],
    ) -> Option<(usize, IpAddr)> {
        // Bounded: each pass sends a packet or turns a failed READ into
        // a NAK (after which only that NAK is left).
        for _ in 0..2 {
            let front = *self.resp.out.front()?;
            let msn = self.resp.msn;
            let mut hdr = Headers::default();
            hdr.bth.dest_qpn = self.attr.dest_qpn;
            let mut n = 0usize;
            match front {
                RespOut::Ack { psn, aeth } => {
                    hdr.bth.opcode = Opcode::RC_ACK;
                    hdr.bth.psn = psn;
                    hdr.aeth = Some(aeth);
                    self.resp.out.pop_front();
                }
                RespOut::AtomicAck { psn, orig } => {
                    hdr.bth.opcode = Opcode::RC_ATOMIC_ACK;
                    hdr.bth.psn = psn;
                    hdr.aeth = Some(Aeth::ack(Aeth::CREDIT_INVALID, msn));
                    hdr.atomic_ack = Some(AtomicAckEth { orig });
                    self.resp.out.pop_front();
                }
                RespOut::Empty { psn } => {
                    hdr.bth.opcode = Opcode::RC_READ_RESPONSE_ONLY;
                    hdr.bth.psn = psn;
                    hdr.aeth = Some(Aeth::ack(Aeth::CREDIT_INVALID, msn));
                    self.resp.out.pop_front();
                }
                RespOut::Read(s) => {
                    let pmtu = self.attr.pmtu() as u64;
                    let last = s.resid <= pmtu;
                    hdr.bth.opcode = match (s.started, last) {
                        (false, true) => Opcode::RC_READ_RESPONSE_ONLY,
                        (false, false) => Opcode::RC_READ_RESPONSE_FIRST,
                        (true, true) => Opcode::RC_READ_RESPONSE_LAST,
                        (true, false) => Opcode::RC_READ_RESPONSE_MIDDLE,
                    };
                    hdr.bth.psn = s.psn;
                    if !s.started || last {
                        hdr.aeth = Some(Aeth::ack(Aeth::CREDIT_INVALID, msn));
                    }
                    n = s.resid.min(pmtu) as usize;
                    hdr.bth.pad = pad_for(n);
                    let hl = hdr.emit(buf).ok()?;
                    // The MR may have gone since the request was checked.
                    if n > 0 {
                        let dst = &mut buf[hl..hl + n];
                        match env
                            .mem
                            .read_remote(self.cfg.pd, self.cfg.qpn, s.rkey, s.va, dst)
                        {
                            Ok(()) => {}
                            Err(MemError::Gone) => {
                                // The owner exited: fall silent, as its
                                // QP is about to.
                                self.counters.dropped_pkts += 1;
                                self.resp.out.pop_front();
                                continue;
                            }
                            Err(_) => {
                                self.read_failed(s.psn);
                                continue;
                            }
                        }
                    }
                    if last {
                        self.resp.out.pop_front();
                    } else if let Some(RespOut::Read(cur)) = self.resp.out.front_mut() {
                        cur.started = true;
                        cur.psn = cur.psn.next();
                        cur.va = cur.va.wrapping_add(n as u64);
                        cur.resid -= n as u64;
                    }
                    return Some((Self::finish(buf, hl, n), self.attr.dst()));
                }
            }
            hdr.bth.pad = pad_for(n);
            let hl = hdr.emit(buf).ok()?;
            return Some((Self::finish(buf, hl, n), self.attr.dst()));
        }
        None
    }

    /// Zeroes pad and ICRC after `n` payload bytes at `hl`; total length.
    fn finish(buf: &mut [u8], hl: usize, n: usize) -> usize {
        let end = hl + n + usize::from(pad_for(n));
        buf[hl + n..end + ICRC_LEN].fill(0);
        end + ICRC_LEN
    }

    /// READ source no longer accessible: NAK and go to ERR.
    fn read_failed(&mut self, psn: Psn) {
        self.enter_error(true);
        let aeth = Aeth::nak(NakCode::RemoteAccess, self.resp.msn);
        self.resp.out.push_back(RespOut::Ack { psn, aeth });
    }
}
