//! Noticing that the device's daemon is gone, whatever the way it went
//! (`rxu down --force`, SIGTERM, a crash, SIGKILL), and making every part
//! of the client say so instead of waiting forever:
//!
//! - the async event socket delivers IBV_EVENT_DEVICE_FATAL, then EOF.
//!   A stopping daemon writes the event itself and shuts the socket down;
//!   one killed outright cannot, so the client keeps a second write end
//!   and writes the event there (the daemon's shutdown makes that write
//!   fail with EPIPE, so an application never sees two). A socket full
//!   of events the application has not read yet (the daemon then leaves
//!   it open) gets the event from the watcher thread as soon as there is
//!   room, after the others, as the kernel queues it;
//! - completion channels are shut down for writing, so a thread blocked
//!   in `ibv_get_cq_event` reads EOF (-1) instead of sleeping forever (the
//!   client holds a write end of each for its own use, which would keep
//!   the channel open after the daemon's copy closed);
//! - polling a CQ hands out WR_FLUSH_ERR completions for the work still
//!   outstanding (see `queue::Shadow`) and fails after that; posting and
//!   control calls fail with EIO.
//!
//! A dead daemon shows as a hang-up of the control socket. Nothing polls
//! it on the data path, so one thread per context waits for that hang-up
//! (or for the context to close) in poll(2); it costs no CPU meanwhile.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::channel::{ChannelRef, CompChannel};
use super::event::{event_type, AsyncEvent};
use super::sock;

/// Whether the daemon is alive, and what to tell when it is not.
pub(crate) struct Health {
    dead: AtomicBool,
    /// DEVICE_FATAL found the async socket full and is still to be said.
    fatal_pending: AtomicBool,
    /// A write end of the async event socket.
    async_wr: OwnedFd,
    channels: Mutex<Vec<ChannelRef>>,
}

impl Health {
    pub(crate) fn new(async_wr: OwnedFd) -> Health {
        Health {
            dead: AtomicBool::new(false),
            fatal_pending: AtomicBool::new(false),
            async_wr,
            channels: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Remembers a completion channel a CQ of this context uses.
    pub(crate) fn watch_channel(&self, ch: &CompChannel) {
        let mut list = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(ChannelRef::alive);
        if !list.iter().any(|c| c.is(ch)) {
            list.push(ch.downgrade());
        }
        if self.is_dead() {
            ch.hang_up();
        }
    }

    /// The daemon is gone: once, tell everything that waits on it.
    pub(crate) fn die(&self) {
        if self.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        // EPIPE: the daemon sent it and shut the socket down.
        if self.try_say_fatal() == Some(false) {
            self.fatal_pending.store(true, Ordering::Release);
        }
        let list = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        for c in list.iter() {
            c.hang_up();
        }
    }

    /// Writes DEVICE_FATAL and shuts the socket (the reader sees EOF
    /// after it): Some(true) when it went, Some(false) when the socket
    /// has no room now, None when it never will (shut, or gone).
    fn try_say_fatal(&self) -> Option<bool> {
        let rec = AsyncEvent {
            element: 0,
            event_type: event_type::DEVICE_FATAL,
        }
        .to_record();
        match sock::send_record(self.async_wr.as_fd(), &rec) {
            Ok(()) => {
                sock::shutdown_write(self.async_wr.as_raw_fd());
                Some(true)
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) => {
                Some(false)
            }
            Err(_) => None,
        }
    }

    /// A DEVICE_FATAL that found no room: waits until the application has
    /// read enough for it (or `stop` is signalled: the context closes).
    fn say_pending_fatal(&self, stop: RawFd) {
        while self.fatal_pending.load(Ordering::Acquire) {
            let mut fds = [
                libc::pollfd {
                    fd: self.async_wr.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                },
                libc::pollfd {
                    fd: stop,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds on our stack.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return;
            }
            if fds[1].revents != 0 {
                return;
            }
            if fds[0].revents != 0 && self.try_say_fatal() != Some(false) {
                self.fatal_pending.store(false, Ordering::Release);
            }
        }
    }
}

/// The thread that waits for the control socket to hang up.
pub(crate) struct Watcher {
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Watches `ctl`, which must stay open until the watcher is dropped.
    pub(crate) fn start(ctl: RawFd, health: Arc<Health>) -> io::Result<Watcher> {
        // SAFETY: eventfd takes integer arguments and returns a new fd or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: eventfd just returned this descriptor; we own it.
        let stop = unsafe { OwnedFd::from_raw_fd(raw) };
        let stop_fd = stop.as_raw_fd();
        let thread = std::thread::Builder::new()
            .name("rxu-watch".into())
            .spawn(move || {
                if wait_hangup(ctl, stop_fd) {
                    health.die();
                    health.say_pending_fatal(stop_fd);
                }
            })?;
        Ok(Watcher {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), one.as_ptr().cast(), 8) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Blocks until `ctl` hangs up (true) or `stop` is signalled (false).
fn wait_hangup(ctl: RawFd, stop: RawFd) -> bool {
    loop {
        let mut fds = [
            // Only hang-ups: replies arriving must not wake us.
            libc::pollfd {
                fd: ctl,
                events: libc::POLLRDHUP,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds on our stack.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        if fds[1].revents != 0 {
            return false;
        }
        let gone = libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL;
        if fds[0].revents & gone != 0 {
            return true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_hang_up_synthesizes_device_fatal_then_eof() {
        let (ctl, daemon_end) = sock::seqpacket_pair().unwrap();
        let (async_rd, async_wr) = sock::seqpacket_pair().unwrap();
        let ch = CompChannel::new().unwrap();
        let h = Arc::new(Health::new(async_wr));
        h.watch_channel(&ch);
        let w = Watcher::start(ctl.as_raw_fd(), h.clone()).unwrap();
        assert!(!h.is_dead());
        drop(daemon_end);
        let t = Some(Duration::from_secs(5));
        let r = sock::read_record_timeout::<16>(async_rd.as_fd(), t).unwrap();
        let ev = AsyncEvent::from_record(&r.expect("an event"));
        assert_eq!(ev.event_type, event_type::DEVICE_FATAL);
        assert!(h.is_dead());
        assert!(sock::read_record_timeout::<16>(async_rd.as_fd(), t).is_err());
        assert!(ch.get_cq_event_timeout(t).is_err(), "channel hung up");
        drop(w);
    }

    #[test]
    fn a_daemon_that_said_it_first_is_not_repeated() {
        let (ctl, daemon_end) = sock::seqpacket_pair().unwrap();
        let (async_rd, async_wr) = sock::seqpacket_pair().unwrap();
        let daemon_wr = async_wr.try_clone().unwrap();
        let h = Arc::new(Health::new(async_wr));
        let w = Watcher::start(ctl.as_raw_fd(), h.clone()).unwrap();
        let rec = AsyncEvent {
            element: 0,
            event_type: event_type::DEVICE_FATAL,
        }
        .to_record();
        sock::send_record(daemon_wr.as_fd(), &rec).unwrap();
        sock::shutdown_write(daemon_wr.as_raw_fd());
        drop((daemon_end, daemon_wr));
        let t = Some(Duration::from_secs(5));
        assert!(sock::read_record_timeout::<16>(async_rd.as_fd(), t)
            .unwrap()
            .is_some());
        assert!(sock::read_record_timeout::<16>(async_rd.as_fd(), t).is_err());
        for _ in 0..500 {
            if h.is_dead() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(h.is_dead());
        drop(w);
    }

    /// The daemon went while the application had not read its events and
    /// the socket was full: DEVICE_FATAL comes after all of them, once
    /// the application reads, then EOF.
    #[test]
    fn device_fatal_waits_for_room_on_a_full_socket() {
        let (ctl, daemon_end) = sock::seqpacket_pair().unwrap();
        let (async_rd, async_wr) = sock::seqpacket_pair().unwrap();
        let daemon_wr = async_wr.try_clone().unwrap();
        let h = Arc::new(Health::new(async_wr));
        let w = Watcher::start(ctl.as_raw_fd(), h.clone()).unwrap();
        let port_active = AsyncEvent {
            element: 1,
            event_type: event_type::PORT_ACTIVE,
        }
        .to_record();
        let mut queued = 0;
        while queued < 100_000 && sock::send_record(daemon_wr.as_fd(), &port_active).is_ok() {
            queued += 1;
        }
        assert!(queued > 0 && queued < 100_000, "{queued} records fit");
        // The daemon lets a full socket go without shutting it down.
        drop((daemon_end, daemon_wr));
        for _ in 0..500 {
            if h.is_dead() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(h.is_dead());
        let t = Some(Duration::from_secs(5));
        for i in 0..queued {
            let r = sock::read_record_timeout::<16>(async_rd.as_fd(), t).unwrap();
            let ev = AsyncEvent::from_record(&r.expect("an event"));
            assert_eq!(ev.event_type, event_type::PORT_ACTIVE, "record {i}");
        }
        let r = sock::read_record_timeout::<16>(async_rd.as_fd(), t).unwrap();
        let ev = AsyncEvent::from_record(&r.expect("DEVICE_FATAL after the others"));
        assert_eq!(ev.event_type, event_type::DEVICE_FATAL);
        assert!(sock::read_record_timeout::<16>(async_rd.as_fd(), t).is_err());
        drop(w);
    }

    #[test]
    fn closing_the_context_stops_the_watcher() {
        let (ctl, _daemon_end) = sock::seqpacket_pair().unwrap();
        let (_rd, wr) = sock::seqpacket_pair().unwrap();
        let h = Arc::new(Health::new(wr));
        drop(Watcher::start(ctl.as_raw_fd(), h.clone()).unwrap());
        assert!(!h.is_dead());
    }
}
