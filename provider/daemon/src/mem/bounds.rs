//! Address arithmetic of a region, overflow-safe: every sum is checked, so
//! no address near 2^64 wraps into the region.

use transport::qp::MemError;

/// Offset of `[va, va + n)` inside `[base, base + len)`, or
/// [`MemError::OutOfBounds`] if any byte lies outside (or the end wraps).
/// A zero-length access is in bounds anywhere in `[base, base + len]`.
pub(crate) fn offset_in(base: u64, len: u64, va: u64, n: u64) -> Result<u64, MemError> {
    let off = va.checked_sub(base).ok_or(MemError::OutOfBounds)?;
    let end = off.checked_add(n).ok_or(MemError::OutOfBounds)?;
    if end > len {
        return Err(MemError::OutOfBounds);
    }
    Ok(off)
}

/// The client address of `[va, va + n)` in a region registered at client
/// address `addr` and addressed as `[base, base + len)`.
pub(crate) fn translate(addr: u64, base: u64, len: u64, va: u64, n: u64) -> Result<u64, MemError> {
    let off = offset_in(base, len, va, n)?;
    // Registration refuses regions whose end wraps, so this only fails on
    // a table entry that could not have been created.
    addr.checked_add(off).ok_or(MemError::OutOfBounds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn edges() {
        assert_eq!(offset_in(100, 10, 100, 10), Ok(0));
        assert_eq!(offset_in(100, 10, 109, 1), Ok(9));
        assert_eq!(offset_in(100, 10, 110, 0), Ok(10));
        assert_eq!(offset_in(100, 10, 99, 1), Err(MemError::OutOfBounds));
        assert_eq!(offset_in(100, 10, 99, 0), Err(MemError::OutOfBounds));
        assert_eq!(offset_in(100, 10, 101, 10), Err(MemError::OutOfBounds));
        assert_eq!(offset_in(100, 10, 110, 1), Err(MemError::OutOfBounds));
        assert_eq!(
            offset_in(100, 10, 105, u64::MAX),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            offset_in(0, u64::MAX, u64::MAX, 1),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(offset_in(0, u64::MAX, u64::MAX - 1, 1), Ok(u64::MAX - 1));
        assert_eq!(translate(5000, 100, 10, 104, 4), Ok(5004));
        assert_eq!(translate(u64::MAX, 0, 10, 1, 1), Err(MemError::OutOfBounds));
    }

    proptest! {
        /// offset_in agrees with exact (128-bit) arithmetic for any inputs.
        #[test]
        fn offset_matches_wide_arithmetic(base: u64, len: u64, va: u64, n: u64) {
            let (b, l, v, m) = (base as u128, len as u128, va as u128, n as u128);
            let inside = v >= b && v + m <= b + l;
            match offset_in(base, len, va, n) {
                Ok(off) => {
                    prop_assert!(inside);
                    prop_assert_eq!(off as u128, v - b);
                }
                Err(e) => {
                    prop_assert!(!inside);
                    prop_assert_eq!(e, MemError::OutOfBounds);
                }
            }
        }

        /// Near the ends of the region and of the address space.
        #[test]
        fn offset_near_edges(base in prop_oneof![Just(0u64), Just(u64::MAX - 4096), any::<u64>()],
                             len in 0u64..8192,
                             dv in -10i64..10, end_side: bool, n in 0u64..20) {
            let anchor = if end_side { base.wrapping_add(len) } else { base };
            let va = anchor.wrapping_add(dv as u64);
            let (b, l, v, m) = (base as u128, len as u128, va as u128, n as u128);
            let inside = v >= b && v + m <= b + l;
            prop_assert_eq!(offset_in(base, len, va, n).is_ok(), inside);
        }

        /// A translated range always lies inside the client's region.
        #[test]
        fn translate_stays_in_region(addr in 0u64..(1 << 48), base: u64, len in 0u64..(1 << 40),
                                     va: u64, n in 0u64..(1 << 20)) {
            if let Ok(a) = translate(addr, base, len, va, n) {
                prop_assert!(a >= addr);
                prop_assert!(a as u128 + n as u128 <= addr as u128 + len as u128);
            }
        }
    }
}
