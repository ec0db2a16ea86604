//! 24-bit packet sequence numbers.
//!
//! All arithmetic is modulo 2^24. Ordering uses a half window of 2^23, as
//! the IBA and the kernel's rxe (`psn_compare`) do: `a` is after `b` when
//! `(a - b) mod 2^24` lies in `[1, 2^23)`, before it when it lies in
//! `[2^23, 2^24)`.

#![forbid(unsafe_code)]

use std::fmt;

/// A 24-bit packet sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Mask of the 24 significant bits.
    pub const MASK: u32 = 0x00FF_FFFF;
    /// Half of the sequence space: the comparison window.
    pub const HALF: u32 = 1 << 23;

    /// Builds a PSN from the low 24 bits of `v`.
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The 24-bit value.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n` modulo 2^24.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The next PSN.
    #[inline]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance `self - other` in `[-2^23, 2^23)`.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Unsigned forward distance from `other` to `self`, modulo 2^24.
    #[inline]
    pub const fn distance_from(self, other: Psn) -> u32 {
        self.0.wrapping_sub(other.0) & Self::MASK
    }

    /// True when `self` comes strictly after `other` in the window.
    #[inline]
    pub const fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// True when `self` comes strictly before `other` in the window.
    #[inline]
    pub const fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// True when `self` lies in the inclusive range `[first, last]`
    /// (walking forward from `first`).
    #[inline]
    pub const fn in_range(self, first: Psn, last: Psn) -> bool {
        self.distance_from(first) <= last.distance_from(first)
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::new(Psn::MASK).next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::new(Psn::MASK));
        assert_eq!(Psn::new(0x1_000_005).value(), 5);
    }

    #[test]
    fn window_edges_match_rxe() {
        let b = Psn::new(10);
        assert!(b.add(1).is_after(b));
        assert!(b.add(Psn::HALF - 1).is_after(b));
        // Exactly half the space away counts as "before", as in rxe.
        assert!(b.add(Psn::HALF).is_before(b));
        assert_eq!(b.add(Psn::HALF).diff(b), -(Psn::HALF as i32));
        assert_eq!(b.diff(b), 0);
    }

    #[test]
    fn range_across_wrap() {
        let first = Psn::new(Psn::MASK - 2);
        let last = first.add(5);
        assert!(Psn::new(1).in_range(first, last));
        assert!(first.in_range(first, last));
        assert!(last.in_range(first, last));
        assert!(!last.next().in_range(first, last));
        assert!(!first.sub(1).in_range(first, last));
    }

    proptest! {
        #[test]
        fn add_sub_inverse(a in 0u32..=Psn::MASK, n in any::<u32>()) {
            let p = Psn::new(a);
            prop_assert_eq!(p.add(n).sub(n), p);
        }

        #[test]
        fn add_then_diff(a in 0u32..=Psn::MASK, n in 0u32..Psn::HALF) {
            let p = Psn::new(a);
            prop_assert_eq!(p.add(n).diff(p), n as i32);
            prop_assert_eq!(p.diff(p.add(n)), -(n as i32));
            prop_assert_eq!(p.add(n).distance_from(p), n);
        }

        #[test]
        fn antisymmetric(a in 0u32..=Psn::MASK, b in 0u32..=Psn::MASK) {
            let (a, b) = (Psn::new(a), Psn::new(b));
            let d = a.diff(b);
            prop_assert!((-(Psn::HALF as i32)..Psn::HALF as i32).contains(&d));
            if d != -(Psn::HALF as i32) {
                prop_assert_eq!(b.diff(a), -d);
                prop_assert_eq!(a.is_after(b), b.is_before(a));
            }
            prop_assert!(!(a.is_after(b) && a.is_before(b)));
            prop_assert_eq!(b.add(d as u32), a);
        }

        #[test]
        fn value_in_range(v in any::<u32>(), n in any::<u32>()) {
            prop_assert!(Psn::new(v).add(n).value() <= Psn::MASK);
            prop_assert!(Psn::new(v).sub(n).value() <= Psn::MASK);
        }

        #[test]
        fn in_range_matches_distance(f in 0u32..=Psn::MASK, len in 0u32..1000, k in 0u32..2000) {
            let first = Psn::new(f);
            let last = first.add(len);
            prop_assert_eq!(first.add(k).in_range(first, last), k <= len);
        }
    }
}
