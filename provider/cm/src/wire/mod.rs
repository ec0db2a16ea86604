//! The IB CM on the wire (IBA vol. 1 ch. 12; byte positions as the kernel's
//! `ibta_vol1_c12.h` states them). Offsets in the message files are "CM
//! offsets", counted from the start of the MAD data area (MAD offset - 24).
//!
//! - `msg`: the messages as plain values ([`CmMad`], [`CmMsg`], ...).
//! - [`header`]: the 24-byte MAD header view.
//! - [`bits`]: bit fields at (byte, bit from the MSB, width).
//! - `req`, `rep`, `rej`, `dreq`, `sidr`: each message's layout and codec.
//! - [`codec`]: [`parse`] and [`emit`] of a whole 256-byte MAD.
//! - [`cma`]: the rdma_cm IP header in private data, service IDs.
//! - [`names`]: names of attributes, reject reasons and port spaces, and a
//!   one-line summary of a MAD.
//!
//! Parsing never panics: anything malformed comes back as [`WireError`].

pub mod bits;
pub mod cma;
pub mod codec;
mod dreq;
pub mod header;
mod msg;
pub mod names;
mod rej;
mod rep;
mod req;
mod sidr;
#[cfg(test)]
mod tests;

pub use cma::{port_of, ps_of, service_id, CmaHeader, CMA_HDR_LEN};
pub use codec::{emit, parse};
pub use header::MadHeader;
pub use msg::*;
pub use names::{rej_reason_name, Summary};

/// Bytes of the MAD data area (where the CM message lives).
pub const DATA_LEN: usize = MAD_LEN - MAD_HDR_LEN;

/// Why bytes are not a CM MAD (or private data not an rdma_cm header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer than 256 bytes (the kernel always sends a whole MAD).
    #[error("MAD too short: {0} bytes, a CM MAD has 256")]
    TooShort(usize),
    #[error("MAD base version {0}, expected 1")]
    BaseVersion(u8),
    #[error("management class 0x{0:02x} is not CM (0x07)")]
    MgmtClass(u8),
    #[error("CM class version {0}, expected 2")]
    ClassVersion(u8),
    /// The whole method byte: CM sends only SEND (0x03), never a response.
    #[error("MAD method 0x{0:02x} is not SEND (0x03)")]
    Method(u8),
    #[error("unknown CM attribute 0x{0:04x}")]
    UnknownAttr(u16),
    /// LAP and APR (path migration): refused on RoCE, not decoded.
    #[error("CM {} is not supported", .0.name())]
    Unsupported(AttrId),
    #[error("private data too short for the rdma_cm header: {0} bytes, need 36")]
    CmaTooShort(usize),
    #[error("rdma_cm header version {0}, expected 0")]
    CmaVersion(u8),
    /// The high nibble of the ip_version byte is neither 4 nor 6.
    #[error("rdma_cm header IP version {0}")]
    CmaIpVersion(u8),
    /// One header carries one IP version; emit refuses a v4/v6 mix.
    #[error("rdma_cm header: source and destination are of different IP families")]
    CmaMixedFamilies,
}
