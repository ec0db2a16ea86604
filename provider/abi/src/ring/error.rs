//! What can go wrong with a ring: its geometry, its header, its memfd, or
//! a peer's indices and slot accesses.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum RingError {
    #[error("invalid ring geometry (slot size {slot_size}, {slots} slots): {why}")]
    InvalidGeometry {
        slot_size: u32,
        slots: u32,
        why: &'static str,
    },
    #[error("invalid ring header: {0}")]
    BadHeader(&'static str),
    #[error("ring memory is {actual} bytes but the header needs {needed}")]
    Truncated { needed: u64, actual: u64 },
    #[error("ring fd is not a memfd sealed against shrinking")]
    NotSealed,
    #[error("invalid memfd name")]
    BadName,
    #[error("ring indices corrupt: producer {prod}, consumer {cons}, {slots} slots")]
    Corrupt { prod: u32, cons: u32, slots: u32 },
    #[error("entry of {len} bytes does not fit a {slot_size}-byte slot")]
    TooLarge { len: usize, slot_size: usize },
    #[error("buffer of {len} bytes is smaller than the {slot_size}-byte slot")]
    BufferTooSmall { len: usize, slot_size: usize },
    #[error("access of {len} bytes at {at} is outside the {slot_size}-byte slot")]
    OutOfSlot {
        at: usize,
        len: usize,
        slot_size: usize,
    },
    #[error("{0} entries read ahead and not released")]
    ReadAhead(u32),
    #[error(transparent)]
    Io(#[from] io::Error),
}
