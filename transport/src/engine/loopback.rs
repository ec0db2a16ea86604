//! The intra-device shortcut's queue: packets a device sends to its own
//! address and port wait here, built and sealed (headers, PSN, ICRC)
//! exactly as they would go on the wire, until the driver's next receive
//! hands them to the same endpoint — the kernel rxe's `rxe_loopback`,
//! which skips the IP/UDP stack but not the packet. The driver owns the
//! queue; this file only stores packets.
//!
//! Bounded: a fixed number of preallocated slots, no allocation per
//! packet. A full queue is back-pressure, like a full socket buffer: the
//! driver's send batch has no room, the QPs keep their packets and make
//! them again on the next transmit, after the next receive emptied the
//! queue (the receive side is the same thread and takes every packet).
//! Dropping instead would lose UC and UD messages the UDP path, with its
//! large socket buffer, delivers.

/// A ring of packet slots, each with a tag of the sender's (the addresses
/// the packet went between).
pub(crate) struct LoopQueue<T: Copy + Default> {
    data: Vec<u8>,
    slot: usize,
    lens: Vec<usize>,
    tags: Vec<T>,
    /// Oldest packet.
    head: usize,
    /// Packets queued.
    len: usize,
}

impl<T: Copy + Default> LoopQueue<T> {
    /// `slots` packets of at most `slot` bytes each.
    pub fn new(slots: usize, slot: usize) -> LoopQueue<T> {
        let slots = slots.max(1);
        LoopQueue {
            data: vec![0; slots * slot],
            slot,
            lens: vec![0; slots],
            tags: vec![T::default(); slots],
            head: 0,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len == self.lens.len()
    }

    /// Appends a copy of `pkt` with its tag; returns its index for
    /// [`LoopQueue::get_mut`], None when the queue is full or the packet
    /// too large.
    pub fn push(&mut self, pkt: &[u8], tag: T) -> Option<usize> {
        if self.is_full() || pkt.len() > self.slot {
            return None;
        }
        let i = (self.head + self.len) % self.lens.len();
        self.data[i * self.slot..i * self.slot + pkt.len()].copy_from_slice(pkt);
        self.lens[i] = pkt.len();
        self.tags[i] = tag;
        self.len += 1;
        Some(i)
    }

    /// The packet in slot `i` (as pushed).
    pub fn get_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        let len = *self.lens.get(i)?;
        Some(&mut self.data[i * self.slot..i * self.slot + len])
    }

    /// The oldest packet and its tag, handed to `f`, then removed; false
    /// when empty.
    pub fn pop_with(&mut self, f: impl FnOnce(T, &mut [u8])) -> bool {
        if self.len == 0 {
            return false;
        }
        let i = self.head;
        let len = self.lens[i];
        f(
            self.tags[i],
            &mut self.data[i * self.slot..i * self.slot + len],
        );
        self.head = (i + 1) % self.lens.len();
        self.len -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_bounded_and_wraps() {
        let mut q = LoopQueue::<u8>::new(3, 8);
        assert!(q.is_empty());
        assert_eq!(q.push(&[1], 10), Some(0));
        assert_eq!(q.push(&[2, 2], 20), Some(1));
        assert_eq!(q.push(&[3; 9], 0), None, "larger than a slot");
        assert_eq!(q.push(&[3, 3, 3], 30), Some(2));
        assert!(q.is_full());
        assert_eq!(q.push(&[4], 0), None, "full: refused, not grown");
        q.get_mut(1).unwrap()[0] = 7;
        let mut seen = Vec::new();
        assert!(q.pop_with(|t, p| seen.push((t, p.to_vec()))));
        assert_eq!(q.push(&[5; 4], 50), Some(0), "wrapped into the freed slot");
        while q.pop_with(|t, p| seen.push((t, p.to_vec()))) {}
        assert_eq!(
            seen,
            vec![
                (10, vec![1]),
                (20, vec![7, 2]),
                (30, vec![3, 3, 3]),
                (50, vec![5, 5, 5, 5])
            ]
        );
        assert!(q.is_empty());
        assert!(!q.pop_with(|_, _| panic!("empty")));
    }
}
