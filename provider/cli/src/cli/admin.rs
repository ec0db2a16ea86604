//! An admin connection to a device's daemon: `Hello { admin: true }` with
//! no fds, then Status / Stats / Shutdown / QueryPort (proto's contract).
//! Every wait is bounded by socket timeouts, so a hung daemon cannot hang
//! `rxu`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use rxu_abi::paths;
use rxu_abi::proto::{self, fdpass, PortAttr, ProtoError, Request, Response};

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Nothing listens there (no socket file, or a stale one).
    #[error("no daemon listens on {0}")]
    NotRunning(String),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Proto(#[from] ProtoError),
    #[error("the daemon closed the connection")]
    Closed,
    #[error("the daemon did not answer in time")]
    Timeout,
    #[error("the daemon refused: {msg} (errno {errno})")]
    Refused { errno: i32, msg: String },
    /// The runtime directory or the daemon in it is not to be trusted.
    #[error("{0}")]
    Untrusted(#[from] paths::TrustError),
    #[error("unexpected reply to {0}")]
    Unexpected(&'static str),
    #[error("a reply in pieces: {0}")]
    Pieces(String),
}

/// A connected, greeted admin client.
#[derive(Debug)]
pub struct AdminConn {
    sock: OwnedFd,
    /// The device name the daemon gave in its Hello reply.
    pub device: String,
}

impl AdminConn {
    /// Connects to `path` and says Hello; `timeout` bounds each send and
    /// each reply.
    /// The socket's directory and the daemon's credentials are checked
    /// first (`paths::check_runtime_dir`, `check_daemon_peer`).
    pub fn connect(path: &Path, timeout: Duration) -> Result<AdminConn, AdminError> {
        let not_running = || AdminError::NotRunning(path.display().to_string());
        if let Some(dir) = path.parent() {
            match paths::check_runtime_dir(dir) {
                Err(e) if e.is_not_found() => return Err(not_running()),
                r => r?,
            }
        }
        let sock = connect_seqpacket(path, timeout).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => not_running(),
            _ => AdminError::Io(e),
        })?;
        paths::check_daemon_peer(sock.as_fd(), path)?;
        let mut conn = AdminConn {
            sock,
            device: String::new(),
        };
        let hello = Request::Hello {
            version: proto::PROTO_VERSION,
            pid: std::process::id(),
            admin: true,
        };
        match conn.call(&hello)? {
            Response::Hello { device, .. } => conn.device = device,
            Response::Error { errno, msg } => return Err(AdminError::Refused { errno, msg }),
            _ => return Err(AdminError::Unexpected("Hello")),
        }
        Ok(conn)
    }

    /// One request, one reply. `Response::Error` is returned as a reply,
    /// not an error: callers decide what a refusal means. A reply too
    /// large for one message (Status, Stats of many QPs) is fetched in
    /// pieces and returned whole.
    pub fn call(&mut self, req: &Request) -> Result<Response, AdminError> {
        let first = self.call_one(req)?;
        proto::unchunk(
            first,
            |offset| self.call_one(&Request::Chunk { offset }),
            AdminError::Pieces,
        )
    }

    fn call_one(&mut self, req: &Request) -> Result<Response, AdminError> {
        let data = proto::encode(req)?;
        // A daemon refusing the connection (its user's share of
        // connections is used up) says why and closes: read the reason.
        let flags = match fdpass::send_msg(self.sock.as_fd(), &data, &[]) {
            Ok(()) => 0,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) => {
                libc::MSG_DONTWAIT
            }
            Err(e) => return Err(timeout_or_io(e)),
        };
        let mut buf = vec![0u8; proto::MAX_MSG];
        let (n, _fds) = fdpass::recv_msg(self.sock.as_fd(), &mut buf, flags).map_err(|e| {
            if flags == 0 {
                timeout_or_io(e)
            } else {
                AdminError::Closed
            }
        })?;
        if n == 0 {
            return Err(AdminError::Closed);
        }
        Ok(proto::decode(&buf[..n])?)
    }

    /// `call`, with `Response::Error` turned into `AdminError::Refused`.
    pub fn call_ok(&mut self, req: &Request) -> Result<Response, AdminError> {
        match self.call(req)? {
            Response::Error { errno, msg } => Err(AdminError::Refused { errno, msg }),
            r => Ok(r),
        }
    }

    pub fn query_port(&mut self, port: u8) -> Result<PortAttr, AdminError> {
        match self.call_ok(&Request::QueryPort { port })? {
            Response::Port(p) => Ok(p),
            _ => Err(AdminError::Unexpected("QueryPort")),
        }
    }
}

/// SO_RCVTIMEO/SO_SNDTIMEO expiry shows as EAGAIN.
fn timeout_or_io(e: io::Error) -> AdminError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => AdminError::Timeout,
        _ => AdminError::Io(e),
    }
}

/// A connected SOCK_SEQPACKET socket with send and receive timeouts.
pub fn connect_seqpacket(path: &Path, timeout: Duration) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    set_timeout(&sock, libc::SO_RCVTIMEO, timeout)?;
    set_timeout(&sock, libc::SO_SNDTIMEO, timeout)?;

    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    // Keep the terminating NUL.
    if bytes.len() >= sa.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path too long: {}", path.display()),
        ));
    }
    for (d, s) in sa.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    loop {
        // SAFETY: `sa` is an initialised sockaddr_un and `len` lies within it.
        let r = unsafe {
            libc::connect(
                sock.as_raw_fd(),
                (&sa as *const libc::sockaddr_un).cast(),
                len as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(sock);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn set_timeout(sock: &OwnedFd, opt: libc::c_int, t: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a valid timeval and its size is passed.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A stand-in daemon answering admin requests from a script.

    use super::*;
    use std::thread::JoinHandle;

    /// Listens on `path` (a seqpacket socket) and answers one connection:
    /// Hello, then each request with `reply(req)`; stops at a `None` reply
    /// or when the client goes away. Returns the requests it saw.
    pub fn serve(
        path: &Path,
        device: &str,
        mut reply: impl FnMut(&Request) -> Option<Response> + Send + 'static,
    ) -> JoinHandle<Vec<Request>> {
        let listener = listen_seqpacket(path);
        let device = device.to_owned();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            // SAFETY: accept on a listening socket we own; result checked.
            let fd = unsafe {
                libc::accept4(
                    listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            assert!(fd >= 0, "accept: {}", io::Error::last_os_error());
            // SAFETY: accept returned a fresh descriptor we now own.
            let conn = unsafe { OwnedFd::from_raw_fd(fd) };
            let mut buf = vec![0u8; proto::MAX_MSG];
            for _ in 0..64 {
                let Ok((n, fds)) = fdpass::recv_msg(conn.as_fd(), &mut buf, 0) else {
                    break;
                };
                if n == 0 {
                    break;
                }
                assert!(fds.is_empty(), "admin clients send no fds");
                let req: Request = proto::decode(&buf[..n]).unwrap();
                let resp = match &req {
                    Request::Hello { admin, .. } => {
                        assert!(*admin);
                        Some(Response::Hello {
                            device: device.clone(),
                            client_id: 1,
                            max_inline_data: 0,
                        })
                    }
                    r => reply(r),
                };
                seen.push(req);
                let Some(resp) = resp else { break };
                let data = proto::encode(&resp).unwrap();
                if fdpass::send_msg(conn.as_fd(), &data, &[]).is_err() {
                    break;
                }
            }
            drop(listener);
            seen
        })
    }

    pub fn listen_seqpacket(path: &Path) -> OwnedFd {
        // std has no seqpacket listener: build it by hand.
        let _ = std::fs::remove_file(path);
        // SAFETY: plain socket(2) call; result checked.
        let fd =
            unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0);
        // SAFETY: fresh descriptor we own.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_un is plain data; all-zero is valid.
        let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.as_os_str().as_bytes();
        assert!(bytes.len() < sa.sun_path.len());
        for (d, s) in sa.sun_path.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: `sa` is initialised; bind/listen on our socket.
        unsafe {
            assert_eq!(
                libc::bind(
                    sock.as_raw_fd(),
                    (&sa as *const libc::sockaddr_un).cast(),
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                ),
                0
            );
            assert_eq!(libc::listen(sock.as_raw_fd(), 4), 0);
        }
        sock
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxu_abi::proto::Counter;

    /// A socket path in a fresh 0700 directory of this test's own (the
    /// client refuses a shared one such as /tmp itself).
    fn tmp_sock(tag: &str) -> std::path::PathBuf {
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(format!("rxu-admin-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .expect("a private test directory");
        dir.join("rxu.sock")
    }

    #[test]
    fn hello_then_requests() {
        let path = tmp_sock("hello");
        let server = fake::serve(&path, "rxu9", |r| match r {
            Request::Stats => Some(Response::Stats {
                device: vec![Counter {
                    name: "sent_pkts".into(),
                    value: 3,
                }],
                qps: vec![],
            }),
            Request::QueryPort { .. } => Some(Response::Port(PortAttr {
                state: 4,
                ..Default::default()
            })),
            _ => Some(Response::Error {
                errno: libc::EBUSY,
                msg: "busy".into(),
            }),
        });
        let mut c = AdminConn::connect(&path, Duration::from_secs(5)).unwrap();
        assert_eq!(c.device, "rxu9");
        assert!(matches!(
            c.call(&Request::Stats).unwrap(),
            Response::Stats { .. }
        ));
        assert_eq!(c.query_port(1).unwrap().state, 4);
        match c.call_ok(&Request::Shutdown { force: false }) {
            Err(AdminError::Refused { errno, .. }) => assert_eq!(errno, libc::EBUSY),
            other => panic!("{other:?}"),
        }
        drop(c);
        let seen = server.join().unwrap();
        assert_eq!(seen.len(), 4);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn missing_socket_is_not_running() {
        let path = tmp_sock("missing");
        let _ = std::fs::remove_file(&path);
        match AdminConn::connect(&path, Duration::from_secs(1)) {
            Err(AdminError::NotRunning(_)) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stale_socket_file_is_not_running() {
        let path = tmp_sock("stale");
        let _ = std::fs::remove_file(&path);
        // A socket file nobody listens on any more.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        match AdminConn::connect(&path, Duration::from_secs(1)) {
            Err(AdminError::NotRunning(_)) => {}
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_daemon_that_never_answers_times_out() {
        let path = tmp_sock("mute");
        let _ = std::fs::remove_file(&path);
        // Listening, so connect succeeds, but nobody accepts or answers.
        let server = fake::listen_seqpacket(&path);
        let t = std::time::Instant::now();
        match AdminConn::connect(&path, Duration::from_millis(200)) {
            Err(AdminError::Timeout) => {}
            other => panic!("{other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(5));
        drop(server);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_daemon_that_hangs_up_is_closed() {
        let path = tmp_sock("hangup");
        let server = fake::serve(&path, "rxu9", |_| None);
        let mut c = AdminConn::connect(&path, Duration::from_secs(5)).unwrap();
        match c.call(&Request::Status) {
            Err(AdminError::Closed) => {}
            Err(AdminError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => {}
            other => panic!("{other:?}"),
        }
        server.join().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
