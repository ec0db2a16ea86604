//! Shared-memory single-producer/single-consumer rings (SQ, RQ, SRQ, CQ).
//!
//! A ring lives in a sealed memfd that both processes map (layout in
//! [`layout`]). The creator calls [`Ring::create`] and sends the returned fd
//! over SCM_RIGHTS; the peer calls [`Ring::attach`], which checks the header
//! against the fd's real size before mapping anything. Each side then turns
//! its `Ring` into the [`Producer`] or the [`Consumer`].
//!
//! Neither side trusts the other: the peer's index is validated on every
//! call, slot offsets are masked, and slot bytes are copied with atomics, so
//! a hostile or crashed peer can cause errors and garbage entries, never a
//! read or write outside the mapping, undefined behaviour or a panic.
//!
//! # Sleeping and doorbells
//!
//! The consumer spins while work flows; to sleep it uses the "consumer
//! sleeping" flag so the producer only makes a system call when needed:
//!
//! ```text
//! consumer                               producer
//! sleeping = 1                           write slot; prod = i+1 (Release)
//! fence(SeqCst)                          fence(SeqCst)
//! if ring non-empty: sleeping = 0, run   if sleeping == 1: ring doorbell
//! else block on doorbell; sleeping = 0
//! ```
//!
//! Both sides store, fence, then load the other's word (the store-buffer
//! pattern): with SeqCst fences at least one of them sees the other's store,
//! so either the consumer notices the entry or the producer rings — a wake-up
//! cannot be lost. [`Consumer::prepare_sleep`] / [`Consumer::end_sleep`] /
//! [`Consumer::wait`] and [`Producer::wake_needed`] / [`Producer::notify`]
//! implement the two columns; [`Doorbell`] is the eventfd.

mod doorbell;
mod error;
pub mod layout;
mod memfd;
mod placed;
mod region;
mod spsc;

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;

use memmap2::MmapOptions;

pub use doorbell::Doorbell;
pub use error::RingError;
use layout::{Geometry, CONS_OFFSET, DATA_OFFSET, HEADER_LEN, PROD_OFFSET};
use placed::Placed;
pub use placed::{page_size, Place};
use region::Region;
pub use spsc::{Consumer, Producer, ReadSlot, WriteSlot};

/// One mapping of a ring, not yet committed to a role.
pub struct Ring {
    region: Region,
}

impl Ring {
    /// Creates a ring of `slots` (a power of two) slots of `slot_size` (a
    /// multiple of 8) bytes in a new memfd called `name`. The fd is for the
    /// peer; the mapping does not need it to stay open.
    pub fn create(name: &str, slot_size: u32, slots: u32) -> Result<(Ring, OwnedFd), RingError> {
        Self::create_with_start_index(name, slot_size, slots, 0)
    }

    /// As [`Ring::create`], with both indices starting at `start` instead of
    /// 0 — for exercising u32 wrap-around without 4 billion operations.
    pub fn create_with_start_index(
        name: &str,
        slot_size: u32,
        slots: u32,
        start: u32,
    ) -> Result<(Ring, OwnedFd), RingError> {
        let geo = Geometry::new(slot_size, slots)?;
        let file = memfd::create_sealed(name, geo.total_len() as u64, |f| {
            f.write_all_at(&layout::encode_header(geo), 0)?;
            f.write_all_at(&start.to_ne_bytes(), PROD_OFFSET as u64)?;
            f.write_all_at(&start.to_ne_bytes(), CONS_OFFSET as u64)
        })?;
        let map = MmapOptions::new().len(geo.total_len()).map_raw(&file)?;
        Ok((
            Ring {
                region: Region::new(map, geo),
            },
            file.into(),
        ))
    }

    /// Maps a ring another process created. Fails (never panics) on a fd that
    /// is not a shrink-sealed memfd, a bad header, or a header that claims
    /// more memory than the object really has.
    pub fn attach(fd: impl AsFd) -> Result<Ring, RingError> {
        let (file, geo) = Self::inspect(fd.as_fd())?;
        let map = MmapOptions::new().len(geo.total_len()).map_raw(&file)?;
        Ok(Ring {
            region: Region::new(map, geo),
        })
    }

    /// Bytes a mapping of the ring in `fd` takes (checked as
    /// [`Ring::attach`] checks): what a [`Place`] for it must hold.
    pub fn mapped_len(fd: impl AsFd) -> Result<usize, RingError> {
        Ok(Self::inspect(fd.as_fd())?.1.total_len())
    }

    /// As [`Ring::attach`], but mapped over `place` (page-aligned, at least
    /// [`Ring::mapped_len`] bytes). On failure the place is given back
    /// unchanged (its release runs); once the ring is dropped the range is
    /// fresh zeroed memory again and then given back.
    pub fn attach_at(fd: impl AsFd, place: Place) -> Result<Ring, RingError> {
        let (file, geo) = Self::inspect(fd.as_fd())?;
        let map = Placed::map(file.as_fd(), geo.total_len(), place)?;
        Ok(Ring {
            region: Region::placed(map, geo),
        })
    }

    /// Checks a ring fd and reads its geometry.
    fn inspect(fd: std::os::fd::BorrowedFd<'_>) -> Result<(std::fs::File, Geometry), RingError> {
        memfd::check_sealed(fd)?;
        let file = std::fs::File::from(fd.try_clone_to_owned()?);
        let len = file.metadata()?.len();
        if len < DATA_OFFSET as u64 {
            return Err(RingError::Truncated {
                needed: DATA_OFFSET as u64,
                actual: len,
            });
        }
        let mut header = [0u8; HEADER_LEN];
        file.read_exact_at(&mut header, 0)?;
        // The geometry is decided here, once; later header writes by the
        // peer change nothing for us.
        let geo = layout::decode_header(&header, len)?;
        Ok((file, geo))
    }

    pub fn slot_size(&self) -> u32 {
        self.region.geometry().slot_size()
    }

    pub fn slots(&self) -> u32 {
        self.region.geometry().slots()
    }

    pub fn into_producer(self) -> Producer {
        Producer::new(self.region)
    }

    pub fn into_consumer(self) -> Consumer {
        Consumer::new(self.region)
    }
}

#[cfg(test)]
mod tests;
