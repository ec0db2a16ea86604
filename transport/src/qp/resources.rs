//! Responder resources: what the responder remembers of each READ,
//! atomic, FLUSH and ATOMIC WRITE it executed, so that a duplicate can be
//! answered (READ re-read, atomics from the saved result) without being
//! executed twice. A ring of `max_dest_rd_atomic` slots; a new request
//! recycles the oldest slot instead of being NAKed, as rxe does.

use crate::Psn;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResKind {
    Read { va: u64, rkey: u32, len: u64 },
    Atomic { orig: u64 },
    Flush,
    AtomicWrite,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resource {
    pub kind: ResKind,
    pub first_psn: Psn,
    pub last_psn: Psn,
}

#[derive(Debug, Default)]
pub(crate) struct Resources {
    slots: Vec<Option<Resource>>,
    next: usize,
}

impl Resources {
    /// Sets the number of slots (max_dest_rd_atomic) and forgets all.
    pub(crate) fn resize(&mut self, n: usize) {
        self.slots.clear();
        self.slots.resize(n, None);
        self.next = 0;
    }

    pub(crate) fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
        self.next = 0;
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Stores `r`, replacing the oldest entry when all slots are used.
    pub(crate) fn insert(&mut self, r: Resource) {
        if self.slots.is_empty() {
            return;
        }
        self.slots[self.next] = Some(r);
        self.next = (self.next + 1) % self.slots.len();
    }

    /// The newest resource whose PSN range contains `psn`.
    pub(crate) fn find(&self, psn: Psn) -> Option<Resource> {
        let n = self.slots.len();
        (1..=n)
            .filter_map(|k| self.slots[(self.next + n - k) % n])
            .find(|r| psn.in_range(r.first_psn, r.last_psn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(first: u32, last: u32) -> Resource {
        Resource {
            kind: ResKind::Flush,
            first_psn: Psn::new(first),
            last_psn: Psn::new(last),
        }
    }

    #[test]
    fn recycles_oldest() {
        let mut r = Resources::default();
        r.insert(res(1, 1));
        assert_eq!(r.find(Psn::new(1)), None);
        r.resize(2);
        r.insert(res(1, 1));
        r.insert(res(2, 5));
        assert_eq!(r.find(Psn::new(1)), Some(res(1, 1)));
        assert_eq!(r.find(Psn::new(4)), Some(res(2, 5)));
        r.insert(res(6, 6));
        assert_eq!(r.find(Psn::new(1)), None);
        assert_eq!(r.find(Psn::new(6)), Some(res(6, 6)));
        assert_eq!(r.find(Psn::new(7)), None);
        r.clear();
        assert_eq!(r.find(Psn::new(6)), None);
        assert_eq!(r.capacity(), 2);
    }

    #[test]
    fn range_across_psn_wrap() {
        let mut r = Resources::default();
        r.resize(1);
        r.insert(res(Psn::MASK - 1, 2));
        assert!(r.find(Psn::new(0)).is_some());
        assert!(r.find(Psn::new(3)).is_none());
    }
}
