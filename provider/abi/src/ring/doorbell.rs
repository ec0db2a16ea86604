//! A doorbell: an eventfd the producer writes to wake a sleeping consumer.
//!
//! Always non-blocking: the daemon waits for doorbells in epoll, and a
//! doorbell fd received from a client must never be able to block it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub struct Doorbell {
    file: File,
}

impl Doorbell {
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes an initial count and flags and returns a new
        // descriptor or -1; no pointers involved.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: eventfd just returned this descriptor; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self { file: fd.into() })
    }

    /// Adopts a doorbell fd received from another process. Rejects anything
    /// that is not an eventfd (a pipe or socket could block or mislead us)
    /// and makes it non-blocking.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Self> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        if link.as_os_str() != "anon_inode:[eventfd]" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "doorbell fd is not an eventfd",
            ));
        }
        // SAFETY: fcntl on a descriptor we own, with integer arguments only.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fcntl on a descriptor we own, with integer arguments only.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { file: fd.into() })
    }

    /// Wakes whoever waits. A saturated counter (EAGAIN) is already a wake-up.
    pub fn ring(&self) -> io::Result<()> {
        match (&self.file).write(&1u64.to_ne_bytes()) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Resets the counter; returns how many rings it had collected.
    pub fn drain(&self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        match (&self.file).read(&mut buf) {
            Ok(8) => Ok(u64::from_ne_bytes(buf)),
            Ok(n) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("eventfd read returned {n} bytes"),
            )),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Blocks until rung or `timeout` (None: forever) passes, without
    /// draining. Returns whether it was rung.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        crate::proto::fdpass::wait_readable(self.file.as_fd(), timeout)
    }

    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(Self {
            file: self.file.try_clone()?,
        })
    }
}

impl AsRawFd for Doorbell {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl From<Doorbell> for OwnedFd {
    fn from(bell: Doorbell) -> OwnedFd {
        bell.file.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_drain_wait() {
        let bell = Doorbell::new().unwrap();
        assert_eq!(bell.drain().unwrap(), 0);
        assert!(!bell.wait(Some(Duration::from_millis(1))).unwrap());
        bell.ring().unwrap();
        bell.ring().unwrap();
        assert!(bell.wait(Some(Duration::ZERO)).unwrap());
        assert_eq!(bell.drain().unwrap(), 2);
        assert!(!bell.wait(Some(Duration::ZERO)).unwrap());
    }

    #[test]
    fn wakes_another_thread() {
        let bell = Doorbell::new().unwrap();
        let other = bell.try_clone().unwrap();
        let t = std::thread::spawn(move || other.wait(Some(Duration::from_secs(10))).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        bell.ring().unwrap();
        assert!(t.join().unwrap());
    }

    #[test]
    fn from_fd_accepts_eventfd_rejects_others() {
        let bell = Doorbell::new().unwrap();
        let fd: OwnedFd = bell.try_clone().unwrap().into();
        let adopted = Doorbell::from_fd(fd).unwrap();
        adopted.ring().unwrap();
        assert_eq!(bell.drain().unwrap(), 1);

        let file = File::open("/dev/null").unwrap();
        assert!(Doorbell::from_fd(file.into()).is_err());
    }
}
