//! The few system calls the daemon makes that std does not wrap: epoll,
//! signalfd, SOCK_SEQPACKET listening sockets, SO_PEERCRED.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// An epoll instance; every registration carries a caller-chosen token.
pub struct Epoll {
    fd: OwnedFd,
    buf: Vec<libc::epoll_event>,
}

/// One readiness report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ready {
    pub token: u64,
    pub readable: bool,
    /// Hang-up or error: the peer is gone.
    pub hup: bool,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes flags only and returns a new fd or -1.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll {
            // SAFETY: fd was just returned by epoll_create1; we own it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; 64],
        })
    }

    /// Watches `fd` for input (level-triggered).
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: token,
        };
        // SAFETY: both fds are open; ev is a valid epoll_event on our stack.
        cvt(unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                &mut ev,
            )
        })?;
        Ok(())
    }

    /// Stops watching `fd` (errors ignored: the fd may already be gone).
    pub fn remove(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: epoll_ctl only reads ev; a stale fd gives EBADF/ENOENT.
        unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Collects what is ready now, without waiting.
    pub fn poll_now(&mut self, out: &mut Vec<Ready>) -> io::Result<()> {
        out.clear();
        // SAFETY: buf holds buf.len() initialised epoll_events for the
        // kernel to overwrite; timeout 0 never blocks.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr(),
                self.buf.len() as libc::c_int,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        for ev in &self.buf[..n as usize] {
            let flags = ev.events as libc::c_int;
            out.push(Ready {
                token: ev.u64,
                readable: flags & libc::EPOLLIN != 0,
                hup: flags & (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) != 0,
            });
        }
        Ok(())
    }

    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Blocks SIGTERM, SIGINT and SIGHUP and returns a signalfd that reports
/// them; ignores SIGPIPE (sockets are written with MSG_NOSIGNAL anyway).
pub fn termination_signals() -> io::Result<OwnedFd> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; the signal numbers are valid.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
    }
    // SAFETY: set is initialised; the old mask is not wanted (null). The
    // daemon runs one thread, so the process mask is the thread mask.
    cvt(unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) })?;
    // SAFETY: changing SIGPIPE's disposition to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    // SAFETY: -1 asks for a new fd; set is initialised.
    let fd = cvt(unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) })?;
    // SAFETY: fd was just returned by signalfd; we own it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one pending signal from a signalfd; None if none is pending.
pub fn read_signal(fd: BorrowedFd<'_>) -> io::Result<Option<u32>> {
    // SAFETY: signalfd_siginfo is plain data; zero is a valid value.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reads at most `size` bytes into `info`, which has that size.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut info as *mut libc::signalfd_siginfo).cast(),
            size,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok((n as usize == size).then_some(info.ssi_signo))
}

fn unix_addr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; zero is a valid value.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= sa.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path too long (max {} bytes)", sa.sun_path.len() - 1),
        ));
    }
    for (d, &s) in sa.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((sa, len as libc::socklen_t))
}

fn seqpacket_socket(nonblock: bool) -> io::Result<OwnedFd> {
    let flags =
        libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | if nonblock { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain socket(2) call; returns a new fd or -1.
    let fd = cvt(unsafe { libc::socket(libc::AF_UNIX, flags, 0) })?;
    // SAFETY: fd was just returned by socket; we own it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Connects a SOCK_SEQPACKET socket to `path` (blocking).
pub fn connect_seqpacket(path: &Path) -> io::Result<OwnedFd> {
    let (sa, len) = unix_addr(path)?;
    let fd = seqpacket_socket(false)?;
    // SAFETY: sa is a valid sockaddr_un of `len` bytes.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    Ok(fd)
}

/// A non-blocking listening SOCK_SEQPACKET socket at `path`, mode 0600
/// (the umask is tightened around bind so the file never exists wider).
pub fn listen_seqpacket(path: &Path) -> io::Result<OwnedFd> {
    let (sa, len) = unix_addr(path)?;
    let fd = seqpacket_socket(true)?;
    // SAFETY: umask only swaps the process mask; restored right after.
    let old = unsafe { libc::umask(0o177) };
    // SAFETY: sa is a valid sockaddr_un of `len` bytes.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    let err = io::Error::last_os_error();
    // SAFETY: umask only swaps the process mask, back to what it was.
    unsafe { libc::umask(old) };
    if r < 0 {
        return Err(err);
    }
    // SAFETY: listen on a bound socket we own.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
    Ok(fd)
}

/// Accepts one connection (non-blocking, close-on-exec); None if none waits.
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    loop {
        // SAFETY: accept4 with null address pointers is allowed.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd >= 0 {
            // SAFETY: accept4 returned a new fd that we now own.
            return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            // The peer gave up between connect and accept: nothing to do.
            _ if e.raw_os_error() == Some(libc::ECONNABORTED) => continue,
            _ => return Err(e),
        }
    }
}

pub use rxu_abi::proto::fdpass::{peer_cred, PeerCred};

/// CAP_NET_BIND_SERVICE: rdma_cm ports below 1024.
pub const CAP_NET_BIND_SERVICE: u32 = 10;
/// CAP_NET_RAW: controlled Q_Keys.
pub const CAP_NET_RAW: u32 = 13;

/// The effective capabilities of process `pid` in this process's user
/// namespace (a capability of a nested user namespace is no privilege
/// here, as the kernel's `capable()` checks the initial namespace):
/// none when anything cannot be read.
pub fn client_caps(pid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let ns = |p: &str| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    let same_ns = match (
        ns(&format!("/proc/{pid}/ns/user")),
        ns("/proc/self/ns/user"),
    ) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    if !same_ns {
        return 0;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// Whether a capability set from [`client_caps`] holds `cap`.
pub fn holds(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

/// Whether `fd` is a socket (the async-event and channel fds must be).
pub fn is_socket(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open for the duration of the call; st is valid.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
}

/// The file status flags of `fd` (F_GETFL: access mode, O_PATH, ...).
pub fn fd_flags(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: fcntl(F_GETFL) on an fd open for the call; integer result.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
}

fn sock_int(fd: BorrowedFd<'_>, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for getsockopt to fill (an int option).
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(v)
}

/// A socket's address family and type (SO_DOMAIN, SO_TYPE).
pub fn socket_kind(fd: BorrowedFd<'_>) -> io::Result<(libc::c_int, libc::c_int)> {
    Ok((sock_int(fd, libc::SO_DOMAIN)?, sock_int(fd, libc::SO_TYPE)?))
}

/// Whether a Unix socket's peer has no address (a `socketpair` end, not
/// a connection to a listening socket); ENOTCONN when it has no peer.
pub fn peer_unnamed(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: sockaddr_un is plain data; zero is a valid value.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: sa and len describe a buffer getpeername may fill.
    cvt(unsafe {
        libc::getpeername(
            fd.as_raw_fd(),
            (&mut sa as *mut libc::sockaddr_un).cast(),
            &mut len,
        )
    })?;
    Ok(len as usize <= std::mem::size_of::<libc::sa_family_t>())
}

/// The device and inode of the file `fd` is open on (what names a shared
/// XRC domain).
pub fn file_id(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open for the duration of the call; st is valid.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// Whether two of our fds are the same open file (one `open`, however
/// many dups and SCM_RIGHTS copies): kcmp(KCMP_FILE) on ourselves, which
/// needs no ptrace right. Several /dev/null opens look identical to
/// fstat; only this tells an application's cmd_fd from another.
pub fn same_open_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> io::Result<bool> {
    const KCMP_FILE: libc::c_long = 0;
    // SAFETY: getpid has no preconditions.
    let pid = libc::c_long::from(unsafe { libc::getpid() });
    // SAFETY: kcmp only compares kernel objects of our own fds (both open
    // for the duration of the call) and returns 0, 1, 2 or -1.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid,
            pid,
            KCMP_FILE,
            libc::c_long::from(a.as_raw_fd()),
            libc::c_long::from(b.as_raw_fd()),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r == 0)
}

/// Whether `fd` is this process's own `/proc/<pid>/mem`: a client must
/// not make the daemon reach into itself.
pub fn is_own_mem(fd: BorrowedFd<'_>) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(own) = std::fs::metadata("/proc/self/mem") else {
        return false;
    };
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open for the duration of the call; st is valid.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    r == 0 && st.st_dev == own.dev() && st.st_ino == own.ino()
}

/// Sends one small record without blocking and without SIGPIPE. Returns
/// false if it could not be sent (the reader is gone or not reading).
pub fn send_record(sock: BorrowedFd<'_>, rec: &[u8]) -> bool {
    matches!(try_send_record(sock, rec), Ok(true))
}

/// Sends one record without blocking and without SIGPIPE: `Ok(true)`
/// when it went, `Ok(false)` when the socket has no room now, an error
/// when it never will (the reader is gone).
pub fn try_send_record(sock: BorrowedFd<'_>, rec: &[u8]) -> io::Result<bool> {
    // SAFETY: rec is a valid buffer of rec.len() bytes for the call.
    let n = unsafe {
        libc::send(
            sock.as_raw_fd(),
            rec.as_ptr().cast(),
            rec.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n == rec.len() as isize {
        return Ok(true);
    }
    if n >= 0 {
        // A record cut short is no record (event sockets are SEQPACKET:
        // whole or nothing, so this is a stream the client passed).
        return Err(io::Error::other("record sent in part"));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::ENOBUFS) => Ok(false),
        _ => Err(e),
    }
}

/// Shuts down the sending side of a socket (its reader sees EOF after
/// what was sent); errors are moot.
pub fn shutdown_write(sock: BorrowedFd<'_>) {
    // SAFETY: shutdown(2) on a socket fd that is open for the call.
    unsafe { libc::shutdown(sock.as_raw_fd(), libc::SHUT_WR) };
}

/// Raises the soft limit on open files to the hard limit (every client
/// holds several fds in the daemon).
pub fn raise_nofile_limit() {
    // SAFETY: rlimit is plain data; getrlimit/setrlimit read/write it.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Gives the allocator's free memory back to the kernel: glibc keeps
/// freed chunks in its arenas, so after a client with thousands of QPs
/// goes rxud's RSS would stay at that client's peak.
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks and releases the allocator's own
    // free lists; it takes no pointers of ours.
    unsafe {
        libc::malloc_trim(0);
    }
}
