//! A whole IB transport packet (BTH through ICRC, the UDP payload):
//! parse into [`Packet`], emit from [`Headers`].

use super::ext::{Aeth, AtomicAckEth, AtomicEth, Deth, Feth, Reth};
use super::opcode::flags;
use super::{be32, need, Bth, Opcode, WireError, BTH_LEN, ICRC_LEN, MAX_PACKET, MAX_PAYLOAD};

/// BTH plus whichever extension headers the opcode carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Headers {
    pub bth: Bth,
    pub deth: Option<Deth>,
    /// XRCETH: the XRC SRQ number (24 bits) the request is for.
    pub xrceth: Option<u32>,
    pub feth: Option<Feth>,
    pub reth: Option<Reth>,
    pub atomic_eth: Option<AtomicEth>,
    pub aeth: Option<Aeth>,
    pub atomic_ack: Option<AtomicAckEth>,
    /// Immediate data, as the big-endian wire word read into a `u32`.
    pub imm: Option<u32>,
    /// IETH: the rkey to invalidate.
    pub ieth: Option<u32>,
}

/// A parsed packet: headers, payload (pad and ICRC excluded) and the ICRC
/// as found on the wire (not verified here; see [`super::icrc`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub hdr: Headers,
    pub payload: &'a [u8],
    /// The ICRC value (wire bytes read little-endian).
    pub icrc: u32,
}

impl Headers {
    /// Bytes of BTH + extension headers for this opcode.
    pub fn len(&self) -> usize {
        BTH_LEN + self.bth.opcode.info().map_or(0, |i| i.ext_len())
    }

    /// Always false: a packet has at least a BTH.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Parses BTH and extension headers from the start of `buf`; returns
    /// them and the header length.
    pub fn parse(buf: &[u8]) -> Result<(Headers, usize), WireError> {
        let bth = Bth::parse(buf)?;
        if bth.tver != 0 {
            return Err(WireError::BadVersion(bth.tver));
        }
        let info = bth
            .opcode
            .info()
            .ok_or(WireError::UnknownOpcode(bth.opcode.0))?;
        let total = BTH_LEN + info.ext_len();
        need(buf, total)?;
        let mut h = Headers {
            bth,
            ..Headers::default()
        };
        let mut at = BTH_LEN;
        if info.has(flags::DETH) {
            h.deth = Some(Deth::parse(&buf[at..]));
            at += Deth::LEN;
        }
        if info.has(flags::XRCETH) {
            h.xrceth = Some(be32(buf, at) & 0xFF_FFFF);
            at += 4;
        }
        if info.has(flags::FETH) {
            h.feth = Some(Feth::parse(&buf[at..]));
            at += Feth::LEN;
        }
        if info.has(flags::RETH) {
            h.reth = Some(Reth::parse(&buf[at..]));
            at += Reth::LEN;
        }
        if info.has(flags::ATOMIC_ETH) {
            h.atomic_eth = Some(AtomicEth::parse(&buf[at..]));
            at += AtomicEth::LEN;
        }
        if info.has(flags::AETH) {
            h.aeth = Some(Aeth::parse(&buf[at..]));
            at += Aeth::LEN;
        }
        if info.has(flags::ATOMIC_ACK_ETH) {
            h.atomic_ack = Some(AtomicAckEth::parse(&buf[at..]));
            at += AtomicAckEth::LEN;
        }
        if info.has(flags::IMM) {
            h.imm = Some(be32(buf, at));
            at += 4;
        }
        if info.has(flags::IETH) {
            h.ieth = Some(be32(buf, at));
            at += 4;
        }
        debug_assert_eq!(at, total);
        Ok((h, total))
    }

    /// Writes BTH and extension headers to the start of `buf`; returns the
    /// number of bytes written. Every header the opcode needs must be
    /// present and no other.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let op = self.bth.opcode;
        let info = op.info().ok_or(WireError::UnknownOpcode(op.0))?;
        let total = BTH_LEN + info.ext_len();
        if buf.len() < total {
            return Err(WireError::BufferTooSmall {
                need: total,
                have: buf.len(),
            });
        }
        let check = |present: bool, flag: u32, what: &'static str| {
            if present != info.has(flag) {
                Err(WireError::Inconsistent(op, what))
            } else {
                Ok(())
            }
        };
        check(self.deth.is_some(), flags::DETH, "DETH")?;
        check(self.xrceth.is_some(), flags::XRCETH, "XRCETH")?;
        if self.xrceth.is_some_and(|n| n > 0xFF_FFFF) {
            return Err(WireError::Inconsistent(op, "XRC SRQ number above 24 bits"));
        }
        check(self.feth.is_some(), flags::FETH, "FETH")?;
        check(self.reth.is_some(), flags::RETH, "RETH")?;
        check(self.atomic_eth.is_some(), flags::ATOMIC_ETH, "AtomicETH")?;
        check(self.aeth.is_some(), flags::AETH, "AETH")?;
        check(
            self.atomic_ack.is_some(),
            flags::ATOMIC_ACK_ETH,
            "AtomicAckETH",
        )?;
        check(self.imm.is_some(), flags::IMM, "ImmDt")?;
        check(self.ieth.is_some(), flags::IETH, "IETH")?;
        self.bth.emit(buf)?;
        let mut at = BTH_LEN;
        if let Some(d) = &self.deth {
            d.emit(&mut buf[at..]);
            at += Deth::LEN;
        }
        if let Some(n) = self.xrceth {
            // 8 reserved bits (zero), then the 24-bit XRC SRQ number.
            buf[at..at + 4].copy_from_slice(&(n & 0xFF_FFFF).to_be_bytes());
            at += 4;
        }
        if let Some(f) = &self.feth {
            f.emit(&mut buf[at..]);
            at += Feth::LEN;
        }
        if let Some(r) = &self.reth {
            r.emit(&mut buf[at..]);
            at += Reth::LEN;
        }
        if let Some(a) = &self.atomic_eth {
            a.emit(&mut buf[at..]);
            at += AtomicEth::LEN;
        }
        if let Some(a) = &self.aeth {
            a.emit(&mut buf[at..]);
            at += Aeth::LEN;
        }
        if let Some(a) = &self.atomic_ack {
            a.emit(&mut buf[at..]);
            at += AtomicAckEth::LEN;
        }
        if let Some(i) = self.imm {
            buf[at..at + 4].copy_from_slice(&i.to_be_bytes());
            at += 4;
        }
        if let Some(i) = self.ieth {
            buf[at..at + 4].copy_from_slice(&i.to_be_bytes());
            at += 4;
        }
        debug_assert_eq!(at, total);
        Ok(total)
    }
}

impl<'a> Packet<'a> {
    /// Parses a UDP payload (BTH .. ICRC). Checks version, opcode, lengths,
    /// pad count and payload presence; does not check the ICRC.
    pub fn parse(buf: &'a [u8]) -> Result<Packet<'a>, WireError> {
        if buf.len() > MAX_PACKET {
            return Err(WireError::Oversized(buf.len()));
        }
        let (hdr, hlen) = Headers::parse(buf)?;
        need(buf, hlen + ICRC_LEN)?;
        let body = buf.len() - hlen - ICRC_LEN;
        let pad = usize::from(hdr.bth.pad);
        if pad > body {
            return Err(WireError::BadPad {
                pad: hdr.bth.pad,
                avail: body,
            });
        }
        let payload_len = body - pad;
        let op = hdr.bth.opcode;
        // Opcode is known: Headers::parse checked it.
        let info = op.info().ok_or(WireError::UnknownOpcode(op.0))?;
        let payload_ok = info.has(flags::PAYLOAD) || info.has(flags::CNP);
        if !payload_ok && body != 0 {
            return Err(WireError::UnexpectedPayload(op, body));
        }
        if payload_len > MAX_PAYLOAD {
            return Err(WireError::Oversized(buf.len()));
        }
        let t = buf.len() - ICRC_LEN;
        let icrc = u32::from_le_bytes([buf[t], buf[t + 1], buf[t + 2], buf[t + 3]]);
        Ok(Packet {
            hdr,
            payload: &buf[hlen..hlen + payload_len],
            icrc,
        })
    }

    /// Opcode of this packet.
    pub fn opcode(&self) -> Opcode {
        self.hdr.bth.opcode
    }
}

/// Emits headers, copies `payload`, zero-fills the pad and leaves room for
/// the ICRC (written as zero; see [`super::icrc`] to fill it). Sets the
/// BTH pad count from the payload length. Returns the total UDP payload
/// length including the ICRC.
pub fn emit_packet(hdr: &Headers, payload: &[u8], buf: &mut [u8]) -> Result<usize, WireError> {
    let mut h = *hdr;
    h.bth.pad = super::pad_for(payload.len());
    let pad = usize::from(h.bth.pad);
    let total = h.len() + payload.len() + pad + ICRC_LEN;
    if buf.len() < total {
        return Err(WireError::BufferTooSmall {
            need: total,
            have: buf.len(),
        });
    }
    let hl = h.emit(buf)?;
    buf[hl..hl + payload.len()].copy_from_slice(payload);
    buf[hl + payload.len()..total].fill(0);
    Ok(total)
}
