//! End-to-end credits (IBA 9.7.7.2): the 5-bit credit code an ACK's AETH
//! carries, standing for how many receive WQEs the responder holds beyond
//! the message the AETH's MSN names. Codes 0..=30 are a logarithmic scale
//! (0, 1, 2, 3, 4, then two steps per power of two up to 32768); 31 means
//! "no credit information" (what a responder with an SRQ, or one that
//! does not count, sends).

/// The count each credit code 0..=30 stands for.
const COUNTS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// Code 31: no credit information.
pub const INVALID: u8 = 31;

/// The code for `available` receive WQEs: the largest whose count does
/// not exceed it (a responder must never promise more than it holds).
pub fn encode(available: usize) -> u8 {
    // COUNTS is sorted and starts at 0: the partition point is >= 1.
    let n = COUNTS.partition_point(|&c| c as usize <= available);
    (n - 1) as u8
}

/// The count a code stands for; None for 31 (or anything wider than five
/// bits), which promises nothing.
pub fn decode(code: u8) -> Option<u32> {
    COUNTS.get(usize::from(code)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn table_points() {
        assert_eq!(encode(0), 0);
        assert_eq!(encode(4), 4);
        assert_eq!(encode(5), 4);
        assert_eq!(encode(6), 5);
        assert_eq!(encode(511), 17);
        assert_eq!(encode(512), 18);
        assert_eq!(encode(1 << 20), 30);
        assert_eq!(decode(18), Some(512));
        assert_eq!(decode(30), Some(32768));
        assert_eq!(decode(INVALID), None);
        assert_eq!(decode(0xff), None);
    }

    proptest! {
        /// The code never promises more than is there, and the next code
        /// up would.
        #[test]
        fn encode_is_the_largest_safe_code(n in 0usize..100_000) {
            let c = encode(n);
            prop_assert!(c < INVALID);
            let v = decode(c).unwrap() as usize;
            prop_assert!(v <= n);
            if let Some(next) = decode(c + 1) {
                prop_assert!(next as usize > n);
            }
        }

        #[test]
        fn monotone(a in 0usize..100_000, b in 0usize..100_000) {
            if a <= b {
                prop_assert!(encode(a) <= encode(b));
            }
        }
    }
}
