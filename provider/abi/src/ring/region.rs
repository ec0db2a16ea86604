//! The mapped ring memory and the only code that dereferences it.
//!
//! The other process can write any byte of this memory at any moment, so no
//! Rust reference to plain bytes of it is ever created: indices and flag are
//! `AtomicU32`s, and slot contents are copied in and out with relaxed word
//! (or, at ragged edges, byte) atomics. A peer scribbling on a slot we are
//! copying yields garbage bytes in our private buffer, never undefined
//! behaviour; the bytes are validated after the copy by whoever decodes them.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

use memmap2::MmapRaw;

use super::layout::{Geometry, CONS_OFFSET, PROD_OFFSET, SLEEP_OFFSET};
use super::placed::Placed;

/// Where the ring's memory is mapped: anywhere (a mapping of its own), or
/// at a place its owner lent.
enum Mapping {
    Own(MmapRaw),
    Placed(Placed),
}

impl Mapping {
    fn as_mut_ptr(&self) -> *mut u8 {
        match self {
            Mapping::Own(m) => m.as_mut_ptr(),
            Mapping::Placed(p) => p.as_mut_ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Mapping::Own(m) => m.len(),
            Mapping::Placed(p) => p.len(),
        }
    }
}

pub struct Region {
    map: Mapping,
    geo: Geometry,
}

impl Region {
    /// `map` must be at least `geo.total_len()` bytes (checked).
    pub fn new(map: MmapRaw, geo: Geometry) -> Self {
        Self::with(Mapping::Own(map), geo)
    }

    /// A ring mapped at a lent place, at least `geo.total_len()` bytes
    /// (checked).
    pub fn placed(map: Placed, geo: Geometry) -> Self {
        Self::with(Mapping::Placed(map), geo)
    }

    fn with(map: Mapping, geo: Geometry) -> Self {
        assert!(map.len() >= geo.total_len(), "mapping shorter than ring");
        Self { map, geo }
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset.is_multiple_of(64) && offset + 4 <= self.map.len());
        // SAFETY: offset is one of the fixed header-line offsets (< DATA_OFFSET
        // <= map.len()), 64-byte aligned within a page-aligned mapping, so the
        // pointer is in bounds and aligned for u32. The mapping lives as long
        // as `self`, and this memory is only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    pub fn producer_index(&self) -> &AtomicU32 {
        self.atomic_u32(PROD_OFFSET)
    }

    pub fn consumer_index(&self) -> &AtomicU32 {
        self.atomic_u32(CONS_OFFSET)
    }

    pub fn sleeping_flag(&self) -> &AtomicU32 {
        self.atomic_u32(SLEEP_OFFSET)
    }

    /// Copies `out.len()` bytes starting `at` bytes into slot `index`.
    pub fn read_slot(&self, index: u32, at: usize, out: &mut [u8]) {
        let start = self.slot_range(index, at, out.len());
        let mut i = 0;
        while i < out.len() {
            let off = start + i;
            if off.is_multiple_of(8) && out.len() - i >= 8 {
                let w = self.word(off).load(Relaxed);
                out[i..i + 8].copy_from_slice(&w.to_ne_bytes());
                i += 8;
            } else {
                out[i] = self.byte(off).load(Relaxed);
                i += 1;
            }
        }
    }

    /// Copies `data` to `at` bytes into slot `index`.
    pub fn write_slot(&self, index: u32, at: usize, data: &[u8]) {
        let start = self.slot_range(index, at, data.len());
        let mut i = 0;
        while i < data.len() {
            let off = start + i;
            if off.is_multiple_of(8) && data.len() - i >= 8 {
                let mut w = [0u8; 8];
                w.copy_from_slice(&data[i..i + 8]);
                self.word(off).store(u64::from_ne_bytes(w), Relaxed);
                i += 8;
            } else {
                self.byte(off).store(data[i], Relaxed);
                i += 1;
            }
        }
    }

    /// Zeroes `at..slot_size` of slot `index`.
    pub fn zero_slot_tail(&self, index: u32, at: usize) {
        let slot = self.geo.slot_size() as usize;
        if at >= slot {
            return;
        }
        let start = self.slot_range(index, at, slot - at);
        let (mut off, end) = (start, start + slot - at);
        while off < end {
            if off.is_multiple_of(8) && end - off >= 8 {
                self.word(off).store(0, Relaxed);
                off += 8;
            } else {
                self.byte(off).store(0, Relaxed);
                off += 1;
            }
        }
    }

    /// Absolute start of `len` bytes at `at` within slot `index`. Callers
    /// check `at + len <= slot_size`; the assert keeps the pointer code
    /// below sound even if one forgets.
    fn slot_range(&self, index: u32, at: usize, len: usize) -> usize {
        let slot = self.geo.slot_size() as usize;
        assert!(at <= slot && len <= slot - at, "slot access out of range");
        self.geo.slot_offset(index) + at
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.geo.total_len());
        // SAFETY: callers pass an 8-aligned offset inside a slot range checked
        // by `slot_range`, and slots lie within geo.total_len() <= map.len();
        // the mapping is page-aligned, so the pointer is aligned for u64. The
        // memory is shared with another process and only accessed atomically.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(off).cast()) }
    }

    fn byte(&self, off: usize) -> &AtomicU8 {
        debug_assert!(off < self.geo.total_len());
        // SAFETY: as for `word`; u8 needs no alignment.
        unsafe { AtomicU8::from_ptr(self.map.as_mut_ptr().add(off)) }
    }
}
