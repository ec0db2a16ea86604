//! The daemon's one thread: sockets, doorbells and signals in an epoll
//! set, the rings, the endpoint and its UDP driver polled while there is
//! work. This loop is the only one that spins or sleeps.
//!
//! ```text
//! loop
//!   every FD_POLL_INTERVAL (and after every sleep): epoll_wait(0) ->
//!       accept clients, read control requests (non-blocking), drain
//!       doorbells, note signals
//!   Device::pump: QP timers; rounds of
//!       recv -> refill RQs/SRQs from the rings -> dispatch
//!       -> take WQEs from the rings (first round) -> transmit
//!       (completions go straight into the CQs)
//!   Device::deliver: CQ backlogs -> rings, channels, async events
//!   if nothing happened: spin (adaptive, at most max_spin), then
//!       raise the watched rings' sleeping flags (parked ones keep
//!       theirs, `ready.rs`), re-check, and block in ppoll
//!       on {epoll fd, UDP sockets} until the next QP deadline
//! ```
//!
//! Spin policy ([`Spin`]): the budget doubles when work turned up while
//! spinning and halves when the loop had to sleep anyway, within
//! [MIN_SPIN, max_spin]. The machine's two cores are shared with the
//! clients, so a long fixed spin only takes the CPU from the process the
//! daemon is waiting for.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::engine::spin::Spin;

use rxu_abi::proto::{self, fdpass, Request, MAX_MSG};

use crate::mem::watch::{self, Slot};

use super::closer::Closer;
use super::device::Device;
use super::log::{debug, info, warning};
use super::setup::RuntimeFiles;
use super::sys::{self, Epoll, Ready};
use super::watchdog::Watchdog;
use super::DaemonError;

const T_LISTEN: u64 = 1 << 40;
const T_SIGNAL: u64 = (1 << 40) + 1;
const T_NETLINK: u64 = (1 << 40) + 2;
const T_CTL: u64 = 1 << 32;
const T_BELL: u64 = 2 << 32;
const T_KIND: u64 = !0xFFFF_FFFF;

/// How often a busy loop looks at its sockets.
const FD_POLL_INTERVAL: Duration = Duration::from_micros(20);
pub const MIN_SPIN: Duration = Duration::from_micros(2);
/// A CQ backlog only drains when its client polls, which rings no bell.
const BACKLOG_POLL: Duration = Duration::from_millis(1);
/// Control messages read from one client per turn (fairness).
const MSGS_PER_TURN: usize = 16;
/// Consecutive socket errors of the data path after which the daemon
/// gives up.
const MAX_ENGINE_ERRORS: u32 = 10_000;
/// Connections accepted per turn.
const ACCEPTS_PER_TURN: usize = 32;
/// How long the listener rests after accept failed for want of
/// descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): the pending
/// connection stays queued, and retrying at once only spins.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

pub struct Daemon {
    pub dev: Device,
    files: RuntimeFiles,
    signals: OwnedFd,
    /// rtnetlink link/address changes (None if it could not be opened).
    netlink: Option<OwnedFd>,
    nl_buf: Vec<u8>,
    epoll: Epoll,
    conns: HashMap<u32, OwnedFd>,
    ready: Vec<Ready>,
    msg: Vec<u8>,
    spin: Spin,
    stop: bool,
    euid: u32,
    /// Clients of other users are served (Config::all_users).
    all_users: bool,
    /// Connections that have not said Hello yet, with the time they are
    /// closed if they still have not (accept order, so deadline order).
    silent: VecDeque<(Instant, u32)>,
    /// The listener is out of the epoll set until then (accept failed
    /// for want of resources); the failure was logged once.
    accept_paused: Option<Instant>,
    accept_failing: bool,
    /// The loop's watched syscalls on client memory (`mem/watch.rs`).
    slot: Arc<Slot>,
    /// Closes refused FUSE files off the loop.
    closer: Closer,
    _watchdog: Watchdog,
}

impl Daemon {
    pub fn new(
        dev: Device,
        files: RuntimeFiles,
        signals: OwnedFd,
        max_spin: Duration,
        all_users: bool,
    ) -> std::io::Result<Daemon> {
        let epoll = Epoll::new()?;
        epoll.add(files.listener.as_fd(), T_LISTEN)?;
        epoll.add(signals.as_fd(), T_SIGNAL)?;
        let netlink = match super::netlink::open() {
            Ok(s) => {
                epoll.add(s.as_fd(), T_NETLINK)?;
                Some(s)
            }
            Err(e) => {
                warning!("rtnetlink: {e}; the port will not follow its netdev");
                None
            }
        };
        let max_spin = max_spin.max(MIN_SPIN);
        super::fuse::ensure_control_fs();
        let slot = Arc::new(Slot::default());
        let closer = Closer::start()?;
        let watchdog = Watchdog::start(vec![
            ("the loop", Arc::clone(&slot)),
            ("the closer", Arc::clone(&closer.slot)),
        ])?;
        Ok(Daemon {
            dev,
            files,
            signals,
            netlink,
            nl_buf: vec![0u8; 32 * 1024],
            epoll,
            conns: HashMap::new(),
            ready: Vec::with_capacity(64),
            msg: vec![0u8; MAX_MSG],
            spin: Spin::new(MIN_SPIN, max_spin, max_spin.min(Duration::from_micros(20))),
            stop: false,
            // SAFETY: geteuid has no preconditions and cannot fail.
            euid: unsafe { libc::geteuid() },
            all_users,
            silent: VecDeque::new(),
            accept_paused: None,
            accept_failing: false,
            slot,
            closer,
            _watchdog: watchdog,
        })
    }

    /// Runs until a signal or a Shutdown request; then every client
    /// gets IBV_EVENT_DEVICE_FATAL.
    pub fn run(&mut self) -> Result<(), DaemonError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |source| DaemonError::Io { what, source }
        };
        let mut last_fd_poll: Option<Instant> = None;
        let mut engine_errors = 0u32;
        watch::install(Arc::clone(&self.slot));
        while !self.stop {
            let mut work = 0;
            let now = Instant::now();
            if last_fd_poll.is_none_or(|t| now.saturating_duration_since(t) >= FD_POLL_INTERVAL) {
                last_fd_poll = Some(now);
                self.connection_timers(now);
                work += self.poll_fds().map_err(io("epoll"))?;
                if self.stop {
                    break;
                }
            }
            match self.dev.pump() {
                Ok(n) => {
                    engine_errors = 0;
                    work += n;
                }
                // A socket error (ENOMEM, a refused send) is not the end of
                // the device; a socket that keeps failing is.
                Err(e) => {
                    engine_errors += 1;
                    if engine_errors == 1 {
                        warning!("data path: {e}");
                    }
                    if engine_errors >= MAX_ENGINE_ERRORS {
                        return Err(e.into());
                    }
                }
            }
            work += self.dev.deliver();
            work += self.fail_overdue();
            if work > 0 {
                self.spin.busy();
                continue;
            }
            if self.spin.keep_spinning(Instant::now()) {
                std::hint::spin_loop();
                continue;
            }
            self.spin.sleeping();
            self.sleep().map_err(io("sleeping"))?;
            last_fd_poll = None;
        }
        self.dev.fatal_to_all();
        Ok(())
    }

    /// Raises the rings' sleeping flags, re-checks them, and blocks until
    /// a client's doorbell or socket, a packet, a signal or the next QP
    /// deadline.
    fn sleep(&mut self) -> std::io::Result<()> {
        if !self.dev.prepare_sleep() {
            return Ok(());
        }
        self.dev.give_back_memory();
        let now = Instant::now();
        let deadline = match (self.dev.endpoint.poll_timeout(), self.dev.cm.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut timeout = deadline.map(|d| d.saturating_duration_since(now));
        if self.dev.has_backlog() {
            timeout = Some(timeout.map_or(BACKLOG_POLL, |t| t.min(BACKLOG_POLL)));
        }
        // A silent connection's deadline, the listener's rest.
        let next = self.silent.front().map(|&(t, _)| t);
        for t in [next, self.accept_paused].into_iter().flatten() {
            let d = t.saturating_duration_since(now);
            timeout = Some(timeout.map_or(d, |x| x.min(d)));
        }
        if timeout != Some(Duration::ZERO) {
            self.dev.counters.sleeps += 1;
            // Packets the QPs still have to send: wake when the sockets
            // take them.
            let want_out = self.dev.endpoint.has_transmit();
            self.dev
                .driver
                .wait(&[self.epoll.as_raw_fd()], want_out, timeout)?;
        }
        self.dev.end_sleep();
        Ok(())
    }

    /// Handles whatever the epoll set reports now; returns how many.
    fn poll_fds(&mut self) -> std::io::Result<usize> {
        self.epoll.poll_now(&mut self.ready)?;
        let ready = std::mem::take(&mut self.ready);
        for r in &ready {
            match r.token {
                T_LISTEN => self.accept_all(),
                T_SIGNAL => self.on_signal(),
                T_NETLINK => self.on_netlink(),
                t if t & T_KIND == T_CTL => self.on_control(t as u32, r),
                t if t & T_KIND == T_BELL => {
                    let id = t as u32;
                    if let Some(bell) = self.dev.objects.session(id).and_then(|s| s.bell.as_ref()) {
                        let _ = bell.drain();
                        self.dev.counters.doorbells += 1;
                        // Its parked rings with work are watched again.
                        self.dev.objects.ready.rang.insert(id);
                    }
                }
                _ => {}
            }
        }
        let n = ready.len();
        self.ready = ready;
        Ok(n)
    }

    /// Closes connections that stayed silent past the Hello timeout and
    /// puts the listener back after its rest.
    fn connection_timers(&mut self, now: Instant) {
        // Bounded by the queue's length.
        while let Some(&(t, id)) = self.silent.front() {
            if t > now {
                break;
            }
            self.silent.pop_front();
            if self.dev.objects.session(id).is_some_and(|s| !s.ready) {
                debug!("client {id}: no Hello within the timeout; closing");
                self.disconnect(id);
            }
        }
        if self.accept_paused.is_some_and(|t| t <= now) {
            self.accept_paused = None;
            if let Err(e) = self.epoll.add(self.files.listener.as_fd(), T_LISTEN) {
                warning!("epoll add listener: {e}");
            }
        }
    }

    /// accept failed: for want of resources the listener rests (logged
    /// once per episode); anything else is logged.
    fn accept_failed(&mut self, e: std::io::Error) {
        let starved = matches!(
            e.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
        );
        if !starved {
            warning!("accept: {e}");
            return;
        }
        if !self.accept_failing {
            self.accept_failing = true;
            warning!(
                "accept: {e}; new connections wait (retried every {} ms, logged again when it works)",
                ACCEPT_BACKOFF.as_millis()
            );
        }
        self.epoll.remove(self.files.listener.as_raw_fd());
        self.accept_paused = Some(Instant::now() + ACCEPT_BACKOFF);
    }

    fn accept_all(&mut self) {
        if self.accept_paused.is_some() {
            return;
        }
        for _ in 0..ACCEPTS_PER_TURN {
            let sock = match sys::accept(self.files.listener.as_fd()) {
                Ok(Some(s)) => s,
                Ok(None) => return,
                Err(e) => return self.accept_failed(e),
            };
            if std::mem::take(&mut self.accept_failing) {
                info!("accept works again");
            }
            let cred = match sys::peer_cred(sock.as_fd()) {
                Ok(c) => c,
                Err(e) => {
                    warning!("SO_PEERCRED: {e}");
                    continue;
                }
            };
            // The socket is 0600 unless all users are served; this is a
            // second line of defence.
            let other_user = cred.uid != self.euid && cred.uid != 0;
            if other_user && !self.all_users {
                warning!("refusing pid {} of uid {}", cred.pid, cred.uid);
                continue;
            }
            let id = match self.dev.connect_as(cred.pid, cred.uid) {
                Ok(id) => id,
                Err(r) => {
                    // Told why, in place of the Hello reply; then closed.
                    debug!("refusing pid {} of uid {}: {}", cred.pid, cred.uid, r.msg);
                    let resp = super::handle::error_response(r.errno, &r.msg);
                    if let Ok(bytes) = proto::encode(&resp) {
                        let _ = fdpass::send_msg(sock.as_fd(), &bytes, &[]);
                    }
                    // Closed with its Hello unread, the client's read would
                    // see ECONNRESET instead of the reason: read it first
                    // (bounded; its fds are closed with it).
                    for _ in 0..4 {
                        match fdpass::recv_msg(sock.as_fd(), &mut self.msg, libc::MSG_DONTWAIT) {
                            Ok((n, fds)) if n > 0 => {
                                // Never a close of a FUSE file on the loop.
                                for fd in fds {
                                    match super::fuse::fd_conn(fd.as_fd()) {
                                        Some(c) => self.closer.close(fd, c, cred.uid),
                                        None => drop(fd),
                                    }
                                }
                            }
                            _ => break,
                        }
                    }
                    continue;
                }
            };
            let deadline = Instant::now() + self.dev.hello_timeout();
            self.silent.push_back((deadline, id));
            if other_user {
                self.dev.mark_other_user(id);
            }
            if let Err(e) = self.epoll.add(sock.as_fd(), T_CTL | u64::from(id)) {
                warning!("epoll add: {e}");
                self.dev.disconnect(id);
                continue;
            }
            self.conns.insert(id, sock);
        }
    }

    fn on_signal(&mut self) {
        // Bounded: the signalfd holds at most one entry per signal number.
        for _ in 0..64 {
            match sys::read_signal(self.signals.as_fd()) {
                Ok(Some(sig)) => {
                    info!("signal {sig}: stopping");
                    self.stop = true;
                }
                _ => return,
            }
        }
    }

    /// Link or address changes: re-read the netdev if they concern it.
    fn on_netlink(&mut self) {
        let Some(nl) = &self.netlink else {
            return;
        };
        let d = super::netlink::drain(nl.as_fd(), &mut self.nl_buf);
        let (index, name) = (self.dev.port.ifindex(), self.dev.port.netdev());
        if d.overrun || d.changes.iter().any(|c| c.concerns(index, name)) {
            self.dev.refresh_port(true);
        }
    }

    fn on_control(&mut self, id: u32, r: &Ready) {
        if !r.readable {
            if r.hup {
                self.disconnect(id);
            }
            return;
        }
        for _ in 0..MSGS_PER_TURN {
            let Some(sock) = self.conns.get(&id) else {
                return;
            };
            let (n, fds) = match fdpass::recv_msg(sock.as_fd(), &mut self.msg, libc::MSG_DONTWAIT) {
                Ok((0, _)) => return self.disconnect(id),
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    warning!("client {id}: receive failed ({e}); disconnecting");
                    return self.disconnect(id);
                }
            };
            let req: Request = match proto::decode(&self.msg[..n]) {
                Ok(r) => r,
                Err(e) => {
                    warning!("client {id}: undecodable request ({e}); disconnecting");
                    return self.disconnect(id);
                }
            };
            debug!("client {id}: {req:?}");
            let was_ready = self.dev.objects.session(id).is_some_and(|s| s.ready);
            let mut fds = fds;
            let reply = match self.refuse_fuse_fds(id, &mut fds) {
                Some(resp) => super::reply::Reply {
                    resp,
                    fds: Vec::new(),
                    // A refused Hello ends the session, as fdcheck's do.
                    close: !was_ready,
                },
                None => self.dev.handle(id, req, fds),
            };
            if !was_ready {
                if let Some(bell) = self.dev.objects.session(id).and_then(|s| s.bell.as_ref()) {
                    if let Err(e) = self.epoll.add(bell.as_fd(), T_BELL | u64::from(id)) {
                        warning!("client {id}: epoll add doorbell: {e}");
                    }
                }
            }
            let sent = proto::encode(&reply.resp)
                .map_err(|e| std::io::Error::other(e.to_string()))
                .and_then(|bytes| {
                    let fds: Vec<_> = reply.fds.iter().map(|f| f.as_fd()).collect();
                    fdpass::send_msg(sock.as_fd(), &bytes, &fds)
                });
            if let Err(e) = sent {
                // A client that does not read its replies (socket full) or
                // has gone is dropped: the daemon never blocks on one.
                warning!("client {id}: reply not sent ({e}); disconnecting");
                return self.disconnect(id);
            }
            if reply.close {
                return self.disconnect(id);
            }
            if self.dev.shutdown {
                self.stop = true;
                return;
            }
        }
    }

    /// Closes the sessions of clients one of whose memory accesses passed
    /// the watchdog's deadline (`watchdog.rs`); how many.
    fn fail_overdue(&mut self) -> usize {
        let fds = self.slot.take_failed();
        let mut n = 0;
        for fd in fds {
            let clients: Vec<u32> = self
                .dev
                .objects
                .sessions()
                .map(|s| s.id)
                .filter(|&s| self.dev.endpoint.memory().client_with_mem_fd(fd) == Some(s))
                .collect();
            for id in clients {
                warning!("client {id}: an access to its memory blocked rxud past the deadline; closing its session");
                self.disconnect(id);
                n += 1;
            }
        }
        n
    }

    /// A request whose fds include a file on FUSE is refused before any
    /// handler sees it (no syscall on such a file may run on the loop),
    /// and those files are closed by the closer thread. The error reply,
    /// if the fds were refused.
    fn refuse_fuse_fds(&self, id: u32, fds: &mut Vec<OwnedFd>) -> Option<proto::Response> {
        let conns: Vec<Option<u64>> = fds
            .iter()
            .map(|f| super::fuse::fd_conn(f.as_fd()))
            .collect();
        let first = conns.iter().position(Option::is_some)?;
        let uid = self.dev.objects.quota.uid_of(id).unwrap_or(u32::MAX);
        for (fd, conn) in std::mem::take(fds).into_iter().zip(conns) {
            match conn {
                Some(c) => self.closer.close(fd, c, uid),
                None => drop(fd),
            }
        }
        Some(super::handle::error_response(
            libc::EINVAL,
            &format!(
                "fd {first} of the request is a file on a FUSE file system: rxud takes none (a FUSE server that does not answer would block it)"
            ),
        ))
    }

    fn disconnect(&mut self, id: u32) {
        if let Some(sock) = self.conns.remove(&id) {
            self.epoll.remove(sock.as_raw_fd());
        }
        if let Some(bell) = self.dev.objects.session(id).and_then(|s| s.bell.as_ref()) {
            self.epoll.remove(bell.as_raw_fd());
        }
        self.dev.disconnect(id);
    }
}
