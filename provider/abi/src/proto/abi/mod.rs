//! Layouts of the slots in the shared-memory rings (the fast path).
//!
//! The contract between the daemon and the client library, written once:
//! typed views over slot bytes in smoltcp's style ([`SendSlot`],
//! [`RecvSlot`], [`Cqe`]), each with a `field` module of byte ranges,
//! getters, and setters when the bytes are writable. The client writes
//! slots with the setters, the daemon reads them with the getters. All
//! fields are little-endian at fixed offsets and read field by field (no
//! `repr(C)` casts), so a slot written by a hostile or crashed client reads
//! as *some* values that the daemon then validates, never as undefined
//! behaviour. Build a view over untrusted bytes with `new_checked`:
//! getters of a view over a buffer shorter than its header panic.
//!
//! ```text
//! send slot (SQ; header 96 bytes, then SGEs or inline data)
//!   0 u64 wr_id            8 u32 opcode (enum ibv_wr_opcode)
//!  12 u32 send_flags      16 u32 imm_data (wire word) / invalidate rkey
//!  20 u16 num_sge         22 u16 inline_len
//!  24 u64 remote_addr     32 u32 rkey        36 u32 ud remote qpn
//!  40 u64 compare_add     48 u64 swap        56 u32 ud remote qkey
//!  60 u32 flush: type | level << 8            64 [16] ud dest GID
//!  80 u32 ud flow label   84 u32 bind: region lkey   88 u32 bind: access
//!  92..96 reserved
//!  (FLUSH has no local data: its length travels in compare_add; BIND_MW
//!  carries the window's rkey in rkey, the new rkey in imm_data, the
//!  address in remote_addr and the length in compare_add; LOCAL_INV the
//!  key in imm_data)
//!  96 SGE array: { u64 addr, u32 length, u32 lkey } * num_sge
//!     or inline_len bytes of data
//!
//! recv slot (RQ, SRQ; header 16 bytes, then SGEs)
//!   0 u64 wr_id   8 u32 num_sge   12 reserved   16 SGE array
//!
//! CQE (64 bytes)
//!   0 u64 wr_id   8 u32 status   12 u32 opcode   16 u32 vendor_err
//!  20 u32 byte_len   24 u32 imm_data / invalidated rkey   28 u32 qp_num
//!  32 u32 src_qp   36 u32 wc_flags   40 u16 pkey_index   42 u16 slid
//!  44 u8 sl   45 u8 dlid_path_bits   46 u16 reserved
//!  48 [16] source GID (UD)
//!
//! stamped CQE (80 bytes; CQs created with completion timestamps)
//!   0..64 the CQE above
//!  64 u64 completion time, CLOCK_MONOTONIC ns (the "HCA clock")
//!  72 u64 completion time, CLOCK_REALTIME ns (wall clock)
//! ```

use std::ops::Range;

mod cqe;
mod recv;
mod send;
mod sge;
#[cfg(test)]
mod tests;

pub use cqe::{cqe_field, Cqe, CqeBytes};
pub use recv::{recv_field, RecvSlot};
pub use send::{send_field, SendSlot};
pub use sge::{emit_sge, sge_field, Sges};

pub const SEND_HDR: usize = 96;
pub const RECV_HDR: usize = 16;
pub const SGE_SIZE: usize = 16;
pub const CQE_SIZE: usize = 64;
/// A CQE with its two completion timestamps (the slot size of a CQ
/// created with timestamps).
pub const CQE_STAMPED_SIZE: usize = 80;

/// Slot size for a send queue with these limits (multiple of 64).
pub const fn send_slot_size(max_sge: u32, max_inline: u32) -> u32 {
    let sges = max_sge as usize * SGE_SIZE;
    let body = if sges > max_inline as usize {
        sges
    } else {
        max_inline as usize
    };
    ((SEND_HDR + body).div_ceil(64) * 64) as u32
}

/// Slot size for a receive queue with `max_sge` SGEs (multiple of 64).
pub const fn recv_slot_size(max_sge: u32) -> u32 {
    ((RECV_HDR + max_sge as usize * SGE_SIZE).div_ceil(64) * 64) as u32
}

/// Why a view cannot be built over some bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error("slot of {have} bytes cannot hold {need}")]
    TooSmall { need: usize, have: usize },
}

/// A byte range of a slot or CQE.
type Field = Range<usize>;

fn too_small(need: usize, have: usize) -> Result<(), SlotError> {
    if need > have {
        Err(SlotError::TooSmall { need, have })
    } else {
        Ok(())
    }
}

fn get<const N: usize>(b: &[u8], f: Field) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[f]);
    a
}
fn get_u16(b: &[u8], f: Field) -> u16 {
    u16::from_le_bytes(get(b, f))
}
fn get_u32(b: &[u8], f: Field) -> u32 {
    u32::from_le_bytes(get(b, f))
}
fn get_u64(b: &[u8], f: Field) -> u64 {
    u64::from_le_bytes(get(b, f))
}
fn put(b: &mut [u8], f: Field, v: &[u8]) {
    b[f].copy_from_slice(v);
}
