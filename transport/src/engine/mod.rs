//! The UDP engine: owns the socket, the QP table, SRQs, completion queues
//! and timers; batches I/O with recvmmsg/sendmmsg; verifies and fills in
//! ICRCs; drives the sans-IO [`Qp`] state machines.
//!
//! One engine serves one local address (IPv4 or IPv6, or a wildcard, then
//! the local address of each datagram comes from IP_PKTINFO and each QP
//! sends from the address its peer reached it at, or one pinned with
//! [`Engine::set_qp_source`]). Bound to 0.0.0.0 with `also_v6`, a second
//! socket on [::] serves IPv6 (packets to IPv6 destinations leave through
//! it); `bind_device` ties both to one netdev, and
//! [`Engine::set_local_addrs`] limits the local addresses accepted (a
//! device serving its netdev's current addresses). The socket is unconnected with DF set
//! (IP_PMTUDISC_DO): Linux then sends IPv4 ID 0, and the ICRC is computed
//! with ID 0. It sends from its own bound port (4791), not from the per-QP
//! source port a [`Transmit`] names: an ordinary UDP socket has one source
//! port, and RoCEv2 receivers only look at the destination port. IPv6
//! sends and accepts a zero UDP checksum, as rxe does.
//!
//! # UDP GSO and GRO
//!
//! On by default (measured: RC WRITE goodput on loopback 13 -> 28 Gbit/s).
//! A run of equal-sized packets to one destination goes as one GSO send
//! (up to 15 packets of 4 KiB); the kernel gives segment `i` the IPv4 ID
//! `i` (base 0 for an unconnected DF socket), so the ICRC of segment `i`
//! is computed with ID `i`. A GRO datagram is split by its segment size,
//! and segment `k` is first checked with ID `k` exactly. Any other packet
//! is checked with ID 0 and, failing that, with the ID recovered from the
//! ICRC ([`icrc::verify_v4_unknown_id`]; kernel rxe and hardware use IDs of
//! their own); those are counted in `icrc_nonzero_id`. IPv6 never uses GSO
//! (the kernel refuses GSO with a zero UDP checksum). Captures on `lo` show
//! GSO sends unsplit; turn `gso` off to capture packet by packet.
//!
//! # The loop
//!
//! Receive path: recvmmsg batch -> (fault injector) -> [`Packet::parse`] ->
//! ICRC check -> QP lookup by BTH DestQP -> [`Qp::handle_packet`]. Bad
//! packets are counted and dropped; nothing from the network panics.
//!
//! [`Engine::run_once`] is one iteration: fire due timers, then alternate
//! one receive batch and one transmit batch (so ACKs and newly opened
//! windows go out while the peer still works on the previous batch) until
//! both are quiet or the I/O budget is spent. When there was nothing to do
//! it spins (adaptively, at most `spin`) and then sleeps in `ppoll` until
//! the socket is readable, the next deadline or the caller's timeout.

pub mod fault;
pub mod sys;
mod tx;

use crate::qp::{
    Completion, CqSide, Env, Memory, Qp, QpAttr, QpConfig, QpError, QpEvent, QpTuning, QpType,
    RecvSource, RecvWqe, SendWqe,
};
use crate::wire::icrc::{self, IcrcIp};
use crate::wire::ip::IPV4_DF;
use crate::wire::{Packet, MAX_PACKET, ROCE_V2_PORT};
use fault::{DelayLine, Fate, FaultConfig, FaultCounters, FaultInjector};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};
use tx::Out;

pub use crate::qp::Transmit;

/// Engine configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// Local address to bind (may be the unspecified address).
    pub addr: IpAddr,
    /// Local UDP port (4791).
    pub port: u16,
    /// Destination UDP port of everything sent (4791).
    pub peer_port: u16,
    /// Datagrams per recvmmsg/sendmmsg (1..=64).
    pub batch: usize,
    /// Send runs of equal-sized packets to one destination as one UDP GSO
    /// datagram (IPv4 only; segment `i` carries IP ID `i` and its ICRC is
    /// computed with it). Packet captures on `lo` then show the unsplit
    /// datagrams.
    pub gso: bool,
    /// Receive coalesced datagrams (UDP GRO) and split them.
    pub gro: bool,
    /// Ask for TOS and TTL of received packets (for [`crate::qp::RxMeta`]).
    pub recv_tos_ttl: bool,
    /// SO_RCVBUF / SO_SNDBUF (forced when permitted); 0 leaves the default.
    pub socket_buffer: usize,
    /// Longest an idle engine keeps polling before it sleeps. Within it
    /// the engine adapts: the spin doubles when work turned up while it
    /// spun and halves when it had to sleep anyway (on 2 shared cores a
    /// long fixed spin only takes the CPU from the peer it waits for).
    pub spin: Duration,
    /// Most packets one [`Engine::run_once`] sends / receives.
    pub io_budget: usize,
    /// Faults injected on the send path (after the ICRC is written).
    pub fault_tx: Option<FaultConfig>,
    /// Faults injected on the receive path (before the ICRC check).
    pub fault_rx: Option<FaultConfig>,
    /// First QP number handed out (QPNs are 24 bit, never 0 or 1).
    pub first_qpn: u32,
    /// SO_BINDTODEVICE: only packets that arrive on this netdev, sent
    /// through it (a wildcard bound to a device then does not conflict
    /// with wildcards bound to other devices).
    pub bind_device: Option<String>,
    /// With `addr` 0.0.0.0: a second socket on [::]:`port` (IPv6 only)
    /// serves the IPv6 addresses; packets to IPv6 destinations go out
    /// through it.
    pub also_v6: bool,
}

impl EngineConfig {
    /// Defaults for `addr`: port 4791, batch 32, 4 MiB socket buffers,
    /// 50 us spin, no faults.
    pub fn new(addr: IpAddr) -> EngineConfig {
        EngineConfig {
            addr,
            port: ROCE_V2_PORT,
            peer_port: ROCE_V2_PORT,
            batch: 32,
            gso: true,
            gro: true,
            recv_tos_ttl: true,
            socket_buffer: 4 << 20,
            spin: Duration::from_micros(50),
            io_budget: 256,
            fault_tx: None,
            fault_rx: None,
            first_qpn: 0x11,
            bind_device: None,
            also_v6: false,
        }
    }
}

/// Per-device counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// RoCE packets handed to the kernel (a GSO datagram counts its
    /// segments).
    pub sent_pkts: u64,
    pub sent_bytes: u64,
    /// RoCE packets taken from the kernel (a GRO datagram counts its
    /// segments).
    pub rcvd_pkts: u64,
    pub rcvd_bytes: u64,
    /// Dropped: ICRC mismatch.
    pub icrc_errors: u64,
    /// Accepted IPv4 packets whose ICRC matched only with a non-zero IP ID
    /// (recovered; kernel rxe and hardware peers).
    pub icrc_nonzero_id: u64,
    /// Dropped: not a valid IB transport packet.
    pub parse_errors: u64,
    /// Dropped: no QP with the BTH DestQP.
    pub unknown_qp: u64,
    /// Dropped: larger than any RoCE packet (or no usable source address).
    pub truncated: u64,
    /// Packets the QPs produced that could not be sent (address family,
    /// refused by the kernel).
    pub send_errors: u64,
    /// recvmmsg / sendmmsg calls that moved something.
    pub rx_syscalls: u64,
    pub tx_syscalls: u64,
    /// sendmmsg found the socket buffer full.
    pub tx_full: u64,
    /// QP timers that fired.
    pub timer_fires: u64,
    /// Times the engine went to sleep in ppoll.
    pub sleeps: u64,
    /// Dropped: sent to a local address the engine was told not to serve
    /// ([`Engine::set_local_addrs`]).
    pub not_local: u64,
    /// Send rounds skipped because the engine's own receive queue was over
    /// half full (see [`Engine::run_once`]).
    pub tx_paused: u64,
}

/// Misuse of the engine API or a socket failure.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    #[error("no QP {0:#x}")]
    NoQp(u32),
    #[error("no SRQ {0}")]
    NoSrq(u32),
    #[error("SRQ {0} is full")]
    SrqFull(u32),
    #[error("no free QP number")]
    QpnExhausted,
    #[error("invalid configuration: {0}")]
    Config(&'static str),
    #[error(transparent)]
    Qp(#[from] QpError),
}

/// What [`Engine::create_qp`] needs besides the QP number it assigns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSpec {
    pub qp_type: QpType,
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub srq: Option<u32>,
    pub sq_sig_all: bool,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
}

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

/// A shared receive queue: receive WQEs any of its QPs may take.
#[derive(Debug)]
struct Srq {
    q: VecDeque<RecvWqe>,
    max: usize,
}

impl RecvSource for Srq {
    fn pop(&mut self) -> Option<RecvWqe> {
        self.q.pop_front()
    }
}

struct QpSlot {
    qp: Qp,
    send_cq: u32,
    recv_cq: u32,
    srq: Option<u32>,
    /// The deadline we have a heap entry for.
    armed: Option<Instant>,
    /// In the transmit queue.
    queued: bool,
    /// Source address of its packets when the engine is bound to a
    /// wildcard: set by [`Engine::set_qp_source`], else learnt from the
    /// destination of the packets it receives.
    src: Option<IpAddr>,
    src_pinned: bool,
}

/// The IPv6 socket of an engine bound to 0.0.0.0 with `also_v6`, with
/// its own send path (a sendmmsg batch goes to one socket).
struct V6Side {
    sock: Socket,
    out: Out,
    tx: sys::SendBufs,
}

/// Most extra file descriptors [`Engine::set_wake_fds`] takes.
pub const MAX_WAKE_FDS: usize = 8;

/// Largest QPN + 1.
const QPN_SPACE: u32 = 1 << 24;
/// Receive slot size: any RoCE packet plus one byte to see oversize ones.
const RX_SLOT: usize = MAX_PACKET + 64;
const TX_SLOT: usize = MAX_PACKET + 64;
/// Receive slot with UDP GRO: a whole coalesced datagram.
const GRO_SLOT: usize = 65536;
/// Most GRO datagrams per recvmmsg, and most GSO datagrams (of up to 16
/// packets) per sendmmsg: 8 x 64 KiB stay in cache between the copy that
/// fills them and the one that empties them (measured on RC WRITE, 2 cores:
/// 19.3 Gbit/s with 8 GSO datagrams per call against 16.8 with 32, raw UDP
/// 37 with either).
pub const GRO_BATCH: usize = 8;

/// The UDP engine. See the module documentation.
pub struct Engine<M: Memory> {
    cfg: EngineConfig,
    sock: Socket,
    local: SocketAddr,
    v6: Option<V6Side>,
    /// Local addresses packets are accepted for (None: any).
    accept: Option<Vec<IpAddr>>,
    mem: M,
    qps: HashMap<u32, QpSlot>,
    srqs: HashMap<u32, Srq>,
    cqs: HashMap<u32, VecDeque<Completion>>,
    events: VecDeque<(u32, QpEvent)>,
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
    active: VecDeque<u32>,
    due: Vec<u32>,
    next_qpn: u32,
    next_srq: u32,
    rx: sys::RecvBufs,
    tx: sys::SendBufs,
    out: Out,
    fault_rx: Option<FaultInjector>,
    delay_rx: DelayLine<sys::RecvInfo>,
    counters: EngineCounters,
    idle_since: Option<Instant>,
    /// Current spin budget, adapted within `cfg.spin`.
    spin: Duration,
    /// More file descriptors that end a sleep when readable.
    wake_fds: Vec<RawFd>,
    gso: bool,
    gro: bool,
    /// Packets sent since the receive queue was last found below half
    /// full (the check is a system call: not for every small batch).
    sent_unchecked: usize,
}

/// Packets sent between two looks at the own receive queue: well below
/// half of any useful buffer (1000 full-sized packets in 8 MiB).
const RX_CHECK_EVERY: usize = 64;

impl<M: Memory> Engine<M> {
    /// Binds the socket and sets it up; `mem` is what QPs read and write.
    pub fn new(cfg: EngineConfig, mem: M) -> Result<Engine<M>, EngineError> {
        if cfg.batch == 0 || cfg.batch > sys::MAX_BATCH {
            return Err(EngineError::Config("batch must be 1..=64"));
        }
        if cfg.first_qpn >= QPN_SPACE {
            return Err(EngineError::Config("first_qpn must be below 2^24"));
        }
        let v6 = cfg.addr.is_ipv6();
        let wildcard = cfg.addr.is_unspecified();
        if cfg.also_v6 && (v6 || !wildcard) {
            return Err(EngineError::Config("also_v6 needs addr 0.0.0.0"));
        }
        let (sock, local) = open_socket(&cfg, cfg.addr, cfg.port)?;
        let fd = sock.as_raw_fd();
        let batch = cfg.batch;
        let cfg_spin = cfg.spin;
        let gso = cfg.gso && sys::probe_udp_segment(fd) && !v6;
        let gro = cfg.gro && sys::set_udp_gro(fd, true).is_ok();
        // With GSO a datagram carries up to 15 full-sized packets: room for
        // 16 packets per datagram of the batch.
        let (tx_slots, tx_items) = if gso {
            let n = batch.min(GRO_BATCH);
            (n * 16, n)
        } else {
            (batch, batch)
        };
        let rx_slot = if gro { GRO_SLOT } else { RX_SLOT };
        // GRO datagrams are up to 64 KiB: 8 of them (512 KiB) per recvmmsg
        // keep the batch in cache while it is processed (measured: 28-29
        // Gbit/s RC WRITE with 8 against 14-27 with 32).
        let rx_batch = if gro { batch.min(GRO_BATCH) } else { batch };
        let out = Out::new(
            local,
            if wildcard { None } else { Some(cfg.addr) },
            cfg.peer_port,
            gso,
            cfg.fault_tx
                .filter(|f| !f.is_none())
                .map(FaultInjector::new),
            TX_SLOT,
        );
        let v6side = if cfg.also_v6 {
            let any6 = IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED);
            // Bound to the same port as the IPv4 socket.
            let (sock, local6) = open_socket(&cfg, any6, local.port())?;
            // GSO is never used on IPv6 (zero UDP checksum, see above).
            let out = Out::new(local6, None, cfg.peer_port, false, None, TX_SLOT);
            Some(V6Side {
                sock,
                out,
                tx: sys::SendBufs::new(batch, TX_SLOT, batch),
            })
        } else {
            None
        };
        Ok(Engine {
            v6: v6side,
            accept: None,
            fault_rx: cfg
                .fault_rx
                .filter(|f| !f.is_none())
                .map(FaultInjector::new),
            next_qpn: cfg.first_qpn.max(2),
            cfg,
            sock,
            local,
            mem,
            qps: HashMap::new(),
            srqs: HashMap::new(),
            cqs: HashMap::new(),
            events: VecDeque::new(),
            timers: BinaryHeap::new(),
            active: VecDeque::new(),
            due: Vec::new(),
            next_srq: 1,
            rx: sys::RecvBufs::new(rx_batch, rx_slot),
            tx: sys::SendBufs::new(tx_slots, TX_SLOT, tx_items),
            out,
            delay_rx: DelayLine::new(RX_SLOT),
            counters: EngineCounters::default(),
            idle_since: None,
            spin: cfg_spin,
            wake_fds: Vec::new(),
            gso,
            gro,
            sent_unchecked: 0,
        })
    }

    /// Whether UDP GSO / GRO are in use (asked for in the configuration and
    /// accepted by the kernel; GSO is never used on IPv6, whose zero UDP
    /// checksum the kernel does not combine with GSO).
    pub fn offloads(&self) -> (bool, bool) {
        (self.gso, self.gro)
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The bound address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn memory(&self) -> &M {
        &self.mem
    }

    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }

    /// Gives the memory back, closing the socket.
    pub fn into_memory(self) -> M {
        self.mem
    }

    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    /// What the send-path and receive-path fault injectors did.
    pub fn fault_counters(&self) -> (FaultCounters, FaultCounters) {
        (
            self.out
                .fault
                .as_ref()
                .map(FaultInjector::counters)
                .unwrap_or_default(),
            self.fault_rx
                .as_ref()
                .map(FaultInjector::counters)
                .unwrap_or_default(),
        )
    }

    // ---------------------------------------------------------------- QPs

    /// Creates a QP (in RESET) and returns its number.
    pub fn create_qp(&mut self, spec: QpSpec) -> Result<u32, EngineError> {
        if let Some(s) = spec.srq {
            if !self.srqs.contains_key(&s) {
                return Err(EngineError::NoSrq(s));
            }
        }
        let qpn = self.alloc_qpn()?;
        let qp = Qp::new(QpConfig {
            qpn,
            qp_type: spec.qp_type,
            pd: spec.pd,
            srq: spec.srq,
            sq_sig_all: spec.sq_sig_all,
            max_send_wr: spec.max_send_wr,
            max_recv_wr: spec.max_recv_wr,
        });
        self.qps.insert(
            qpn,
            QpSlot {
                qp,
                send_cq: spec.send_cq,
                recv_cq: spec.recv_cq,
                srq: spec.srq,
                armed: None,
                queued: false,
                src: None,
                src_pinned: false,
            },
        );
        Ok(qpn)
    }

    fn alloc_qpn(&mut self) -> Result<u32, EngineError> {
        // At most one full turn of the 24-bit space.
        for _ in 0..QPN_SPACE {
            let q = self.next_qpn;
            self.next_qpn = if q + 1 >= QPN_SPACE - 1 { 2 } else { q + 1 };
            if (2..QPN_SPACE - 1).contains(&q) && !self.qps.contains_key(&q) {
                return Ok(q);
            }
        }
        Err(EngineError::QpnExhausted)
    }

    /// The QP (for its state and counters).
    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(&qpn).map(|s| &s.qp)
    }

    /// Replaces a QP's transport tuning (window, ACK interval, ...).
    pub fn set_qp_tuning(&mut self, qpn: u32, t: QpTuning) -> Result<(), EngineError> {
        let slot = self.qps.get_mut(&qpn).ok_or(EngineError::NoQp(qpn))?;
        slot.qp.set_tuning(t);
        self.after_activity(qpn);
        Ok(())
    }

    /// The source address of a QP's packets (its GID's address) when the
    /// engine is bound to a wildcard address; without it the engine uses
    /// the address the QP's peer last sent to, or the route's source.
    pub fn set_qp_source(&mut self, qpn: u32, addr: IpAddr) -> Result<(), EngineError> {
        let slot = self.qps.get_mut(&qpn).ok_or(EngineError::NoQp(qpn))?;
        slot.src = Some(addr);
        slot.src_pinned = true;
        Ok(())
    }

    /// Accept packets only when sent to one of `addrs` (the device's GIDs
    /// on a wildcard-bound engine); `None` accepts any local address.
    pub fn set_local_addrs(&mut self, addrs: Option<&[IpAddr]>) {
        self.accept = addrs.map(<[IpAddr]>::to_vec);
    }

    /// QP numbers in use.
    pub fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        self.qps.keys().copied()
    }

    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<(), EngineError> {
        let slot = self.qps.get_mut(&qpn).ok_or(EngineError::NoQp(qpn))?;
        let r = slot.qp.modify(attr);
        self.after_activity(qpn);
        r.map_err(EngineError::from)
    }

    /// Destroys a QP. Completions it already produced stay in their CQs.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), EngineError> {
        if !self.qps.contains_key(&qpn) {
            return Err(EngineError::NoQp(qpn));
        }
        self.after_activity(qpn);
        self.qps.remove(&qpn);
        self.active.retain(|&q| q != qpn);
        Ok(())
    }

    pub fn post_send(&mut self, qpn: u32, wqe: SendWqe) -> Result<(), EngineError> {
        let slot = self.qps.get_mut(&qpn).ok_or(EngineError::NoQp(qpn))?;
        let r = slot.qp.post_send(wqe);
        self.after_activity(qpn);
        r.map_err(EngineError::from)
    }

    pub fn post_recv(&mut self, qpn: u32, wqe: RecvWqe) -> Result<(), EngineError> {
        let slot = self.qps.get_mut(&qpn).ok_or(EngineError::NoQp(qpn))?;
        let r = slot.qp.post_recv(wqe);
        self.after_activity(qpn);
        r.map_err(EngineError::from)
    }

    // --------------------------------------------------------------- SRQs

    /// Creates an SRQ holding at most `max_wr` receive WQEs.
    pub fn create_srq(&mut self, max_wr: u32) -> u32 {
        let mut id = self.next_srq;
        // Bounded: fewer SRQs exist than u32 values.
        for _ in 0..=self.srqs.len() {
            if !self.srqs.contains_key(&id) && id != 0 {
                break;
            }
            id = id.wrapping_add(1);
        }
        self.next_srq = id.wrapping_add(1);
        self.srqs.insert(
            id,
            Srq {
                q: VecDeque::new(),
                max: max_wr as usize,
            },
        );
        id
    }

    pub fn post_srq_recv(&mut self, srq: u32, wqe: RecvWqe) -> Result<(), EngineError> {
        let s = self.srqs.get_mut(&srq).ok_or(EngineError::NoSrq(srq))?;
        if s.q.len() >= s.max {
            return Err(EngineError::SrqFull(srq));
        }
        s.q.push_back(wqe);
        Ok(())
    }

    /// Receive WQEs waiting in an SRQ.
    pub fn srq_len(&self, srq: u32) -> Option<usize> {
        self.srqs.get(&srq).map(|s| s.q.len())
    }

    /// Destroys an SRQ; its QPs find no receive WQEs from then on.
    pub fn destroy_srq(&mut self, srq: u32) -> Result<(), EngineError> {
        self.srqs
            .remove(&srq)
            .map(|_| ())
            .ok_or(EngineError::NoSrq(srq))
    }

    // ---------------------------------------------------------------- CQs

    /// Takes up to `max` completions from CQ `cq`.
    pub fn poll_cq(&mut self, cq: u32, max: usize) -> Vec<Completion> {
        let mut v = Vec::new();
        if let Some(q) = self.cqs.get_mut(&cq) {
            let n = max.min(q.len());
            v.extend(q.drain(..n));
        }
        v
    }

    /// Takes completions from CQ `cq` into `out`; returns how many.
    pub fn poll_cq_into(&mut self, cq: u32, out: &mut [Completion]) -> usize {
        let Some(q) = self.cqs.get_mut(&cq) else {
            return 0;
        };
        let n = out.len().min(q.len());
        for (o, c) in out.iter_mut().zip(q.drain(..n)) {
            *o = c;
        }
        n
    }

    /// Completions waiting in CQ `cq`.
    pub fn cq_len(&self, cq: u32) -> usize {
        self.cqs.get(&cq).map_or(0, VecDeque::len)
    }

    /// The next asynchronous QP event.
    pub fn poll_event(&mut self) -> Option<(u32, QpEvent)> {
        self.events.pop_front()
    }

    // ----------------------------------------------------------- the loop

    /// The socket's file descriptor (for an outer poll loop).
    pub fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// The IPv6 socket's, with `also_v6` (an outer poll loop waits on it
    /// too).
    pub fn as_raw_fd_v6(&self) -> Option<RawFd> {
        self.v6.as_ref().map(|v| v.sock.as_raw_fd())
    }

    /// File descriptors (doorbell eventfds, a control socket) that end
    /// the engine's sleep in [`Engine::run_once`] when readable, at most
    /// [`MAX_WAKE_FDS`]. The engine never reads them: the caller drains
    /// them after `run_once` returns.
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
        let t = self.timers.peek().map(|Reverse((t, _))| *t);
        [t, self.out.delay.deadline(), self.delay_rx.deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether packets are waiting to be produced or sent.
    pub fn has_pending_tx(&self) -> bool {
        !self.active.is_empty() || self.tx_pending() > 0 || !self.out.delay.is_empty()
    }

    /// One iteration: receive a batch (or a few), fire due timers, transmit
    /// what the QPs have. When nothing happened, it spins for
    /// `config().spin` across calls and then sleeps in ppoll until the
    /// socket is readable, the next deadline, or `timeout`, whichever comes
    /// first (`None`: no limit of its own; `Some(ZERO)`: never sleep).
    pub fn run_once(&mut self, timeout: Option<Duration>) -> Result<RunReport, EngineError> {
        self.run_once_with(timeout, &mut |_| {})
    }

    /// [`Engine::run_once`], calling `before_dispatch` after each receive
    /// system call that brought packets and before they are processed.
    /// The owner of the receive queues posts there what its clients have
    /// posted so far: a receive posted before a packet arrived is then
    /// always there for it (UD and UC drop a message that finds none).
    pub fn run_once_with(
        &mut self,
        timeout: Option<Duration>,
        before_dispatch: &mut dyn FnMut(&mut Self),
    ) -> Result<RunReport, EngineError> {
        let mut rep = RunReport::default();
        let mut now = Instant::now();
        rep.timers = self.fire_timers(now);
        // Receive a batch, send what it produced (ACKs, responses, a window
        // that just opened), repeat: what one side produces goes out
        // while the peer is still busy with the previous batch.
        let rounds = self.cfg.io_budget.div_ceil(self.cfg.batch).max(1);
        for _ in 0..rounds {
            let r = self.receive(now, before_dispatch)?;
            let s = self.transmit(now);
            rep.received += r;
            rep.sent += s;
            if r == 0 && s == 0 {
                break;
            }
            now = Instant::now();
        }
        if !rep.idle() {
            if self.idle_since.take().is_some() {
                // Work turned up while we spun: spinning pays, spin longer.
                self.spin = (self.spin * 2).clamp(Duration::from_micros(1), self.cfg.spin);
            }
            return Ok(rep);
        }
        let now = Instant::now();
        let since = *self.idle_since.get_or_insert(now);
        if now.saturating_duration_since(since) < self.spin {
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
        // Spun for nothing: spin less next time.
        self.spin /= 2;
        self.counters.sleeps += 1;
        rep.slept = true;
        let mut fds = [(self.sock.as_raw_fd(), self.tx.pending() > 0); 2 + MAX_WAKE_FDS];
        let mut n = 1;
        if let Some(v) = &self.v6 {
            fds[1] = (v.sock.as_raw_fd(), v.tx.pending() > 0);
            n = 2;
        }
        for (slot, &fd) in fds[n..].iter_mut().zip(&self.wake_fds) {
            *slot = (fd, false);
        }
        sys::wait(&fds[..n + self.wake_fds.len()], wait)?;
        self.idle_since = None;
        Ok(rep)
    }

    // ----------------------------------------------------------- receive

    /// One recvmmsg per socket and what it brought; returns the packets
    /// taken.
    fn receive(
        &mut self,
        now: Instant,
        hook: &mut dyn FnMut(&mut Self),
    ) -> Result<usize, EngineError> {
        let mut total = self.receive_from(self.sock.as_raw_fd(), now, hook)?;
        if let Some(fd) = self.as_raw_fd_v6() {
            total += self.receive_from(fd, now, hook)?;
        }
        Ok(total)
    }

    /// One recvmmsg on `fd` and what it brought.
    fn receive_from(
        &mut self,
        fd: RawFd,
        now: Instant,
        hook: &mut dyn FnMut(&mut Self),
    ) -> Result<usize, EngineError> {
        let mut total = 0;
        // A reported ICMP error is not fatal; try once more.
        let mut n = 0;
        for _ in 0..2 {
            match self.rx.recv(fd) {
                Ok(k) => {
                    n = k;
                    break;
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH)
                    ) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if n > 0 {
            self.counters.rx_syscalls += 1;
            hook(self);
        }
        for i in 0..n {
            let info = self.rx.info[i];
            self.counters.rcvd_bytes += info.len as u64;
            if info.len == 0 {
                // An empty datagram: not even a BTH.
                self.counters.rcvd_pkts += 1;
                self.counters.parse_errors += 1;
                continue;
            }
            if info.truncated || info.len > self.rx.slot {
                self.counters.rcvd_pkts += 1;
                self.counters.truncated += 1;
                continue;
            }
            // Take the buffer out to process it while `self` is borrowed
            // mutably (a move of the Vec, no copy or allocation).
            let mut data = std::mem::take(&mut self.rx.data);
            let at = i * self.rx.slot;
            let dgram = &mut data[at..at + info.len];
            let seg = info.gro_size.map_or(info.len, usize::from).max(1);
            for (k, p) in dgram.chunks_mut(seg).enumerate() {
                self.counters.rcvd_pkts += 1;
                total += 1;
                if p.len() > MAX_PACKET {
                    self.counters.truncated += 1;
                    continue;
                }
                let info = sys::RecvInfo {
                    seg: k as u16,
                    ..info
                };
                self.rx_datagram(p, &info, now);
            }
            self.rx.data = data;
        }
        if self.delay_rx.due(now) {
            self.release_rx_delay(now);
        }
        Ok(total)
    }

    fn rx_datagram(&mut self, buf: &mut [u8], info: &sys::RecvInfo, now: Instant) {
        let fate = match self.fault_rx.as_mut() {
            Some(f) => f.judge(buf),
            None => Fate::Deliver,
        };
        match fate {
            Fate::Drop => return,
            Fate::Deliver => self.process(buf, info, now),
            Fate::Duplicate => {
                self.process(buf, info, now);
                self.process(buf, info, now);
            }
            Fate::Delay => {
                if !self.delay_rx.hold(buf, *info, now) {
                    if let Some(f) = self.fault_rx.as_mut() {
                        f.delay_refused();
                    }
                    self.process(buf, info, now);
                }
                return;
            }
        }
        self.delay_rx.note_passed();
        if self.delay_rx.due(now) {
            self.release_rx_delay(now);
        }
    }

    fn release_rx_delay(&mut self, now: Instant) {
        if let Some((buf, len, info)) = self.delay_rx.release() {
            self.process(&buf[..len], &info, now);
            self.delay_rx.restore(buf);
        }
    }

    /// Verifies and dispatches one RoCE packet (the UDP payload).
    fn process(&mut self, buf: &[u8], info: &sys::RecvInfo, now: Instant) {
        let pkt = match Packet::parse(buf) {
            Ok(p) => p,
            Err(_) => {
                self.counters.parse_errors += 1;
                return;
            }
        };
        let Some(dst) = info.dst.or(self.out.local_ip) else {
            self.counters.truncated += 1;
            return;
        };
        if let Some(acc) = &self.accept {
            if !acc.contains(&dst) {
                self.counters.not_local += 1;
                return;
            }
        }
        let src = info.src;
        let lport = self.local.port();
        let ok = match (src.ip(), dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                // Segment k of a GRO datagram from an rxu GSO sender carries
                // IP ID k: check that exactly first (full 32-bit strength).
                // Otherwise (ID 0 on the fast path, or a peer such as rxe
                // with IDs of its own) recover the ID from the ICRC.
                let exact = info.seg != 0
                    && icrc::verify(
                        &IcrcIp::V4 {
                            src: s,
                            dst: d,
                            id: info.seg,
                            flags_frag: IPV4_DF,
                        },
                        src.port(),
                        lport,
                        buf,
                    )
                    .is_ok();
                exact
                    || match icrc::verify_v4_unknown_id(s, d, IPV4_DF, src.port(), lport, buf) {
                        Ok(0) => true,
                        Ok(_) => {
                            self.counters.icrc_nonzero_id += 1;
                            true
                        }
                        Err(_) => false,
                    }
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                icrc::verify(&IcrcIp::v6(s, d), src.port(), lport, buf).is_ok()
            }
            _ => false,
        };
        if !ok {
            self.counters.icrc_errors += 1;
            return;
        }
        let qpn = pkt.hdr.bth.dest_qpn;
        let Some(slot) = self.qps.get_mut(&qpn) else {
            self.counters.unknown_qp += 1;
            return;
        };
        if !slot.src_pinned {
            slot.src = Some(dst);
        }
        let meta = crate::qp::RxMeta {
            src: src.ip(),
            src_port: src.port(),
            dst,
            tos: info.tos.unwrap_or(0),
            ttl: info.ttl.unwrap_or(64),
        };
        let srq = slot
            .srq
            .and_then(|id| self.srqs.get_mut(&id))
            .map(|s| s as &mut dyn RecvSource);
        let mut env = Env {
            mem: &mut self.mem,
            srq,
        };
        slot.qp.handle_packet(now, &pkt, &meta, &mut env);
        self.after_activity(qpn);
    }

    // ------------------------------------------------------------ timers

    fn fire_timers(&mut self, now: Instant) -> usize {
        self.due.clear();
        while let Some(&Reverse((t, qpn))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            if let Some(slot) = self.qps.get_mut(&qpn) {
                if slot.armed == Some(t) {
                    slot.armed = None;
                    self.due.push(qpn);
                }
            }
        }
        let mut fired = 0;
        for i in 0..self.due.len() {
            let qpn = self.due[i];
            let Some(slot) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let srq = slot
                .srq
                .and_then(|id| self.srqs.get_mut(&id))
                .map(|s| s as &mut dyn RecvSource);
            let mut env = Env {
                mem: &mut self.mem,
                srq,
            };
            slot.qp.handle_timeout(now, &mut env);
            fired += 1;
            self.after_activity(qpn);
        }
        self.counters.timer_fires += fired as u64;
        // Keep stale heap entries in check.
        if self.timers.len() > 1024 + 8 * self.qps.len() {
            self.timers = self
                .qps
                .iter()
                .filter_map(|(&q, s)| s.armed.map(|t| Reverse((t, q))))
                .collect();
        }
        fired
    }

    /// Collects what a QP produced after any call into it: completions to
    /// their CQs, events, its timer, its place in the transmit queue.
    fn after_activity(&mut self, qpn: u32) {
        let Some(slot) = self.qps.get_mut(&qpn) else {
            return;
        };
        while let Some(c) = slot.qp.poll_completion() {
            let cq = match c.side {
                CqSide::Send => slot.send_cq,
                CqSide::Recv => slot.recv_cq,
            };
            self.cqs.entry(cq).or_default().push_back(c);
        }
        while let Some(e) = slot.qp.poll_event() {
            self.events.push_back((qpn, e));
        }
        let t = slot.qp.poll_timeout();
        if t != slot.armed {
            slot.armed = t;
            if let Some(t) = t {
                self.timers.push(Reverse((t, qpn)));
            }
        }
        if !slot.queued && slot.qp.has_transmit() {
            slot.queued = true;
            self.active.push_back(qpn);
        }
    }

    // ---------------------------------------------------------- transmit

    /// Sends what is pending, then one batch of new packets; returns how
    /// many packets the QPs produced (0 when there was nothing to do or
    /// the socket buffer is full).
    fn transmit(&mut self, now: Instant) -> usize {
        if self.sent_unchecked >= RX_CHECK_EVERY && self.rx_backlogged() {
            // Receive first. A round sends up to 8 GSO datagrams (128
            // packets) and receives 8 GRO datagrams (up to 128 packets, far
            // fewer when the kernel coalesces less) or 32 packets without
            // GRO: with QPs of this engine
            // talking to each other (server and client on one device) and
            // nothing to bound them (UC, UD), sending on would overflow our
            // own receive buffer, and UC and UD cannot recover the loss.
            self.counters.tx_paused += 1;
            return 0;
        }
        if self.tx_pending() > 0 {
            self.flush();
            if self.tx_pending() > 0 {
                // Socket buffer full: try again next time.
                self.counters.tx_full += 1;
                return 0;
            }
        }
        self.tx.reset_if_done();
        if let Some(v) = &mut self.v6 {
            v.tx.reset_if_done();
        }
        let produced = self.fill(now);
        self.sent_unchecked += produced;
        self.flush();
        if self.tx_pending() > 0 {
            self.counters.tx_full += 1;
        }
        produced
    }

    /// A receive queue holds more than half its buffer.
    fn rx_backlogged(&mut self) -> bool {
        let over = |fd| sys::rx_queue(fd).is_ok_and(|(q, cap)| q > cap / 2);
        let full = over(self.sock.as_raw_fd())
            || self.v6.as_ref().is_some_and(|v| over(v.sock.as_raw_fd()));
        if !full {
            self.sent_unchecked = 0;
        }
        full
    }

    /// Datagrams waiting to be sent, on both sockets.
    fn tx_pending(&self) -> usize {
        self.tx.pending() + self.v6.as_ref().map_or(0, |v| v.tx.pending())
    }

    /// Fills the send batch from the transmit queue; returns the number of
    /// packets the QPs produced.
    fn fill(&mut self, now: Instant) -> usize {
        let mut produced = 0;
        if self.out.delay.due(now) {
            self.push_tx_delayed();
        }
        // Each QP gets a burst of at most the batch; every turn of the outer
        // loop removes a QP from the queue (it returns only by
        // after_activity), so the loop ends.
        let cap = self.tx.capacity();
        for _ in 0..cap + self.qps.len() {
            if self.tx.is_full() {
                break;
            }
            let Some(qpn) = self.active.pop_front() else {
                break;
            };
            let Some(slot) = self.qps.get_mut(&qpn) else {
                continue;
            };
            slot.queued = false;
            let srq = slot
                .srq
                .and_then(|id| self.srqs.get_mut(&id))
                .map(|s| s as &mut dyn RecvSource);
            let mut env = Env {
                mem: &mut self.mem,
                srq,
            };
            for _ in 0..cap {
                let Some(i) = self.tx.free_slot() else {
                    break;
                };
                // Room on the IPv6 side too: the packet's family is known
                // only once the QP made it.
                if self.v6.as_ref().is_some_and(|v| v.tx.is_full()) {
                    break;
                }
                let Some(t) = slot.qp.poll_transmit(now, &mut env, self.tx.slot_mut(i)) else {
                    break;
                };
                produced += 1;
                match &mut self.v6 {
                    Some(v) if t.dst.is_ipv6() => {
                        // Copied to the IPv6 batch (the IPv4 slot stays free).
                        let Some(j) = v.tx.free_slot() else {
                            self.counters.send_errors += 1;
                            continue;
                        };
                        let len = t.len.min(TX_SLOT);
                        v.tx.slot_mut(j)[..len].copy_from_slice(&self.tx.slot_mut(i)[..len]);
                        v.out
                            .finish(&mut v.tx, j, t, slot.src, &mut self.counters, now);
                    }
                    _ => self
                        .out
                        .finish(&mut self.tx, i, t, slot.src, &mut self.counters, now),
                }
            }
            self.after_activity(qpn);
        }
        produced
    }

    /// Puts the held (reordered) packet into the batch, if there is room.
    fn push_tx_delayed(&mut self) {
        self.out.release_delayed(&mut self.tx, &mut self.counters);
    }

    /// Sends the pending part of the batches.
    fn flush(&mut self) {
        flush_bufs(&mut self.tx, self.sock.as_raw_fd(), &mut self.counters);
        if let Some(v) = &mut self.v6 {
            flush_bufs(&mut v.tx, v.sock.as_raw_fd(), &mut self.counters);
        }
    }
}

/// One UDP socket of the engine on `addr`:`port`, set up as the
/// module documentation says.
fn open_socket(
    cfg: &EngineConfig,
    addr: IpAddr,
    port: u16,
) -> Result<(Socket, SocketAddr), EngineError> {
    let v6 = addr.is_ipv6();
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if v6 {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    let fd = sock.as_raw_fd();
    sys::set_pmtudisc_do(fd, v6)?;
    if v6 {
        sys::set_no_check6(fd, true, true)?;
    }
    if addr.is_unspecified() {
        sys::set_recv_pktinfo(fd, v6)?;
    }
    if cfg.recv_tos_ttl {
        sys::set_recv_tos_ttl(fd, v6)?;
    }
    if cfg.socket_buffer > 0 {
        sys::set_buffers(fd, cfg.socket_buffer);
    }
    if let Some(dev) = &cfg.bind_device {
        sock.bind_device(Some(dev.as_bytes()))?;
    }
    sock.bind(&SockAddr::from(SocketAddr::new(addr, port)))?;
    let local = sock
        .local_addr()?
        .as_socket()
        .ok_or(EngineError::Config("socket has no IP address"))?;
    Ok((sock, local))
}

/// Sends the pending part of one batch on `fd`.
fn flush_bufs(tx: &mut sys::SendBufs, fd: RawFd, counters: &mut EngineCounters) {
    // Bounded: every pass sends something, skips a refused datagram, or
    // stops on a full socket buffer.
    for _ in 0..=tx.capacity() {
        if tx.pending() == 0 {
            break;
        }
        let start = tx.sent;
        match tx.send(fd) {
            Ok(0) => break,
            Ok(n) => {
                counters.tx_syscalls += 1;
                // Packets, as the receive side and rxe count: a GSO
                // datagram is `nseg` packets on the wire.
                for it in &tx.items[start..start + n] {
                    counters.sent_pkts += it.nseg as u64;
                    counters.sent_bytes += it.len as u64;
                }
            }
            Err(_) => {
                counters.send_errors += 1;
            }
        }
    }
}
