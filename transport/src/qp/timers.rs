//! Transport timer values: the local ACK timeout and the RNR NAK timer
//! table (IBA encoding, as `enum ib_rnr_timeout` lists it).

use std::time::Duration;

/// Local ACK timeout for the 5-bit exponent: 4.096 us * 2^exp; 0 means
/// no timer at all.
pub fn ack_timeout(exp: u8) -> Option<Duration> {
    match exp {
        0 => None,
        e => Some(Duration::from_nanos(4096u64 << u32::from(e.min(31)))),
    }
}

/// RNR NAK timer in microseconds, by 5-bit code. Code 25 is 61.44 ms
/// (rxe's table has 61.41, a typo).
const RNR_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// How long a requester waits after an RNR NAK carrying `code`.
pub fn rnr_timeout(code: u8) -> Duration {
    Duration::from_micros(u64::from(RNR_US[usize::from(code & 0x1f)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeout_values() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(Duration::from_nanos(8192)));
        // perftest's default 14: about 67 ms.
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(4096 << 14)));
        assert_eq!(ack_timeout(31), Some(Duration::from_nanos(4096u64 << 31)));
    }

    #[test]
    fn rnr_table() {
        assert_eq!(rnr_timeout(0), Duration::from_micros(655_360));
        assert_eq!(rnr_timeout(1), Duration::from_micros(10));
        assert_eq!(rnr_timeout(12), Duration::from_micros(640));
        assert_eq!(rnr_timeout(25), Duration::from_micros(61_440));
        assert_eq!(rnr_timeout(31), Duration::from_micros(491_520));
        // Monotonic from code 1 on.
        for c in 2..32u8 {
            assert!(rnr_timeout(c) > rnr_timeout(c - 1));
        }
    }
}
