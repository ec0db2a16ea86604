//! Memory keys: independent uniform draws from the kernel's CSPRNG, and
//! the hash the MR table files them under.
//!
//! Every key is its own 32-bit draw (no index bits, no counter), so
//! learning one key says nothing about any other; a peer can only guess,
//! with odds of (registered MRs) / 2^32 per try.

use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Read};

/// Keys drawn per getrandom call (amortises the system call).
const BATCH: usize = 64;
/// EINTR retries before giving up on getrandom.
const MAX_EINTR: u32 = 16;

/// A buffered source of random 32-bit keys.
pub(crate) struct KeySource {
    buf: [u32; BATCH],
    left: usize,
}

impl Default for KeySource {
    fn default() -> Self {
        KeySource {
            buf: [0; BATCH],
            left: 0,
        }
    }
}

impl KeySource {
    /// The next random value; `None` only if the kernel has no randomness
    /// to give (no getrandom and no /dev/urandom).
    pub(crate) fn next_key(&mut self) -> Option<u32> {
        if self.left == 0 {
            self.refill().ok()?;
        }
        self.left -= 1;
        let k = self.buf[self.left];
        // A handed-out key is not kept in the buffer.
        self.buf[self.left] = 0;
        Some(k)
    }

    fn refill(&mut self) -> io::Result<()> {
        let mut bytes = [0u8; BATCH * 4];
        fill_random(&mut bytes)?;
        for (k, c) in self.buf.iter_mut().zip(bytes.chunks_exact(4)) {
            *k = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
        }
        self.left = BATCH;
        Ok(())
    }
}

/// Fills `buf` from getrandom(2), or /dev/urandom where the system call
/// does not exist.
fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    let mut interrupted = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: the pointer and length describe `rest`, a live, writable
        // byte slice; getrandom writes at most that many bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            done += n as usize;
            continue;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) if interrupted < MAX_EINTR => interrupted += 1,
            Some(libc::ENOSYS) => return File::open("/dev/urandom")?.read_exact(rest),
            _ => return Err(e),
        }
    }
    Ok(())
}

/// Hash for random 32-bit keys: one multiply by an odd constant (a
/// bijection that spreads the key into the high bits too). The keys are
/// secret uniform draws chosen by the daemon, so nobody can aim inserts
/// at one bucket; a keyed SipHash would only cost time on every packet.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

const MUL: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(MUL);
        }
    }
    fn write_u32(&mut self, k: u32) {
        self.0 = (self.0 ^ u64::from(k)).wrapping_mul(MUL);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map from keys, O(1) lookup without SipHash.
pub(crate) type KeyMap<V> = std::collections::HashMap<u32, V, BuildHasherDefault<KeyHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_distinct_and_not_sequential() {
        let mut s = KeySource::default();
        let keys: Vec<u32> = (0..1000).map(|_| s.next_key().unwrap()).collect();
        let set: HashSet<u32> = keys.iter().copied().collect();
        // 1000 draws from 2^32 collide with probability ~1e-4.
        assert!(set.len() >= 999);
        let steps: HashSet<u32> = keys.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(steps.len() > 990, "no constant stride between keys");
        // Every bit position takes both values across the draws.
        let or = keys.iter().fold(0u32, |a, k| a | k);
        let and = keys.iter().fold(u32::MAX, |a, k| a & k);
        assert_eq!((or, and), (u32::MAX, 0));
    }

    #[test]
    fn key_map_spreads_keys_over_buckets() {
        let mut h = KeyHasher::default();
        h.write_u32(1);
        let a = h.finish();
        let mut h = KeyHasher::default();
        h.write_u32(2);
        assert_ne!(a >> 57, h.finish() >> 57, "high bits depend on the key");
        let mut m: KeyMap<u32> = KeyMap::default();
        for k in 0..10_000u32 {
            m.insert(k.wrapping_mul(0x0101_0107), k);
        }
        assert_eq!(m.get(&(77u32.wrapping_mul(0x0101_0107))), Some(&77));
        assert_eq!(m.get(&5), None);
    }
}
