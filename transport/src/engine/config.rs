//! What the engine's parts share: the configuration of a driver and its
//! loop, the counters, the errors, a QP's creation spec. Data only, below
//! the endpoint, the driver and the fault decorator that use it.

use crate::qp::{QpError, QpType};
use crate::wire::ROCE_V2_PORT;
use std::io;
use std::net::IpAddr;
use std::time::Duration;

/// Configuration of a driver's sockets, the endpoint's first QP number,
/// and the loop that runs them (rounds per turn; the spin and the faults
/// of [`Engine`]).
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
    /// [`Engine`]: longest an idle loop keeps polling before it sleeps
    /// (adaptive within it, see [`spin::Spin`]).
    pub spin: Duration,
    /// Most packets one turn of a loop sends / receives (see
    /// [`EngineConfig::io_rounds`]).
    pub io_budget: usize,
    /// [`Engine`]: faults injected on the send path (after the ICRC is
    /// written), by a [`fault::Faulty`] driver.
    pub fault_tx: Option<FaultConfig>,
    /// [`Engine`]: faults injected on the receive path (before the ICRC
    /// check).
    pub fault_rx: Option<FaultConfig>,
    /// First QP number handed out (QPNs are 24 bit, never 0 or 1).
    pub first_qpn: u32,
    /// SO_BINDTODEVICE: only packets that arrive on this netdev, sent
    /// through it (a wildcard bound to a device then does not conflict
    /// with wildcards bound to other devices).
    pub bind_device: Option<String>,
    /// With `addr` 0.0.0.0: a second socket on `[::]:port` (IPv6 only)
    /// serves the IPv6 addresses; packets to IPv6 destinations go out
    /// through it.
    pub also_v6: bool,
    /// The intra-device shortcut (on by default): a packet to the
    /// driver's own address and port is handed to its own receive path
    /// without a socket, built, sealed and checked as on the wire (see
    /// [`crate::engine::UdpDriver`]). Off: every packet goes through the UDP socket.
    /// A wildcard-bound driver uses it for the addresses it is told it
    /// serves ([`crate::engine::UdpDriver::set_local_addrs`]).
    pub loopback: bool,
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
            loopback: true,
        }
    }

    /// Receive/transmit rounds in one turn of a loop: `io_budget` packets
    /// in batches of `batch`.
    pub fn io_rounds(&self) -> usize {
        self.io_budget.div_ceil(self.batch.max(1)).max(1)
    }
}

/// Per-device counters. The endpoint and the driver each count their own
/// fields in an instance of their own (marked E and D below; both count
/// some drops); a device's figures are their sum
/// ([`EngineCounters::add`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// D: RoCE packets handed to the kernel (a GSO datagram counts its
    /// segments).
    pub sent_pkts: u64,
    pub sent_bytes: u64,
    /// D: RoCE packets taken from the kernel (a GRO datagram counts its
    /// segments).
    pub rcvd_pkts: u64,
    pub rcvd_bytes: u64,
    /// E: dropped, ICRC mismatch.
    pub icrc_errors: u64,
    /// E: accepted IPv4 packets whose ICRC matched only with a non-zero IP ID
    /// (recovered; kernel rxe and hardware peers).
    pub icrc_nonzero_id: u64,
    /// E, D (empty datagrams): dropped, not a valid IB transport packet.
    pub parse_errors: u64,
    /// E: dropped, no QP with the BTH DestQP.
    pub unknown_qp: u64,
    /// D, E (no local address): dropped, larger than any RoCE packet (or
    /// no usable source address).
    pub truncated: u64,
    /// D: packets the QPs produced that could not be sent (address
    /// family, refused by the kernel).
    pub send_errors: u64,
    /// D: recvmmsg / sendmmsg calls that moved something.
    pub rx_syscalls: u64,
    pub tx_syscalls: u64,
    /// D: sendmmsg found the socket buffer full, or the shortcut's queue
    /// was full.
    pub tx_full: u64,
    /// E: QP timers that fired.
    pub timer_fires: u64,
    /// [`Engine`]'s loop: times it went to sleep in ppoll (the daemon
    /// counts its own).
    pub sleeps: u64,
    /// E: dropped, sent to a local address the endpoint was told not to
    /// serve ([`Endpoint::set_local_addrs`]).
    pub not_local: u64,
    /// D: send rounds skipped because the driver's own receive queue was
    /// over half full (see [`UdpDriver::transmit`]).
    pub tx_paused: u64,
    /// D: packets that took the intra-device shortcut (also counted in
    /// `sent_pkts` / `rcvd_pkts`, which count RoCE packets on both paths).
    pub loop_sent_pkts: u64,
    pub loop_rcvd_pkts: u64,
}

impl EngineCounters {
    /// Adds `o` field by field (the endpoint's and the driver's counters
    /// make the device's).
    pub fn add(&mut self, o: &EngineCounters) {
        let EngineCounters {
            sent_pkts,
            sent_bytes,
            rcvd_pkts,
            rcvd_bytes,
            icrc_errors,
            icrc_nonzero_id,
            parse_errors,
            unknown_qp,
            truncated,
            send_errors,
            rx_syscalls,
            tx_syscalls,
            tx_full,
            timer_fires,
            sleeps,
            not_local,
            tx_paused,
            loop_sent_pkts,
            loop_rcvd_pkts,
        } = *o;
        self.sent_pkts += sent_pkts;
        self.sent_bytes += sent_bytes;
        self.rcvd_pkts += rcvd_pkts;
        self.rcvd_bytes += rcvd_bytes;
        self.icrc_errors += icrc_errors;
        self.icrc_nonzero_id += icrc_nonzero_id;
        self.parse_errors += parse_errors;
        self.unknown_qp += unknown_qp;
        self.truncated += truncated;
        self.send_errors += send_errors;
        self.rx_syscalls += rx_syscalls;
        self.tx_syscalls += tx_syscalls;
        self.tx_full += tx_full;
        self.timer_fires += timer_fires;
        self.sleeps += sleeps;
        self.not_local += not_local;
        self.tx_paused += tx_paused;
        self.loop_sent_pkts += loop_sent_pkts;
        self.loop_rcvd_pkts += loop_rcvd_pkts;
    }
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
    /// Multicast: the group is no IPv4 multicast address (RoCEv2 maps
    /// only those to IP groups).
    #[error("{0} is not an IPv4 multicast group")]
    NotMulticast(std::net::IpAddr),
    #[error("QP {0:#x} is not a UD QP")]
    NotUd(u32),
    #[error("QP {0:#x} is not attached to {1}")]
    NotAttached(u32, std::net::IpAddr),
    #[error("{0} groups joined: no room for another")]
    TooManyGroups(usize),
    #[error(transparent)]
    Qp(#[from] QpError),
}

/// What [`Endpoint::create_qp`] needs besides the QP number it assigns.
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

/// Most GRO datagrams per recvmmsg, and most GSO datagrams (of up to 16
/// packets) per sendmmsg: 8 x 64 KiB stay in cache between the copy that
/// fills them and the one that empties them (measured on RC WRITE, 2 cores:
/// 19.3 Gbit/s with 8 GSO datagrams per call against 16.8 with 32, raw UDP
/// 37 with either).
pub const GRO_BATCH: usize = 8;

/// Rates are probabilities per packet in `[0, 1]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    pub seed: u64,
    pub drop: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub corrupt: f64,
}

impl FaultConfig {
    /// No faults, seed 0.
    pub const NONE: FaultConfig = FaultConfig {
        seed: 0,
        drop: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        corrupt: 0.0,
    };

    /// True when no fault can happen.
    pub fn is_none(&self) -> bool {
        self.drop <= 0.0 && self.duplicate <= 0.0 && self.reorder <= 0.0 && self.corrupt <= 0.0
    }
}
