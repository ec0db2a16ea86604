//! The two ends of a ring: one `Producer`, one `Consumer`, usually in two
//! processes.
//!
//! Each end keeps its own index privately and only ever *stores* it to shared
//! memory; it never reads it back, so a peer overwriting our index cannot
//! confuse us. The peer's index is read on every operation and checked:
//! `producer - consumer` (wrapping) must lie in `0..=slots`, otherwise the
//! call returns [`RingError::Corrupt`] and touches no slot.
//!
//! Each end also caches the peer index it last validated and reloads it only
//! when the cache says full (producer) or empty (consumer): a stale value is
//! always the conservative one, and the peer's cache line is not pulled over
//! on every operation.
//!
//! Ordering: the producer fills a slot, then stores its index with Release;
//! the consumer loads it with Acquire, then reads the slot. Symmetrically the
//! consumer's Release store of its index tells the producer the slot may be
//! overwritten.

use std::io;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use super::doorbell::Doorbell;
use super::region::Region;
use super::RingError;

fn check_distance(region: &Region, prod: u32, cons: u32) -> Result<u32, RingError> {
    let slots = region.geometry().slots();
    let used = prod.wrapping_sub(cons);
    if used > slots {
        return Err(RingError::Corrupt { prod, cons, slots });
    }
    Ok(used)
}

/// The writing end. Not `Clone`: one producer per ring is the contract.
pub struct Producer {
    region: Region,
    tail: u32,
    /// Last validated consumer index; `tail - cached_cons <= slots`.
    cached_cons: u32,
}

impl Producer {
    pub(super) fn new(region: Region) -> Self {
        // Our starting point is whatever the ring says now; from here on our
        // own copy is the truth.
        let tail = region.producer_index().load(Ordering::Acquire);
        // "Full" until the first look at the real consumer index.
        let cached_cons = tail.wrapping_sub(region.geometry().slots());
        Self {
            region,
            tail,
            cached_cons,
        }
    }

    pub fn slot_size(&self) -> usize {
        self.region.geometry().slot_size() as usize
    }

    pub fn capacity(&self) -> u32 {
        self.region.geometry().slots()
    }

    /// Entries published and not yet released by the consumer.
    pub fn len(&self) -> Result<u32, RingError> {
        let cons = self.region.consumer_index().load(Ordering::Acquire);
        check_distance(&self.region, self.tail, cons)
    }

    pub fn is_empty(&self) -> Result<bool, RingError> {
        Ok(self.len()? == 0)
    }

    pub fn free_slots(&self) -> Result<u32, RingError> {
        Ok(self.capacity() - self.len()?)
    }

    /// Copies `data` into the next slot (zero-padding the rest) and publishes
    /// it. `Ok(false)`: the ring is full, nothing was written.
    pub fn try_push(&mut self, data: &[u8]) -> Result<bool, RingError> {
        if data.len() > self.slot_size() {
            return Err(RingError::TooLarge {
                len: data.len(),
                slot_size: self.slot_size(),
            });
        }
        match self.reserve()? {
            None => Ok(false),
            Some(mut slot) => {
                slot.write(0, data)?;
                slot.zero_from(data.len());
                slot.commit();
                Ok(true)
            }
        }
    }

    /// Hands out the next free slot for writing in place; nothing is visible
    /// to the consumer until [`WriteSlot::commit`]. The slot still holds
    /// whatever an earlier entry left there.
    pub fn reserve(&mut self) -> Result<Option<WriteSlot<'_>>, RingError> {
        if self.tail.wrapping_sub(self.cached_cons) >= self.capacity() {
            let cons = self.region.consumer_index().load(Ordering::Acquire);
            let used = check_distance(&self.region, self.tail, cons)?;
            self.cached_cons = cons;
            if used == self.capacity() {
                return Ok(None);
            }
        }
        Ok(Some(WriteSlot { producer: self }))
    }

    /// Whether the consumer said it is going to sleep. Call after publishing;
    /// the fence pairs with the one in [`Consumer::prepare_sleep`] so that at
    /// least one side sees the other's store (see the module docs of `ring`).
    pub fn wake_needed(&self) -> bool {
        fence(Ordering::SeqCst);
        self.region.sleeping_flag().load(Ordering::Relaxed) != 0
    }

    /// Rings `bell` if the consumer sleeps. Returns whether it rang.
    pub fn notify(&self, bell: &Doorbell) -> io::Result<bool> {
        if self.wake_needed() {
            bell.ring()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Reads the consumer-flag word. On a CQ ring it is the arm word the
    /// client sets with [`Consumer::set_flag`] (1 = signal the next
    /// completion, 2 = the next solicited one). Call after publishing: the
    /// fence pairs with the one in `set_flag`, so either the producer sees
    /// the arm or the consumer's next poll sees the entry.
    pub fn flag(&self) -> u32 {
        fence(Ordering::SeqCst);
        self.region.sleeping_flag().load(Ordering::Relaxed)
    }

    /// Clears the consumer-flag word if it still holds `seen`; true if this
    /// call cleared it (so an arm is answered by exactly one event).
    pub fn clear_flag(&self, seen: u32) -> bool {
        self.region
            .sleeping_flag()
            .compare_exchange(seen, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Copies each entry published and not yet consumed, oldest first,
    /// into `buf` (at least a slot long) and hands it to `f`; returns how
    /// many. For moving a CQ's unread entries to a new ring on resize; the
    /// consumer must not be consuming meanwhile (it holds its CQ lock).
    pub fn read_unconsumed(
        &self,
        buf: &mut [u8],
        mut f: impl FnMut(&[u8]),
    ) -> Result<u32, RingError> {
        let slot = self.slot_size();
        if buf.len() < slot {
            return Err(RingError::BufferTooSmall {
                len: buf.len(),
                slot_size: slot,
            });
        }
        let cons = self.region.consumer_index().load(Ordering::Acquire);
        let used = check_distance(&self.region, self.tail, cons)?;
        for i in 0..used {
            self.region
                .read_slot(cons.wrapping_add(i), 0, &mut buf[..slot]);
            f(&buf[..slot]);
        }
        Ok(used)
    }

    fn publish(&mut self) {
        self.tail = self.tail.wrapping_add(1);
        self.region
            .producer_index()
            .store(self.tail, Ordering::Release);
    }
}

/// A reserved, not yet published slot. Dropping it publishes nothing.
pub struct WriteSlot<'a> {
    producer: &'a mut Producer,
}

impl WriteSlot<'_> {
    pub fn len(&self) -> usize {
        self.producer.slot_size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes `data` at byte `at` of the slot.
    pub fn write(&mut self, at: usize, data: &[u8]) -> Result<(), RingError> {
        out_of_slot(at, data.len(), self.len())?;
        let p = &*self.producer;
        p.region.write_slot(p.tail, at, data);
        Ok(())
    }

    /// Zeroes the slot from byte `at` to its end.
    pub fn zero_from(&mut self, at: usize) {
        let p = &*self.producer;
        p.region.zero_slot_tail(p.tail, at);
    }

    /// Publishes the slot to the consumer.
    pub fn commit(self) {
        self.producer.publish();
    }
}

/// The reading end. Not `Clone`: one consumer per ring is the contract.
///
/// A consumer may read ahead of what it releases ([`ReadSlot::keep`],
/// [`Consumer::release_read`]): an SRQ's receives are read when the daemon
/// takes them into the transport, but their slots are given back only when
/// a message uses them, so the producer's free space is what it has
/// outstanding, as with rxe's SRQ ring. Every entry read is copied out
/// first, so which slots are given back does not matter, only how many.
pub struct Consumer {
    region: Region,
    /// The oldest entry not released.
    head: u32,
    /// Entries from `head` on read and kept (not released): the next to
    /// read is `head + ahead`.
    ahead: u32,
    /// Last validated producer index; `cached_prod - head <= slots`.
    cached_prod: u32,
}

impl Consumer {
    pub(super) fn new(region: Region) -> Self {
        let head = region.consumer_index().load(Ordering::Acquire);
        // "Empty" until the first look at the real producer index.
        Self {
            region,
            head,
            ahead: 0,
            cached_prod: head,
        }
    }

    /// The next entry to read.
    fn next(&self) -> u32 {
        self.head.wrapping_add(self.ahead)
    }

    /// Entries published and not yet read, from producer index `prod`. A
    /// producer index behind what was read is corrupt.
    fn unread_at(&self, prod: u32) -> Result<u32, RingError> {
        let used = check_distance(&self.region, prod, self.head)?;
        used.checked_sub(self.ahead).ok_or(RingError::Corrupt {
            prod,
            cons: self.next(),
            slots: self.region.geometry().slots(),
        })
    }

    pub fn slot_size(&self) -> usize {
        self.region.geometry().slot_size() as usize
    }

    pub fn capacity(&self) -> u32 {
        self.region.geometry().slots()
    }

    /// Entries published by the producer and not yet released by us
    /// (those read ahead included).
    pub fn len(&self) -> Result<u32, RingError> {
        let prod = self.region.producer_index().load(Ordering::Acquire);
        check_distance(&self.region, prod, self.head)
    }

    /// Entries published and not yet read.
    pub fn unread(&self) -> Result<u32, RingError> {
        self.unread_at(self.region.producer_index().load(Ordering::Acquire))
    }

    /// Nothing left to read.
    pub fn is_empty(&self) -> Result<bool, RingError> {
        Ok(self.unread()? == 0)
    }

    /// Entries read and kept, not yet released.
    pub fn read_ahead(&self) -> u32 {
        self.ahead
    }

    /// Releases up to `n` of the entries read and kept; returns how many.
    pub fn release_read(&mut self, n: u32) -> u32 {
        let n = n.min(self.ahead);
        if n > 0 {
            self.ahead -= n;
            self.head = self.head.wrapping_add(n);
            self.region
                .consumer_index()
                .store(self.head, Ordering::Release);
        }
        n
    }

    /// Copies the next entry (a whole slot) into `out[..slot_size]` and
    /// releases it. `Ok(false)`: the ring is empty.
    pub fn try_pop(&mut self, out: &mut [u8]) -> Result<bool, RingError> {
        let slot_size = self.slot_size();
        if out.len() < slot_size {
            return Err(RingError::BufferTooSmall {
                len: out.len(),
                slot_size,
            });
        }
        match self.peek()? {
            None => Ok(false),
            Some(slot) => {
                slot.read(0, &mut out[..slot_size])?;
                slot.release();
                Ok(true)
            }
        }
    }

    /// Looks at the next unread entry without consuming it;
    /// [`ReadSlot::release`] consumes it, [`ReadSlot::keep`] reads it
    /// ahead, dropping the guard leaves it in the ring.
    pub fn peek(&mut self) -> Result<Option<ReadSlot<'_>>, RingError> {
        if self.cached_prod == self.next() {
            let prod = self.region.producer_index().load(Ordering::Acquire);
            if self.unread_at(prod)? == 0 {
                return Ok(None);
            }
            self.cached_prod = prod;
        }
        Ok(Some(ReadSlot { consumer: self }))
    }

    /// Step one of going to sleep: raise the flag, then look again. Returns
    /// `Ok(true)` if the ring is still empty and the caller may block on the
    /// doorbell (then call [`Consumer::end_sleep`] on waking), `Ok(false)` if
    /// an entry arrived meanwhile (the flag is already lowered again).
    pub fn prepare_sleep(&self) -> Result<bool, RingError> {
        let flag = self.region.sleeping_flag();
        flag.store(1, Ordering::Relaxed);
        // Pairs with the fence in Producer::wake_needed: either we see the
        // producer's new index below, or it sees our flag and rings.
        fence(Ordering::SeqCst);
        match self.is_empty() {
            Ok(true) => Ok(true),
            other => {
                flag.store(0, Ordering::Relaxed);
                other
            }
        }
    }

    /// Lowers the sleeping flag so the producer stops ringing.
    pub fn end_sleep(&self) {
        self.region.sleeping_flag().store(0, Ordering::Relaxed);
    }

    /// Stores `value` in the consumer-flag word, for rings whose consumer
    /// never sleeps on a doorbell: a CQ's consumer arms it (1 = next
    /// completion, 2 = next solicited completion) instead. The fence pairs
    /// with the one in [`Producer::flag`]; poll again after arming.
    pub fn set_flag(&self, value: u32) {
        self.region.sleeping_flag().store(value, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Copies each entry published and not yet read, oldest first, into
    /// `buf` (at least a slot long) and hands it to `f`, consuming
    /// nothing; returns how many. For moving an SRQ's posted receives to a
    /// new ring on resize; the producer must not publish meanwhile (it
    /// holds its SRQ lock). The count is validated once: a producer that
    /// moves its index during the call changes nothing here.
    pub fn read_unconsumed(
        &self,
        buf: &mut [u8],
        mut f: impl FnMut(&[u8]),
    ) -> Result<u32, RingError> {
        let slot = self.slot_size();
        if buf.len() < slot {
            return Err(RingError::BufferTooSmall {
                len: buf.len(),
                slot_size: slot,
            });
        }
        let unread = self.unread()?;
        for i in 0..unread {
            self.region
                .read_slot(self.next().wrapping_add(i), 0, &mut buf[..slot]);
            f(&buf[..slot]);
        }
        Ok(unread)
    }

    /// Drops the unconsumed entries `keep` refuses and keeps the others
    /// in order, compacting them toward the newest end in place (as
    /// hardware providers clean a CQ of a QP moved to RESET); returns how
    /// many were dropped. `buf` must hold a slot. The producer may go on
    /// publishing meanwhile: only slots it published and we have not
    /// released are rewritten, and they are released only after. Not for
    /// a ring read ahead (its kept slots would be freed first).
    pub fn retain(
        &mut self,
        buf: &mut [u8],
        mut keep: impl FnMut(&[u8]) -> bool,
    ) -> Result<u32, RingError> {
        if self.ahead != 0 {
            return Err(RingError::ReadAhead(self.ahead));
        }
        let slot = self.slot_size();
        if buf.len() < slot {
            return Err(RingError::BufferTooSmall {
                len: buf.len(),
                slot_size: slot,
            });
        }
        let used = self.len()?;
        let mut dropped = 0u32;
        for i in (0..used).rev() {
            let at = self.head.wrapping_add(i);
            self.region.read_slot(at, 0, &mut buf[..slot]);
            if !keep(&buf[..slot]) {
                dropped += 1;
            } else if dropped > 0 {
                self.region
                    .write_slot(at.wrapping_add(dropped), 0, &buf[..slot]);
            }
        }
        if dropped > 0 {
            // The producer index validated above; the head moves past
            // the freed slots only after the survivors were written.
            self.cached_prod = self.head.wrapping_add(used);
            self.head = self.head.wrapping_add(dropped);
            self.region
                .consumer_index()
                .store(self.head, Ordering::Release);
        }
        Ok(dropped)
    }

    /// Blocks until the ring is non-empty, the doorbell rings, or `timeout`
    /// passes, using the sleep protocol. Returns whether entries are waiting.
    /// Spurious returns are possible; callers loop.
    pub fn wait(&self, bell: &Doorbell, timeout: Option<Duration>) -> Result<bool, RingError> {
        if self.prepare_sleep()? {
            let waited = bell.wait(timeout);
            self.end_sleep();
            waited?;
            bell.drain()?;
        }
        Ok(!self.is_empty()?)
    }

    fn release(&mut self) {
        self.head = self.head.wrapping_add(1);
        self.region
            .consumer_index()
            .store(self.head, Ordering::Release);
    }
}

/// The oldest unconsumed entry. Reads copy out of shared memory; the
/// producer may not touch the slot until it is released, but a hostile one
/// could, so decode only what was copied.
pub struct ReadSlot<'a> {
    consumer: &'a mut Consumer,
}

impl ReadSlot<'_> {
    pub fn len(&self) -> usize {
        self.consumer.slot_size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `out.len()` bytes starting at byte `at` of the slot.
    pub fn read(&self, at: usize, out: &mut [u8]) -> Result<(), RingError> {
        out_of_slot(at, out.len(), self.len())?;
        let c = &*self.consumer;
        c.region.read_slot(c.next(), at, out);
        Ok(())
    }

    /// Consumes the entry: the producer may reuse a slot. (With entries
    /// read ahead it is the oldest kept one's slot that is given back;
    /// this entry becomes one of those kept: the count is what matters.)
    pub fn release(self) {
        self.consumer.release();
    }

    /// Reads the entry ahead: the next peek shows the one after it, and
    /// its slot stays the consumer's until [`Consumer::release_read`].
    pub fn keep(self) {
        self.consumer.ahead += 1;
    }
}

fn out_of_slot(at: usize, len: usize, slot_size: usize) -> Result<(), RingError> {
    match at.checked_add(len) {
        Some(end) if end <= slot_size => Ok(()),
        _ => Err(RingError::OutOfSlot { at, len, slot_size }),
    }
}
