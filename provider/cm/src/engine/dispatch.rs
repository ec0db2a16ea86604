//! MADs in and out: bytes <-> values at the edge, and each received
//! message to its handler.

use std::time::Instant;

use super::{Cm, MadRx, MadTx};
use crate::wire::{self, CmMad, CmMsg, GSI_QPN, MAD_LEN};

impl Cm {
    /// A MAD received on QP1. Anything that does not parse is counted and
    /// dropped.
    pub fn handle_mad(&mut self, now: Instant, rx: &MadRx, mad: &[u8]) {
        match wire::parse(mad) {
            Ok(m) => self.handle_msg(now, rx, &m),
            Err(_) => self.counters.dropped_malformed += 1,
        }
    }

    /// The next MAD to send, encoded.
    pub fn poll_transmit(&mut self) -> Option<MadTx> {
        let out = self.poll_transmit_msg()?;
        let mut mad = [0u8; MAD_LEN];
        wire::emit(&out.mad, &mut mad);
        Some(MadTx {
            src: out.src,
            dst: out.dst,
            dst_qpn: GSI_QPN,
            mad,
        })
    }

    /// A received MAD, as a value.
    pub fn handle_msg(&mut self, now: Instant, rx: &MadRx, mad: &CmMad) {
        self.counters.count_received(&mad.msg);
        match &mad.msg {
            CmMsg::Req(m) => self.on_req(now, rx, mad, m),
            CmMsg::Rep(m) => self.on_rep(now, rx, mad, m),
            CmMsg::Rtu(m) => self.on_rtu(m),
            CmMsg::Rej(m) => self.on_rej(now, m),
            CmMsg::Mra(m) => self.on_mra(now, m),
            CmMsg::Dreq(m) => self.on_dreq(now, rx, mad, m),
            CmMsg::Drep(m) => self.on_drep(now, m),
            CmMsg::SidrReq(m) => self.on_sidr_req(rx, mad, m),
            CmMsg::SidrRep(m) => self.on_sidr_rep(rx, m),
        }
    }
}
