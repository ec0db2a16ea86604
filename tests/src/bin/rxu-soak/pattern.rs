//! Transfer contents derived from a seed and an offset: whoever checks a
//! byte needs only the seed of the transfer and where the byte sits in it.

pub fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of operation `seq` of lane `lane` of the process incarnation
/// `nonce` (distinct per incarnation: a stale packet carries other bytes).
pub fn op_seed(nonce: u64, lane: usize, seq: u64) -> u64 {
    splitmix(nonce ^ splitmix((lane as u64) << 40 ^ seq))
}

/// The byte at offset `off` of a transfer seeded `seed`.
fn word(seed: u64, off: usize) -> [u8; 8] {
    splitmix(seed ^ (off as u64 / 8)).to_le_bytes()
}

/// Fills `out` with the bytes at offsets 0.. of the transfer seeded `seed`.
pub fn fill(seed: u64, out: &mut [u8]) {
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&word(seed, i * 8)[..chunk.len()]);
    }
}

/// The first offset where `got` differs from the transfer seeded `seed`.
pub fn first_bad(seed: u64, got: &[u8]) -> Option<usize> {
    for (i, chunk) in got.chunks(8).enumerate() {
        let want = word(seed, i * 8);
        if let Some(j) = chunk.iter().zip(&want).position(|(a, b)| a != b) {
            return Some(i * 8 + j);
        }
    }
    None
}

/// A small pseudo-random stream (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix(self.0)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A transfer size from 1 B to `max`: mostly small, some medium, a few
    /// of the largest sizes.
    pub fn size(&mut self, max: usize) -> usize {
        let (lo, hi) = match self.below(100) {
            0..=64 => (1, 4096),
            65..=94 => (4097, 256 << 10),
            _ => (256 << 10, max),
        };
        let hi = hi.min(max).max(1);
        let lo = lo.min(hi);
        // Log-uniform within the band, then uniform within the octave.
        let bits = 64 - (hi as u64).leading_zeros() as u64;
        let top = 1u64 << self.below(bits + 1);
        (lo as u64 + self.below(top)).min(hi as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_check_agree_and_catch_one_flipped_byte() {
        let mut b = vec![0u8; 1001];
        fill(7, &mut b);
        assert_eq!(first_bad(7, &b), None);
        b[517] ^= 1;
        assert_eq!(first_bad(7, &b), Some(517));
        assert!(first_bad(8, &b).is_some());
    }

    #[test]
    fn sizes_stay_in_range() {
        let mut r = Rng::new(1);
        for _ in 0..10_000 {
            let s = r.size(4 << 20);
            assert!((1..=4 << 20).contains(&s), "{s}");
        }
        assert!((0..1000).all(|_| r.size(100) <= 100));
    }
}
