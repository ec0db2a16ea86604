//! [`Engine`]: an [`Endpoint`] and its [`UdpDriver`] (wrapped in the
//! [`Faulty`] decorator when the configuration asks for faults) with a
//! small loop, for transport tests and the benchmark. Completions wait in
//! one FIFO of `(cq, completion)` until [`Engine::poll_completion`]. The
//! daemon does not use it: it sequences the endpoint and the driver
//! itself, with its rings in between.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::config::{EngineConfig, EngineCounters, EngineError, QpSpec};
use super::endpoint::{Endpoint, RecvMeta};
use super::fault::{FaultCounters, Faulty};
use super::spin::Spin;
use super::udp::UdpDriver;
use crate::qp::{Completion, Memory, Qp, QpAttr, QpEvent, QpTuning, RecvWqe, SendWqe};

/// Most extra file descriptors [`Engine::set_wake_fds`] takes.
pub const MAX_WAKE_FDS: usize = 8;

/// What one [`Engine::run_once`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Packets taken from the socket (GRO segments counted one by one).
    pub received: usize,
    /// Packets the QPs produced for sending.
    pub sent: usize,
    /// QP timers that fired.
    pub timers: usize,
    /// The engine slept in ppoll.
    pub slept: bool,
}

impl RunReport {
    /// Nothing was received, sent or timed out.
    pub fn idle(&self) -> bool {
        self.received == 0 && self.sent == 0 && self.timers == 0
    }
}

/// The driver, with or without fault injectors (chosen once, at start;
/// boxed: the two differ much in size, and one pointer per batch call
/// costs nothing).
enum Io {
    Plain(Box<UdpDriver>),
    Faulty(Box<Faulty>),
}

impl Io {
    fn driver(&self) -> &UdpDriver {
        match self {
            Io::Plain(d) => d,
            Io::Faulty(f) => f.inner(),
        }
    }

    fn driver_mut(&mut self) -> &mut UdpDriver {
        match self {
            Io::Plain(d) => d,
            Io::Faulty(f) => f.inner_mut(),
        }
    }
}

/// An endpoint, its driver and a loop. See the module documentation.
pub struct Engine<M: Memory> {
    cfg: EngineConfig,
    endpoint: Endpoint<M>,
    io: Io,
    /// Completions in the order the QPs made them, tagged with their CQ.
    done: VecDeque<(u32, Completion)>,
    spin: Spin,
    /// More file descriptors that end a sleep when readable.
    wake_fds: Vec<RawFd>,
    sleeps: u64,
}

impl<M: Memory> Engine<M> {
    /// Binds the socket(s) and sets them up; `mem` is what QPs read and
    /// write.
    pub fn new(cfg: EngineConfig, mem: M) -> Result<Engine<M>, EngineError> {
        let endpoint = Endpoint::new(cfg.first_qpn, mem)?;
        let driver = UdpDriver::new(&cfg)?;
        let io = if cfg.fault_tx.is_some() || cfg.fault_rx.is_some() {
            Io::Faulty(Box::new(Faulty::new(driver, cfg.fault_tx, cfg.fault_rx)))
        } else {
            Io::Plain(Box::new(driver))
        };
        let spin = Spin::new(Duration::from_micros(1), cfg.spin, cfg.spin);
        Ok(Engine {
            cfg,
            endpoint,
            io,
            done: VecDeque::new(),
            spin,
            wake_fds: Vec::new(),
            sleeps: 0,
        })
    }

    // ------------------------------------------------------------ getters

    /// See [`UdpDriver::offloads`].
    pub fn offloads(&self) -> (bool, bool) {
        self.io.driver().offloads()
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The bound address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.io.driver().local_addr()
    }

    /// Whether a second socket serves IPv6 (`also_v6`).
    pub fn has_v6_side(&self) -> bool {
        self.io.driver().has_v6_side()
    }

    pub fn endpoint(&self) -> &Endpoint<M> {
        &self.endpoint
    }

    pub fn memory(&self) -> &M {
        self.endpoint.memory()
    }

    pub fn memory_mut(&mut self) -> &mut M {
        self.endpoint.memory_mut()
    }

    /// Gives the memory back, closing the socket.
    pub fn into_memory(self) -> M {
        self.endpoint.into_memory()
    }

    /// The endpoint's and the driver's counters, and the loop's sleeps.
    pub fn counters(&self) -> EngineCounters {
        let mut c = *self.endpoint.counters();
        c.add(self.io.driver().counters());
        c.sleeps += self.sleeps;
        c
    }

    /// What the send-path and receive-path fault injectors did.
    pub fn fault_counters(&self) -> (FaultCounters, FaultCounters) {
        match &self.io {
            Io::Plain(_) => Default::default(),
            Io::Faulty(f) => f.counters(),
        }
    }

    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.endpoint.qp(qpn)
    }

    pub fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        self.endpoint.qpns()
    }

    pub fn srq_len(&self, srq: u32) -> Option<usize> {
        self.endpoint.srq_len(srq)
    }

    // -------------------------------------------------------------- verbs

    pub fn create_qp(&mut self, spec: QpSpec) -> Result<u32, EngineError> {
        self.endpoint.create_qp(spec)
    }

    pub fn set_qp_tuning(&mut self, qpn: u32, t: QpTuning) -> Result<(), EngineError> {
        self.endpoint.set_qp_tuning(qpn, t, &mut self.done)
    }

    pub fn set_qp_source(&mut self, qpn: u32, addr: IpAddr) -> Result<(), EngineError> {
        self.endpoint.set_qp_source(qpn, addr)
    }

    pub fn set_local_addrs(&mut self, addrs: Option<&[IpAddr]>) {
        self.endpoint.set_local_addrs(addrs);
        self.io.driver_mut().set_local_addrs(addrs);
    }

    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<(), EngineError> {
        self.endpoint.modify_qp(qpn, attr, &mut self.done)
    }

    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), EngineError> {
        self.endpoint.destroy_qp(qpn, &mut self.done)?;
        // A destroyed QP left its groups.
        self.sync_groups()
    }

    /// `ibv_attach_mcast`: the QP receives `group` (see
    /// [`Endpoint::attach_mcast`]); the driver joins the IP group.
    pub fn attach_mcast(&mut self, qpn: u32, group: IpAddr) -> Result<(), EngineError> {
        let was = self.endpoint.mcast_members(group).contains(&qpn);
        self.endpoint.attach_mcast(qpn, group)?;
        if let Err(e) = self.sync_groups() {
            if !was {
                let _ = self.endpoint.detach_mcast(qpn, group);
                let _ = self.sync_groups();
            }
            return Err(e);
        }
        Ok(())
    }

    /// `ibv_detach_mcast`; the driver leaves a group no QP is attached to.
    pub fn detach_mcast(&mut self, qpn: u32, group: IpAddr) -> Result<(), EngineError> {
        self.endpoint.detach_mcast(qpn, group)?;
        self.sync_groups()
    }

    /// The IP groups the driver receives: those some QP is attached to.
    fn sync_groups(&mut self) -> Result<(), EngineError> {
        let want = super::mcast::ipv4_groups(self.endpoint.mcast_groups());
        self.io.driver_mut().sync_groups(&want)
    }

    pub fn post_send(&mut self, qpn: u32, wqe: SendWqe) -> Result<(), EngineError> {
        self.endpoint.post_send(qpn, wqe, &mut self.done)
    }

    pub fn post_recv(&mut self, qpn: u32, wqe: RecvWqe) -> Result<(), EngineError> {
        self.endpoint.post_recv(qpn, wqe, &mut self.done)
    }

    pub fn create_srq(&mut self, max_wr: u32) -> u32 {
        self.endpoint.create_srq(max_wr)
    }

    pub fn post_srq_recv(&mut self, srq: u32, wqe: RecvWqe) -> Result<(), EngineError> {
        self.endpoint.post_srq_recv(srq, wqe)
    }

    pub fn destroy_srq(&mut self, srq: u32) -> Result<(), EngineError> {
        self.endpoint.destroy_srq(srq)
    }

    /// The oldest completion not yet taken, with its CQ.
    pub fn poll_completion(&mut self) -> Option<(u32, Completion)> {
        self.done.pop_front()
    }

    /// The next asynchronous QP event.
    pub fn poll_event(&mut self) -> Option<(u32, QpEvent)> {
        self.endpoint.poll_event()
    }

    // ----------------------------------------------------------- the loop

    /// File descriptors (doorbell eventfds, a control socket) that end
    /// the sleep in [`Engine::run_once`] when readable, at most
    /// [`MAX_WAKE_FDS`]. The engine never reads them.
    pub fn set_wake_fds(&mut self, fds: &[RawFd]) -> Result<(), EngineError> {
        if fds.len() > MAX_WAKE_FDS {
            return Err(EngineError::Config("too many wake fds"));
        }
        self.wake_fds.clear();
        self.wake_fds.extend_from_slice(fds);
        Ok(())
    }

    /// The earliest time the engine has something to do without input.
    pub fn next_deadline(&self) -> Option<Instant> {
        let held = match &self.io {
            Io::Plain(_) => None,
            Io::Faulty(f) => f.poll_timeout(),
        };
        self.endpoint.poll_timeout().into_iter().chain(held).min()
    }

    /// Whether packets are waiting to be produced or sent.
    pub fn has_pending_tx(&self) -> bool {
        self.endpoint.has_transmit()
            || match &self.io {
                Io::Plain(d) => d.has_pending(),
                Io::Faulty(f) => f.has_pending(),
            }
    }

    /// One iteration: fire due timers, then alternate one receive batch
    /// (recv, dispatch) and one transmit batch (so ACKs and newly opened
    /// windows go out while the peer still works on the previous batch)
    /// until both are quiet or the I/O budget is spent. When nothing
    /// happened it spins (see [`Spin`], at most `config().spin`) across
    /// calls and then sleeps in ppoll until a socket or a wake fd is
    /// readable, the next deadline, or `timeout`, whichever comes first
    /// (`None`: no limit of its own; `Some(ZERO)`: never sleep).
    pub fn run_once(&mut self, timeout: Option<Duration>) -> Result<RunReport, EngineError> {
        let mut rep = RunReport::default();
        let mut now = Instant::now();
        rep.timers = self.endpoint.handle_timeout(now, &mut self.done);
        for _ in 0..self.cfg.io_rounds() {
            let (r, s) = self.round(now)?;
            rep.received += r;
            rep.sent += s;
            if r == 0 && s == 0 {
                break;
            }
            now = Instant::now();
        }
        if !rep.idle() {
            self.spin.busy();
            return Ok(rep);
        }
        let now = Instant::now();
        if self.spin.keep_spinning(now) {
            std::hint::spin_loop();
            return Ok(rep);
        }
        let mut wait = timeout;
        if let Some(d) = self.next_deadline() {
            let until = d.saturating_duration_since(now);
            wait = Some(wait.map_or(until, |w| w.min(until)));
        }
        if wait == Some(Duration::ZERO) {
            return Ok(rep);
        }
        self.spin.sleeping();
        self.sleeps += 1;
        rep.slept = true;
        self.io.driver().wait(&self.wake_fds, false, wait)?;
        Ok(rep)
    }

    /// receive -> dispatch -> transmit; returns the packets received and
    /// sent.
    fn round(&mut self, now: Instant) -> Result<(usize, usize), EngineError> {
        let Engine {
            endpoint: ep,
            io,
            done,
            ..
        } = self;
        let got = match io {
            Io::Plain(d) => d.recv(),
            Io::Faulty(f) => f.recv(),
        };
        // What a failed call left from the other socket is dispatched
        // before the error is reported.
        let mut handle = |m: &RecvMeta, b: &mut [u8]| ep.handle_datagram(now, m, b, done);
        let r = match io {
            Io::Plain(d) => d.dispatch(&mut handle),
            Io::Faulty(f) => f.dispatch(now, &mut handle),
        };
        ep.memory_mut().flush_writes();
        got?;
        let s = match io {
            Io::Plain(d) => d.transmit(|b| ep.poll_transmit(now, b, done)),
            Io::Faulty(f) => f.transmit(now, |b| ep.poll_transmit(now, b, done)),
        };
        ep.memory_mut().end_batch();
        Ok((r, s))
    }
}
