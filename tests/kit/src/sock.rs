//! Sockets a test needs beside the client library: seqpacket pairs (event
//! channels) and raw connections to a daemon's control socket.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rxu_abi::proto::{self, fdpass, Request, Response};

/// A `SOCK_SEQPACKET` socket pair, both ends blocking and close-on-exec.
pub fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    fdpass::seqpacket_pair().expect("socketpair(AF_UNIX, SOCK_SEQPACKET)")
}

/// A connection to the control socket at `path`.
pub fn connect(path: &Path) -> OwnedFd {
    fdpass::connect_seqpacket(path).unwrap_or_else(|e| panic!("connect {}: {e}", path.display()))
}

/// Sends `req` on a control connection and reads the response; None when
/// the daemon closed the connection or anything failed.
pub fn exchange(sock: &OwnedFd, req: &Request) -> Option<Response> {
    fdpass::send_msg(sock.as_fd(), &proto::encode(req).ok()?, &[]).ok()?;
    let mut buf = vec![0u8; proto::MAX_MSG];
    let (n, _) = fdpass::recv_msg(sock.as_fd(), &mut buf, 0).ok()?;
    if n == 0 {
        return None;
    }
    proto::decode(&buf[..n]).ok()
}

/// An admin connection to the daemon serving `path` (what `rxu` opens):
/// None while nothing there answers `Hello`.
pub fn admin(path: &Path) -> Option<OwnedFd> {
    let sock = fdpass::connect_seqpacket(path).ok()?;
    let hello = Request::Hello {
        version: proto::PROTO_VERSION,
        pid: std::process::id(),
        admin: true,
    };
    matches!(exchange(&sock, &hello)?, Response::Hello { .. }).then_some(sock)
}

/// A `SOCK_SEQPACKET` listener bound at `path` (close-on-exec; non-blocking
/// if `nonblock`): a third party for a client or the daemon to reach.
pub fn seqpacket_listener(path: &Path, nonblock: bool) -> OwnedFd {
    let mut flags = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
    if nonblock {
        flags |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: socket takes integer arguments and returns a new fd or -1.
    let fd = unsafe { libc::socket(libc::AF_UNIX, flags, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: socket just returned fd; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data; zero is a valid value.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    assert!(bytes.len() < sa.sun_path.len(), "socket path too long");
    for (d, &s) in sa.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: sa is a valid sockaddr_un of `len` bytes; fd is ours.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    assert_eq!(
        r,
        0,
        "bind {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    // SAFETY: listen on a bound socket we own.
    assert_eq!(unsafe { libc::listen(fd.as_raw_fd(), 8) }, 0);
    fd
}
