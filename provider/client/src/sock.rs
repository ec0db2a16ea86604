//! Unix seqpacket plumbing: connecting to the daemon and socket pairs for
//! event channels (from [`rxu_abi::proto::fdpass`]), shutting down a write
//! side, and reading fixed-size event records.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

pub use rxu_abi::proto::fdpass::{seqpacket_pair, wait_readable};

/// shutdown(SHUT_WR): readers of the peer end get EOF once drained.
pub fn shutdown_write(fd: std::os::fd::RawFd) {
    // SAFETY: shutdown on an fd we own; errors (ENOTCONN) are harmless.
    unsafe { libc::shutdown(fd, libc::SHUT_WR) };
}

/// Outcome of reading one record.
#[derive(Debug, PartialEq, Eq)]
pub enum Record<const N: usize> {
    Got([u8; N]),
    /// Non-blocking read found nothing.
    Empty,
    /// The writer is gone.
    Closed,
}

/// Reads one datagram of exactly `N` bytes. A datagram of another size is
/// an error (it was consumed). `flags` may add `MSG_DONTWAIT`.
pub fn recv_record<const N: usize>(fd: BorrowedFd<'_>, flags: i32) -> io::Result<Record<N>> {
    let mut buf = [0u8; N];
    loop {
        // SAFETY: buf is a live N-byte buffer; MSG_TRUNC makes the kernel
        // report the datagram's real length without writing past N bytes.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                N,
                flags | libc::MSG_TRUNC,
            )
        };
        if n >= 0 {
            return match n as usize {
                0 => Ok(Record::Closed),
                len if len == N => Ok(Record::Got(buf)),
                len => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("event record of {len} bytes, expected {N}"),
                )),
            };
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(Record::Empty),
            _ => return Err(e),
        }
    }
}

/// Sends one datagram without blocking or raising SIGPIPE.
pub fn send_record(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: data is a live buffer of data.len() bytes.
        let n = unsafe {
            libc::send(
                fd.as_raw_fd(),
                data.as_ptr().cast(),
                data.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads one `N`-byte record, blocking up to `timeout` (None: forever).
/// `Ok(None)`: the timeout passed.
pub fn read_record_timeout<const N: usize>(
    fd: BorrowedFd<'_>,
    timeout: Option<Duration>,
) -> io::Result<Option<[u8; N]>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if !wait_readable(fd, left)? {
            return Ok(None);
        }
        // Non-blocking: another reader may have taken the record between
        // poll and recv.
        match recv_record::<N>(fd, libc::MSG_DONTWAIT)? {
            Record::Got(b) => return Ok(Some(b)),
            Record::Closed => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "event socket closed",
                ))
            }
            Record::Empty => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn records_and_sizes() {
        let (r, w) = seqpacket_pair().unwrap();
        assert_eq!(
            recv_record::<8>(r.as_fd(), libc::MSG_DONTWAIT).unwrap(),
            Record::Empty
        );
        send_record(w.as_fd(), &7u64.to_ne_bytes()).unwrap();
        send_record(w.as_fd(), &[1u8; 12]).unwrap();
        assert_eq!(
            read_record_timeout::<8>(r.as_fd(), Some(Duration::from_secs(5))).unwrap(),
            Some(7u64.to_ne_bytes())
        );
        assert!(recv_record::<8>(r.as_fd(), 0).is_err(), "12-byte record");
        assert_eq!(
            read_record_timeout::<8>(r.as_fd(), Some(Duration::from_millis(5))).unwrap(),
            None
        );
        drop(w);
        assert!(read_record_timeout::<8>(r.as_fd(), None).is_err());
    }
}
