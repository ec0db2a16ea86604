//! RoCEv2 on the wire: typed header representations with parse and emit
//! (in the manner of smoltcp's `wire`), the opcode table and the ICRC.
//!
//! Layout of a RoCEv2 UDP payload (what a UDP socket sends and receives):
//!
//! ```text
//! BTH (12) | extension headers | payload | pad (0..3) | ICRC (4)
//! ```
//!
//! Parsing never panics: any malformed input comes back as [`WireError`].

#![forbid(unsafe_code)]

pub mod bth;
pub mod credit;
pub mod ext;
pub mod icrc;
pub mod ip;
pub mod opcode;
pub mod packet;
#[cfg(test)]
mod tests;

pub use bth::Bth;
pub use ext::{Aeth, AethKind, AtomicAckEth, AtomicEth, Deth, Feth, NakCode, Reth};
pub use opcode::{Opcode, OpcodeInfo, Service};
pub use packet::{Headers, Packet};

/// UDP destination port of RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;
/// Length of the BTH.
pub const BTH_LEN: usize = 12;
/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;
/// Largest payload one packet may carry (path MTU 4096).
pub const MAX_PAYLOAD: usize = 4096;
/// Largest BTH + extension headers of any opcode (BTH + XRCETH +
/// AtomicETH).
pub const MAX_HEADER_LEN: usize = BTH_LEN + 4 + 28;
/// Largest RoCEv2 UDP payload we accept or produce.
pub const MAX_PACKET: usize = MAX_HEADER_LEN + MAX_PAYLOAD + 3 + ICRC_LEN;

/// Why a packet could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the headers need.
    #[error("truncated packet: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    /// More bytes than any valid packet carries.
    #[error("oversized packet: {0} bytes")]
    Oversized(usize),
    /// BTH transport header version is not 0.
    #[error("unsupported BTH transport version {0}")]
    BadVersion(u8),
    /// Opcode not in the table.
    #[error("unknown opcode 0x{0:02x}")]
    UnknownOpcode(u8),
    /// PadCnt larger than the bytes after the headers.
    #[error("pad count {pad} exceeds the {avail} bytes after the headers")]
    BadPad { pad: u8, avail: usize },
    /// Payload present on an opcode that carries none.
    #[error("opcode {0:?} carries no payload but {1} bytes follow")]
    UnexpectedPayload(Opcode, usize),
    /// Headers inconsistent with the opcode (emit side).
    #[error("headers do not match opcode {0:?}: {1}")]
    Inconsistent(Opcode, &'static str),
    /// Output buffer too small (emit side).
    #[error("buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall { need: usize, have: usize },
    /// Frame is not IPv4/IPv6 + UDP to port 4791.
    #[error("not a RoCEv2 frame: {0}")]
    NotRoce(&'static str),
    /// ICRC does not match.
    #[error("bad ICRC: computed {computed:08x}, found {found:08x}")]
    BadIcrc { computed: u32, found: u32 },
}

/// Pad bytes needed after `payload_len` bytes of payload.
#[inline]
pub const fn pad_for(payload_len: usize) -> u8 {
    (payload_len.wrapping_neg() & 3) as u8
}

#[inline]
pub(crate) fn need(buf: &[u8], n: usize) -> Result<(), WireError> {
    if buf.len() < n {
        Err(WireError::Truncated {
            need: n,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}
#[inline]
pub(crate) fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}
