//! The control socket's plumbing, used by both ends: connecting a
//! `SOCK_SEQPACKET` socket, socket pairs (event channels), and sending and
//! receiving one message with file descriptors (SCM_RIGHTS), and waiting
//! for an fd to become readable.

use super::{MAX_FDS, MAX_MSG};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// A connected `SOCK_SEQPACKET` socket to the Unix socket at `path`.
pub fn connect_seqpacket(path: &Path) -> io::Result<OwnedFd> {
    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket takes integer arguments and returns a new fd or -1.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket just returned this descriptor; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    loop {
        // SAFETY: addr is a valid sockaddr_un of `len` bytes on our stack.
        let r = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if r == 0 {
            return Ok(fd);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A `SOCK_SEQPACKET` socket pair, both ends blocking and close-on-exec.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut sv = [0; 2];
    // SAFETY: sv is a valid 2-element array for socketpair to fill.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded, so both fds are fresh and ours.
    unsafe { Ok((OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1]))) }
}

/// Room for MAX_FDS descriptors in a control message (CMSG_SPACE).
const CMSG_BUF: usize = 64;

/// Sends `data` and `fds` as one datagram. Never raises SIGPIPE.
pub fn send_msg(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cbuf = [0u64; CMSG_BUF / 8];
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic on a small length.
        let (space, len) =
            unsafe { (libc::CMSG_SPACE(bytes as u32), libc::CMSG_LEN(bytes as u32)) };
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as usize;
        // SAFETY: msg_control points at cbuf, which is 8-aligned and at
        // least CMSG_SPACE(4 * MAX_FDS) bytes, so the first header and its
        // data (bytes <= 16) lie inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = len as usize;
            let p = libc::CMSG_DATA(c).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                p.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: msg points at live buffers (iov -> data, control -> cbuf)
        // for the duration of the call.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return if n as usize == data.len() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "short seqpacket send",
                ))
            };
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one datagram into `buf`; returns its length (0 = peer closed)
/// and the descriptors that came with it. A datagram larger than `buf`
/// or with truncated control data is an error (its fds are closed).
pub fn recv_msg(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    flags: i32,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len().min(MAX_MSG),
    };
    let mut cbuf = [0u64; CMSG_BUF / 8];
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_BUF;
    let n = loop {
        // SAFETY: msg points at live buffers (iov -> buf, control -> cbuf)
        // sized as declared.
        let n =
            unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, flags | libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control/msg_controllen; CMSG_FIRSTHDR
    // and CMSG_NXTHDR stay within that buffer, and every SCM_RIGHTS
    // payload holds cmsg_len - CMSG_LEN(0) bytes of fresh descriptors that
    // now belong to us.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data_len = (*c).cmsg_len - libc::CMSG_LEN(0) as usize;
                let p = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..data_len / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(p.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message larger than buffer",
        ));
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many file descriptors",
        ));
    }
    Ok((n, fds))
}

/// Waits until `fd` is readable or `timeout` passes (None: forever).
/// Returns whether it is readable (or hung up: the read will say so).
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
            }
        };
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd on our stack, count 1.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Ok(true);
        }
        if n == 0 {
            return Ok(false);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn message_with_fds_round_trips() {
        let (a, b) = seqpacket_pair().unwrap();
        let (mut p0, p1) = std::os::unix::net::UnixStream::pair().unwrap();
        send_msg(a.as_fd(), b"hello", &[p1.as_fd()]).unwrap();
        drop(p1);
        let mut buf = [0u8; 64];
        let (n, fds) = recv_msg(b.as_fd(), &mut buf, 0).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        let mut got = std::os::unix::net::UnixStream::from(fds.into_iter().next().unwrap());
        got.write_all(b"x").unwrap();
        let mut one = [0u8; 1];
        p0.read_exact(&mut one).unwrap();
        assert_eq!(&one, b"x");
    }

    #[test]
    fn boundaries_kept_and_close_seen() {
        let (a, b) = seqpacket_pair().unwrap();
        send_msg(a.as_fd(), b"one", &[]).unwrap();
        send_msg(a.as_fd(), b"two!", &[]).unwrap();
        drop(a);
        let mut buf = [0u8; 64];
        assert_eq!(recv_msg(b.as_fd(), &mut buf, 0).unwrap().0, 3);
        assert_eq!(recv_msg(b.as_fd(), &mut buf, 0).unwrap().0, 4);
        assert_eq!(recv_msg(b.as_fd(), &mut buf, 0).unwrap().0, 0);
    }

    #[test]
    fn oversized_message_is_an_error() {
        let (a, b) = seqpacket_pair().unwrap();
        send_msg(a.as_fd(), &[1u8; 100], &[]).unwrap();
        let mut buf = [0u8; 10];
        assert!(recv_msg(b.as_fd(), &mut buf, 0).is_err());
    }

    #[test]
    fn connect_to_nothing_fails() {
        let dir = std::env::temp_dir().join(format!("rxu-sock-test-{}", std::process::id()));
        let e = connect_seqpacket(&dir.join("none.sock")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}

/// Credentials of the process at the other end of a Unix socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: u32,
    pub uid: u32,
}

/// SO_PEERCRED of `sock`: who connected (the daemon asks of a client, a
/// client of the daemon), as the kernel recorded it, not as claimed.
pub fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<PeerCred> {
    // SAFETY: ucred is plain data; zero is a valid value.
    let mut c: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: c and len are valid for getsockopt to fill; sock is open.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: c.pid as u32,
        uid: c.uid,
    })
}
