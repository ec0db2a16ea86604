//! Where everything sits in a ring's memory, and the header check.
//!
//! Pure arithmetic: nothing here touches shared memory, so every rule about
//! what a valid ring looks like is testable on plain byte arrays.
//!
//! ```text
//! offset   size  written by  contents
//!      0     32  creator     header: magic u64, version u32, slot_size u32,
//!                            slots u32, data_offset u32, reserved u64 (LE)
//!     64      4  producer    producer index (AtomicU32, free-running)
//!    128      4  consumer    consumer index (AtomicU32, free-running)
//!    192      4  consumer    "consumer sleeping" flag (AtomicU32, 0 or 1)
//!    256  n * s  both        `slots` slots of `slot_size` bytes each
//! ```
//!
//! Each index and the flag own a 64-byte cache line, so the producer's and
//! the consumer's stores never bounce the same line.

use super::error::RingError;

/// "RXURING" and a NUL, read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RXURING\0");
/// Bumped on any incompatible layout change.
pub const VERSION: u32 = 1;

pub const PROD_OFFSET: usize = 64;
pub const CONS_OFFSET: usize = 128;
pub const SLEEP_OFFSET: usize = 192;
pub const DATA_OFFSET: usize = 256;
pub const HEADER_LEN: usize = 32;
const _: () = assert!(HEADER_LEN <= PROD_OFFSET);

/// Slots hold whole 8-byte words so slot copies can use word atomics.
pub const SLOT_ALIGN: u32 = 8;
pub const MAX_SLOT_SIZE: u32 = 64 * 1024;
pub const MAX_SLOTS: u32 = 1 << 24;
/// Upper bound on a mapping, whatever the header claims.
pub const MAX_RING_BYTES: usize = 1 << 30;

/// A validated slot size and slot count. Everything derived from it is in
/// bounds of a mapping of `total_len()` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    slot_size: u32,
    slots: u32,
}

impl Geometry {
    pub fn new(slot_size: u32, slots: u32) -> Result<Self, RingError> {
        let bad = |why| {
            Err(RingError::InvalidGeometry {
                slot_size,
                slots,
                why,
            })
        };
        if slot_size == 0 || !slot_size.is_multiple_of(SLOT_ALIGN) {
            return bad("slot size must be a non-zero multiple of 8");
        }
        if slot_size > MAX_SLOT_SIZE {
            return bad("slot size above 64 KiB");
        }
        if !slots.is_power_of_two() {
            return bad("slot count must be a power of two");
        }
        if slots > MAX_SLOTS {
            return bad("more than 2^24 slots");
        }
        let data = u64::from(slot_size) * u64::from(slots);
        if data + DATA_OFFSET as u64 > MAX_RING_BYTES as u64 {
            return bad("ring larger than 1 GiB");
        }
        Ok(Self { slot_size, slots })
    }

    pub fn slot_size(&self) -> u32 {
        self.slot_size
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Bytes the mapping must have. Fits in usize: bounded by MAX_RING_BYTES.
    pub fn total_len(&self) -> usize {
        DATA_OFFSET + self.slot_size as usize * self.slots as usize
    }

    /// Offset of the slot a free-running index refers to. The mask makes any
    /// u32, including one read from a hostile peer, land inside the ring.
    pub fn slot_offset(&self, index: u32) -> usize {
        let slot = (index & (self.slots - 1)) as usize;
        DATA_OFFSET + slot * self.slot_size as usize
    }
}

pub fn encode_header(geo: Geometry) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&geo.slot_size.to_le_bytes());
    h[16..20].copy_from_slice(&geo.slots.to_le_bytes());
    h[20..24].copy_from_slice(&(DATA_OFFSET as u32).to_le_bytes());
    h
}

/// Checks a header read from memory the peer controls. `file_len` is the
/// size the kernel reports for the memory object, not anything the header says.
pub fn decode_header(h: &[u8; HEADER_LEN], file_len: u64) -> Result<Geometry, RingError> {
    let u32_at = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&h[0..8]);
    if u64::from_le_bytes(magic) != MAGIC {
        return Err(RingError::BadHeader("bad magic"));
    }
    if u32_at(8) != VERSION {
        return Err(RingError::BadHeader("unsupported version"));
    }
    if u32_at(20) != DATA_OFFSET as u32 {
        return Err(RingError::BadHeader("unexpected data offset"));
    }
    let geo = Geometry::new(u32_at(12), u32_at(16))?;
    if (geo.total_len() as u64) > file_len {
        return Err(RingError::Truncated {
            needed: geo.total_len() as u64,
            actual: file_len,
        });
    }
    Ok(geo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_do_not_share_cache_lines() {
        let offs = [0, PROD_OFFSET, CONS_OFFSET, SLEEP_OFFSET, DATA_OFFSET];
        for w in offs.windows(2) {
            assert!(w[1] - w[0] >= 64);
            assert_eq!(w[1] % 64, 0);
        }
    }

    #[test]
    fn geometry_rules() {
        assert!(Geometry::new(64, 256).is_ok());
        assert!(Geometry::new(8, 1).is_ok());
        assert!(Geometry::new(0, 16).is_err());
        assert!(Geometry::new(12, 16).is_err());
        assert!(Geometry::new(64, 0).is_err());
        assert!(Geometry::new(64, 48).is_err());
        assert!(Geometry::new(MAX_SLOT_SIZE + 8, 1).is_err());
        assert!(Geometry::new(8, MAX_SLOTS * 2).is_err());
        assert!(Geometry::new(MAX_SLOT_SIZE, 1 << 14).is_err()); // 1 GiB + header
    }

    #[test]
    fn slot_offset_masks_any_index() {
        let g = Geometry::new(64, 16).unwrap();
        for i in [0u32, 15, 16, 17, u32::MAX, 0x8000_0000] {
            let off = g.slot_offset(i);
            assert!(off >= DATA_OFFSET && off + 64 <= g.total_len());
        }
        assert_eq!(g.slot_offset(17), DATA_OFFSET + 64);
    }

    #[test]
    fn header_round_trip_and_rejections() {
        let g = Geometry::new(128, 64).unwrap();
        let h = encode_header(g);
        assert_eq!(decode_header(&h, g.total_len() as u64).unwrap(), g);
        assert!(matches!(
            decode_header(&h, g.total_len() as u64 - 1),
            Err(RingError::Truncated { .. })
        ));
        for (at, why) in [(0, "magic"), (8, "version"), (20, "data offset")] {
            let mut bad = h;
            bad[at] ^= 1;
            let err = decode_header(&bad, u64::MAX).unwrap_err();
            assert!(err.to_string().contains(why), "{err}");
        }
        let mut bad = h;
        bad[16..20].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            decode_header(&bad, u64::MAX),
            Err(RingError::InvalidGeometry { .. })
        ));
    }
}
