//! Completion channels: a seqpacket socket pair. The daemon gets the write
//! end with each CreateCq and writes one 8-byte record (the CQ's
//! `user_handle`) when an armed CQ gets a matching completion.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::error::{Error, Result};
use super::sock::{self, Record};

/// Size of one completion event record.
pub const CQ_EVENT_LEN: usize = 8;

/// A completion channel. Clones share it; a CQ created with it holds a clone.
#[derive(Clone)]
pub struct CompChannel {
    inner: Arc<Inner>,
}

struct Inner {
    rd: OwnedFd,
    /// Sent to the daemon with each CreateCq; also used to put back records
    /// of other CQs when a destroyed CQ's records are purged.
    wr: OwnedFd,
    received: AtomicU64,
}

impl CompChannel {
    pub fn new() -> Result<CompChannel> {
        let (rd, wr) = sock::seqpacket_pair()?;
        Ok(CompChannel {
            inner: Arc::new(Inner {
                rd,
                wr,
                received: AtomicU64::new(0),
            }),
        })
    }

    /// A channel over an existing socket pair (SOCK_SEQPACKET): `rd` the
    /// end events are read from, `wr` the end they are written to — e.g.
    /// a copy of the application's channel fd and of its peer, as the
    /// uverbs emulation made them.
    pub fn from_fds(rd: OwnedFd, wr: OwnedFd) -> CompChannel {
        CompChannel {
            inner: Arc::new(Inner {
                rd,
                wr,
                received: AtomicU64::new(0),
            }),
        }
    }

    /// The fd to poll (readable when an event waits). Blocking by default;
    /// callers may make it non-blocking.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inner.rd.as_fd()
    }

    pub(crate) fn write_end(&self) -> BorrowedFd<'_> {
        self.inner.wr.as_fd()
    }

    /// Blocks until the next event; returns the CQ's `user_handle`.
    pub fn get_cq_event(&self) -> Result<u64> {
        loop {
            if let Some(h) = self.get_cq_event_timeout(None)? {
                return Ok(h);
            }
        }
    }

    /// Waits up to `timeout` (None: forever) for the next event.
    pub fn get_cq_event_timeout(&self, timeout: Option<Duration>) -> Result<Option<u64>> {
        match sock::read_record_timeout::<CQ_EVENT_LEN>(self.fd(), timeout) {
            Ok(Some(b)) => {
                self.inner.received.fetch_add(1, Ordering::Relaxed);
                Ok(Some(u64::from_ne_bytes(b)))
            }
            Ok(None) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(Error::Disconnected),
            Err(e) => Err(e.into()),
        }
    }

    /// A reference that does not keep the channel alive.
    pub(crate) fn downgrade(&self) -> ChannelRef {
        ChannelRef(Arc::downgrade(&self.inner))
    }

    /// Shuts the channel down for writing: readers get what is queued,
    /// then EOF (the daemon is gone, nothing more will come).
    pub(crate) fn hang_up(&self) {
        sock::shutdown_write(std::os::fd::AsRawFd::as_raw_fd(&self.inner.wr));
    }

    /// Events read so far.
    pub fn events_received(&self) -> u64 {
        self.inner.received.load(Ordering::Relaxed)
    }

    /// Drops queued records carrying `user_handle` (a CQ being destroyed)
    /// and puts the others back. Returns how many were dropped. Best effort:
    /// a reader in another thread may take a record meanwhile.
    pub(crate) fn purge(&self, user_handle: u64) -> usize {
        let mut keep = Vec::new();
        let mut dropped = 0;
        // Bounded: the socket's buffer holds a finite number of records.
        for _ in 0..65_536 {
            match sock::recv_record::<CQ_EVENT_LEN>(self.fd(), libc::MSG_DONTWAIT) {
                Ok(Record::Got(b)) if u64::from_ne_bytes(b) == user_handle => dropped += 1,
                Ok(Record::Got(b)) => keep.push(b),
                _ => break,
            }
        }
        for b in keep {
            let _ = sock::send_record(self.write_end(), &b);
        }
        dropped
    }
}

/// A channel known to a context, not kept alive by it.
pub(crate) struct ChannelRef(Weak<Inner>);

impl ChannelRef {
    pub(crate) fn alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    pub(crate) fn is(&self, ch: &CompChannel) -> bool {
        std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&ch.inner))
    }

    pub(crate) fn hang_up(&self) {
        if let Some(inner) = self.0.upgrade() {
            CompChannel { inner }.hang_up();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_and_purge() {
        let ch = CompChannel::new().unwrap();
        let t = Some(Duration::from_millis(1));
        assert_eq!(ch.get_cq_event_timeout(t).unwrap(), None);
        for h in [1u64, 2, 1, 3] {
            sock::send_record(ch.write_end(), &h.to_ne_bytes()).unwrap();
        }
        assert_eq!(ch.purge(1), 2);
        let t = Some(Duration::from_secs(5));
        assert_eq!(ch.get_cq_event_timeout(t).unwrap(), Some(2));
        assert_eq!(ch.get_cq_event().unwrap(), 3);
        assert_eq!(ch.events_received(), 2);
    }
}
