//! The UDP engine, split as quinn splits its endpoint from its socket
//! driver:
//!
//! - [`Endpoint`] (sans-IO, no `unsafe`): owns the QP table, SRQs, QP
//!   timers, the demultiplexing of packets by BTH DestQP and the receive
//!   ICRC policy ([`crate::wire::icrc::verify_received`]). Packets in:
//!   [`Endpoint::handle_datagram`]; packets out:
//!   [`Endpoint::poll_transmit`] into a [`TransmitSink`]; time:
//!   [`Endpoint::poll_timeout`] / [`Endpoint::handle_timeout`];
//!   completions go to the caller's [`CqSink`] in the call that made them.
//! - [`UdpDriver`]: owns the socket(s), recvmmsg/sendmmsg, UDP GSO/GRO,
//!   the IP_PKTINFO source address and route cache, the ICRC over the IP
//!   facts it chose, the receive-pressure check, and the sleep on its
//!   sockets ([`UdpDriver::wait`]). Its system calls are in [`sys`].
//! - [`fault::Faulty`]: a driver decorator injecting drops, duplicates,
//!   reordering and corruption (tests and the benchmark only).
//! - [`Engine`]: endpoint + driver + a small loop, for tests and the
//!   benchmark. The daemon drives the endpoint and the driver itself.
//!
//! # The poll order
//!
//! One turn of a loop: `handle_timeout`; then, up to
//! [`EngineConfig::io_rounds`] times: [`UdpDriver::recv`] -> (the daemon
//! posts the receives its clients have posted so far) ->
//! [`UdpDriver::dispatch`] into `handle_datagram` -> (the daemon takes new
//! work from its send rings) -> [`UdpDriver::transmit`] filled by
//! `poll_transmit`, until both directions are quiet (what one side
//! produces goes out while the peer still works on the previous batch).
//! When nothing happened: spin ([`spin::Spin`]), then sleep in
//! [`UdpDriver::wait`] until a socket is readable or the next
//! `poll_timeout`.
//!
//! # Sockets
//!
//! One driver serves one local address (IPv4 or IPv6, or a wildcard, then
//! the local address of each datagram comes from IP_PKTINFO and each QP
//! sends from the address its peer reached it at, or one pinned with
//! [`Endpoint::set_qp_source`]). Bound to 0.0.0.0 with `also_v6`, a second
//! socket on `[::]` serves IPv6 (packets to IPv6 destinations leave through
//! it); `bind_device` ties both to one netdev, and
//! [`Endpoint::set_local_addrs`] limits the local addresses accepted (a
//! device serving its netdev's current addresses). The socket is
//! unconnected with DF set (IP_PMTUDISC_DO): Linux then sends IPv4 ID 0,
//! and the ICRC is computed with ID 0. It sends from its own bound port
//! (4791), not from the per-QP source port a [`Transmit`] names: an
//! ordinary UDP socket has one source port, and RoCEv2 receivers only
//! look at the destination port. IPv6 sends and accepts a zero UDP
//! checksum, as rxe does.
//!
//! # The intra-device shortcut
//!
//! A packet to the driver's own address and port (QPs of one device
//! talking to each other) does not go through the socket: as the kernel
//! rxe's `rxe_loopback`, the driver seals it (ICRC with IPv4 ID 0, as a
//! lone datagram) into a bounded queue ([`EngineConfig::loopback`], on by
//! default), and its next [`UdpDriver::recv`] hands it to the endpoint
//! with the metadata the socket would have reported, where it is parsed
//! and its ICRC checked as any other. A full queue leaves the send batch
//! without room (back-pressure, counted in `tx_full`); multicast and
//! other addresses go by UDP; a wildcard-bound driver takes it for the
//! addresses of [`UdpDriver::set_local_addrs`]. [`fault::Faulty`] wraps
//! the driver, so injected faults apply on both paths.
//!
//! # UDP GSO and GRO
//!
//! On by default (measured: RC WRITE goodput on loopback 13 -> 28 Gbit/s).
//! A run of equal-sized packets to one destination goes as one GSO send
//! (up to 15 packets of 4 KiB); the kernel gives segment `i` the IPv4 ID
//! `i` (base 0 for an unconnected DF socket), so the ICRC of segment `i`
//! is computed with ID `i`: that is why the driver, which groups the
//! segments, fills the ICRC. A GRO datagram is split by its segment size,
//! and segment `k` is first checked with ID `k` exactly. Any other packet
//! is checked with ID 0 and, failing that, with the ID recovered from the
//! ICRC ([`icrc::verify_v4_unknown_id`]; kernel rxe and hardware use IDs of
//! their own); those are counted in `icrc_nonzero_id`. IPv6 never uses GSO
//! (the kernel refuses GSO with a zero UDP checksum). Captures on `lo` show
//! GSO sends unsplit; turn `gso` off to capture packet by packet.

mod config;
pub mod endpoint;
pub mod fault;
pub mod gsi;
mod loopback;
pub mod mcast;
mod run;
pub mod spin;
pub mod sys;
mod tx;
pub mod udp;

#[cfg(doc)]
use crate::wire::icrc;

pub use crate::qp::Transmit;
pub use config::{EngineConfig, EngineCounters, EngineError, QpSpec, GRO_BATCH};
pub use endpoint::{CqSink, Endpoint, RecvMeta, TransmitSink};
pub use fault::FaultConfig;
pub use gsi::{GsiDatagram, GsiSend, GSI_QKEY, GSI_QPN};
pub use mcast::MCAST_QPN;
pub use run::{Engine, RunReport, MAX_WAKE_FDS};
pub use udp::{TxBatch, UdpDriver};
