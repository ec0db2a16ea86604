//! Responder output: the queue of ACKs, NAKs, atomic ACKs and READ
//! response streams, in PSN order, and the packets built from it. READ
//! response payload is read from memory straight into the caller's
//! buffer. Consecutive plain ACKs coalesce: only the newest is sent,
//! since an ACK covers every PSN before it.

use super::memory::MemError;
use super::queue_pair::{Env, Qp};
use super::resp_state::RespOut;
use super::types::{QpState, QpType};
use crate::wire::{
    credit, pad_for, Aeth, AethKind, AtomicAckEth, Headers, NakCode, Opcode, Service, ICRC_LEN,
};
use crate::Psn;
use std::net::IpAddr;

fn plain_ack(o: &RespOut) -> bool {
    matches!(o, RespOut::Ack { aeth, .. } if matches!(aeth.kind(), AethKind::Ack { .. }))
}

impl Qp {
    /// The credit code this QP's ACKs carry (IBA 9.7.7.2): the receive
    /// WQEs its RQ holds now, for the messages after the ACK's MSN (a
    /// WQE taken for a message still arriving is not counted: fewer,
    /// never more). A QP that receives from an SRQ promises nothing, as
    /// the IBA says: other QPs share that queue.
    pub(crate) fn credit_code(&self) -> u8 {
        if self.cfg.qp_type != QpType::Rc || self.cfg.srq.is_some() {
            return credit::INVALID;
        }
        credit::encode(self.rq.len())
    }

    /// Receives were posted: if the last ACK promised few, tell the
    /// requester now with an ACK of the last PSN it has (a duplicate to
    /// it, carrying the new count), rather than have it wait and probe
    /// into what it believes is an empty queue. At most one such ACK per
    /// doubling of the count; none while a response is queued (it will
    /// carry the count when it is built).
    pub(crate) fn offer_credits(&mut self) {
        let Some(told) = self.resp.advertised else {
            return;
        };
        if !matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
            || !self.resp.out.is_empty()
        {
            return;
        }
        let now = credit::decode(self.credit_code()).unwrap_or(0);
        if now > told.saturating_mul(2) {
            self.counters.credit_updates += 1;
            let psn = self.resp.epsn.sub(1);
            self.push_ack(psn, Aeth::ack(credit::INVALID, self.resp.msn));
        }
    }

    /// An ACK-type AETH for `msn` with this QP's credits now, remembered
    /// as the promise last made.
    fn ack_aeth(&mut self, msn: u32) -> Aeth {
        let code = self.credit_code();
        self.resp.advertised = credit::decode(code);
        Aeth::ack(code, msn)
    }

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
                    // An ACK's credits are counted when it is built,
                    // not when it was queued: the freshest count.
                    hdr.aeth = Some(match aeth.kind() {
                        AethKind::Ack { .. } => self.ack_aeth(aeth.msn),
                        _ => aeth,
                    });
                    self.resp.out.pop_front();
                }
                RespOut::AtomicAck { psn, orig } => {
                    hdr.bth.opcode = Opcode::RC_ATOMIC_ACK;
                    hdr.bth.psn = psn;
                    hdr.aeth = Some(self.ack_aeth(msn));
                    hdr.atomic_ack = Some(AtomicAckEth { orig });
                    self.resp.out.pop_front();
                }
                RespOut::Empty { psn } => {
                    hdr.bth.opcode = Opcode::RC_READ_RESPONSE_ONLY;
                    hdr.bth.psn = psn;
                    hdr.aeth = Some(self.ack_aeth(msn));
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
                        hdr.aeth = Some(self.ack_aeth(msn));
                    }
                    n = s.resid.min(pmtu) as usize;
                    self.to_service(&mut hdr);
                    hdr.bth.pad = pad_for(n);
                    let hl = hdr.emit(buf).ok()?;
                    // The MR may have gone since the request was checked.
                    if n > 0 {
                        let dst = &mut buf[hl..hl + n];
                        let ahead = s.resid - n as u64;
                        match env.mem.read_remote_ahead(
                            s.pd,
                            self.cfg.qpn,
                            s.rkey,
                            s.va,
                            dst,
                            ahead,
                        ) {
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
            self.to_service(&mut hdr);
            hdr.bth.pad = pad_for(n);
            let hl = hdr.emit(buf).ok()?;
            return Some((Self::finish(buf, hl, n), self.attr.dst()));
        }
        None
    }

    /// Responses are built with RC opcodes; an XRC target sends the same
    /// operation on the XRC service (responses carry no XRCETH).
    fn to_service(&self, hdr: &mut Headers) {
        if self.cfg.qp_type == QpType::XrcRecv {
            hdr.bth.opcode = hdr.bth.opcode.on_service(Service::Xrc);
        }
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
