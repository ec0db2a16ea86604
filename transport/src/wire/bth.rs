//! Base Transport Header (12 bytes).

use super::{be16, be24, need, put24, Opcode, WireError, BTH_LEN};
use crate::Psn;

/// The BTH, field by field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bth {
    pub opcode: Opcode,
    /// Solicited event.
    pub se: bool,
    /// MigReq: rxe sends 0, ConnectX sends 1; ignored on receive.
    pub mig_req: bool,
    /// Pad bytes after the payload (0..3).
    pub pad: u8,
    /// Transport header version; must be 0.
    pub tver: u8,
    pub pkey: u16,
    /// Forward ECN (RoCEv2 use of a reserved bit).
    pub fecn: bool,
    /// Backward ECN; set in CNPs.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qpn: u32,
    pub ack_req: bool,
    pub psn: Psn,
}

impl Default for Bth {
    fn default() -> Self {
        Bth {
            opcode: Opcode(0),
            se: false,
            mig_req: false,
            pad: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qpn: 0,
            ack_req: false,
            psn: Psn::new(0),
        }
    }
}

impl Bth {
    /// Parses the first 12 bytes of `buf`. Checks length only; version and
    /// opcode are checked by [`crate::wire::Packet::parse`].
    pub fn parse(buf: &[u8]) -> Result<Bth, WireError> {
        need(buf, BTH_LEN)?;
        let b1 = buf[1];
        Ok(Bth {
            opcode: Opcode(buf[0]),
            se: b1 & 0x80 != 0,
            mig_req: b1 & 0x40 != 0,
            pad: (b1 >> 4) & 3,
            tver: b1 & 0x0f,
            pkey: be16(buf, 2),
            fecn: buf[4] & 0x80 != 0,
            becn: buf[4] & 0x40 != 0,
            dest_qpn: be24(buf, 5),
            ack_req: buf[8] & 0x80 != 0,
            psn: Psn::new(be24(buf, 9)),
        })
    }

    /// Writes the BTH into the first 12 bytes of `buf`. Reserved bits are 0.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        if buf.len() < BTH_LEN {
            return Err(WireError::BufferTooSmall {
                need: BTH_LEN,
                have: buf.len(),
            });
        }
        buf[0] = self.opcode.0;
        buf[1] = (u8::from(self.se) << 7)
            | (u8::from(self.mig_req) << 6)
            | ((self.pad & 3) << 4)
            | (self.tver & 0x0f);
        buf[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        buf[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        put24(buf, 5, self.dest_qpn);
        buf[8] = u8::from(self.ack_req) << 7;
        put24(buf, 9, self.psn.value());
        Ok(())
    }
}
