//! Sockets a test needs beside the client library: seqpacket pairs (event
//! channels) and raw connections to a daemon's control socket.

use std::os::fd::{AsFd, OwnedFd};
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
