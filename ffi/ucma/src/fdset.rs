//! Sets of file descriptors the interposed libc calls test on every call:
//! one bit per fd, one atomic load to ask, so a call on an fd that is not
//! ours costs next to nothing.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

/// Fds below `64 * WORDS` can be members (others never are).
const WORDS: usize = 1 << 14;

pub struct FdSet {
    words: [AtomicU64; WORDS],
}

impl FdSet {
    pub const fn new() -> Self {
        FdSet {
            words: [const { AtomicU64::new(0) }; WORDS],
        }
    }

    fn slot(&self, fd: c_int) -> Option<(&AtomicU64, u64)> {
        let fd = usize::try_from(fd).ok()?;
        Some((self.words.get(fd / 64)?, 1 << (fd % 64)))
    }

    pub fn contains(&self, fd: c_int) -> bool {
        self.slot(fd)
            .is_some_and(|(w, bit)| w.load(Ordering::Acquire) & bit != 0)
    }

    /// Adds `fd`; false if it cannot be a member (negative or too large).
    pub fn insert(&self, fd: c_int) -> bool {
        match self.slot(fd) {
            Some((w, bit)) => {
                w.fetch_or(bit, Ordering::AcqRel);
                true
            }
            None => false,
        }
    }

    pub fn remove(&self, fd: c_int) {
        if let Some((w, bit)) = self.slot(fd) {
            w.fetch_and(!bit, Ordering::AcqRel);
        }
    }
}

impl FdSet {
    /// The members in `[first, last]`.
    pub fn members_in(&self, first: u32, last: u32) -> Vec<c_int> {
        let (first, last) = (first as usize, last as usize);
        let top = last.min(64 * WORDS - 1);
        let mut out = Vec::new();
        let mut w = first / 64;
        while first <= top && w <= top / 64 {
            let bits = self.words[w].load(Ordering::Acquire);
            for b in 0..64 {
                let fd = w * 64 + b;
                if bits & 1 << b != 0 && (first..=top).contains(&fd) {
                    out.push(fd as c_int);
                }
            }
            w += 1;
        }
        out
    }
}

impl Default for FdSet {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_come_and_go() {
        let s = Box::new(FdSet::new());
        assert!(!s.contains(3));
        assert!(s.insert(3) && s.insert(64) && s.insert(65));
        assert!(s.contains(3) && s.contains(64) && s.contains(65));
        s.remove(64);
        assert!(!s.contains(64) && s.contains(65));
        assert!(!s.insert(-1) && !s.contains(-1));
        assert!(!s.insert(64 * WORDS as c_int));
        assert!(!s.contains(c_int::MAX));
        assert_eq!(s.members_in(0, u32::MAX), [3, 65]);
        assert_eq!(s.members_in(4, 65), [65]);
        assert_eq!(s.members_in(3, 3), [3]);
        assert!(s.members_in(66, 64).is_empty());
    }
}
