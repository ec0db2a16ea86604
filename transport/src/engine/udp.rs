//! The UDP driver: the sockets and everything that needs a system call.
//! It receives batches (recvmmsg, split into GRO segments), hands each
//! packet to its caller with a [`RecvMeta`], gives the endpoint a send
//! batch to fill ([`TxBatch`]: addresses, IP_PKTINFO source, GSO grouping,
//! ICRC) and sends it (sendmmsg), and sleeps on its sockets.
//!
//! One call each, in the caller's order: [`UdpDriver::recv`] (one
//! recvmmsg per socket; the datagrams stay in the driver's buffers),
//! [`UdpDriver::dispatch`] (each packet of them to a handler, normally
//! [`super::Endpoint::handle_datagram`]), [`UdpDriver::transmit`] (flush,
//! fill, flush), [`UdpDriver::wait`]. Between `recv` and `dispatch` the
//! owner of the receive queues posts what its clients posted so far.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::config::{EngineConfig, EngineCounters, EngineError, GRO_BATCH};
use super::endpoint::{RecvMeta, TransmitSink};
use super::loopback::LoopQueue;
use super::mcast::MAX_GROUPS;
use super::sys::{self, McastIf};
use super::tx::Out;
use crate::qp::Transmit;
use crate::wire::{BTH_LEN, ICRC_LEN, MAX_PACKET};

/// Receive slot size: any RoCE packet plus one byte to see oversize ones.
const RX_SLOT: usize = MAX_PACKET + 64;
pub(crate) const TX_SLOT: usize = MAX_PACKET + 64;
/// Receive slot with UDP GRO: a whole coalesced datagram.
const GRO_SLOT: usize = 65536;
/// Packets sent between two looks at the own receive queue: well below
/// half of any useful buffer (1000 full-sized packets in 8 MiB).
const RX_CHECK_EVERY: usize = 64;
/// Most file descriptors [`UdpDriver::wait`] watches besides its sockets.
pub const MAX_WAIT_EXTRA: usize = 14;
/// Receive batch of a multicast group's socket (groups carry little).
const GROUP_BATCH: usize = 8;
/// TTL of multicast packets: rdma_cm's hop limit for RoCEv2 groups.
const MCAST_TTL: u8 = 64;

/// One socket's receive side: its batch and how much of it waits to be
/// dispatched.
struct Rx {
    bufs: sys::RecvBufs,
    /// Datagrams taken by the last recvmmsg, not yet dispatched.
    pending: usize,
}

/// The IPv6 socket of a driver bound to 0.0.0.0 with `also_v6`, with its
/// own batches (a sendmmsg batch goes to one socket).
struct V6Side {
    sock: Socket,
    out: Out,
    tx: sys::SendBufs,
    rx: Rx,
}

/// A multicast group the driver receives. A socket bound to a unicast
/// address never sees datagrams sent to a group, so each group has its
/// own socket bound to group:port (SO_REUSEADDR: other devices and
/// processes of the host bind it too and each gets a copy), joined on the
/// device's interface. A driver bound to the IPv4 wildcard joins on its
/// own socket instead (it receives the group's datagrams already).
struct Group {
    addr: Ipv4Addr,
    own: Option<(Socket, Rx)>,
}

/// Owns the UDP sockets of one device. See the module documentation.
pub struct UdpDriver {
    sock: Socket,
    local: SocketAddr,
    v6: Option<V6Side>,
    rx: Rx,
    tx: sys::SendBufs,
    out: Out,
    gso: bool,
    gro: bool,
    /// Packets sent since the receive queue was last found below half
    /// full (the check is a system call: not for every small batch).
    sent_unchecked: usize,
    counters: EngineCounters,
    /// Multicast: the interface (None: the driver serves no IPv4), the
    /// groups received, and what a group socket needs of the
    /// configuration.
    mcast_if: Option<McastIf>,
    groups: Vec<Group>,
    group_cfg: EngineConfig,
    /// The intra-device shortcut, when on: packets to the own address
    /// and port, and what their receipt looks like.
    lo: Option<Shortcut>,
}

/// The shortcut's queue, the part of it taken by the last
/// [`UdpDriver::recv`], the addresses that come back to the driver, and
/// what recvmsg would report of a datagram from the socket to itself.
struct Shortcut {
    q: LoopQueue<Hop>,
    pending: usize,
    /// The bound address, or for a wildcard-bound driver the addresses it
    /// was told it serves ([`UdpDriver::set_local_addrs`]; none at first).
    own: Vec<IpAddr>,
    wildcard: bool,
    rep: Report,
}

/// What the sockets would report of a datagram to themselves.
struct Report {
    port: u16,
    /// Report TOS / TTL / flow label, as `recv_tos_ttl` asks.
    tos_ttl: bool,
    /// The sockets' unicast TTL / hop limit: the IPv4 (or only) socket's,
    /// the IPv6 side's.
    ttl: u8,
    ttl6: Option<u8>,
}

/// The addresses a packet on the shortcut went between.
#[derive(Clone, Copy)]
struct Hop {
    src: IpAddr,
    dst: IpAddr,
}

impl Default for Hop {
    fn default() -> Self {
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        Hop { src: any, dst: any }
    }
}

impl Report {
    /// What the socket would have said about a datagram of `hop`: TOS 0,
    /// the socket's own TTL, IPv6 flow label 0 (never set).
    fn meta(&self, hop: Hop) -> RecvMeta {
        let v6 = hop.dst.is_ipv6();
        let ttl = self.ttl6.filter(|_| v6).unwrap_or(self.ttl);
        RecvMeta {
            src: SocketAddr::new(hop.src, self.port),
            dst: Some(hop.dst),
            dst_port: self.port,
            tos: self.tos_ttl.then_some(0),
            ttl: self.tos_ttl.then_some(ttl),
            flow_label: (self.tos_ttl && v6).then_some(0),
            seg: 0,
        }
    }
}

impl UdpDriver {
    /// Binds the socket(s) of `cfg` and sets them up (see the engine
    /// module documentation).
    pub fn new(cfg: &EngineConfig) -> Result<UdpDriver, EngineError> {
        if cfg.batch == 0 || cfg.batch > sys::MAX_BATCH {
            return Err(EngineError::Config("batch must be 1..=64"));
        }
        let v6 = cfg.addr.is_ipv6();
        let wildcard = cfg.addr.is_unspecified();
        if cfg.also_v6 && (v6 || !wildcard) {
            return Err(EngineError::Config("also_v6 needs addr 0.0.0.0"));
        }
        let (sock, local) = open_socket(cfg, cfg.addr, cfg.port)?;
        let fd = sock.as_raw_fd();
        let batch = cfg.batch;
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
        );
        let v6side = if cfg.also_v6 {
            let any6 = IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED);
            // Bound to the same port as the IPv4 socket.
            let (sock, local6) = open_socket(cfg, any6, local.port())?;
            // GSO is never used on IPv6 (zero UDP checksum, see above).
            let out = Out::new(local6, None, cfg.peer_port, false);
            Some(V6Side {
                sock,
                out,
                tx: sys::SendBufs::new(batch, TX_SLOT, batch),
                rx: Rx {
                    bufs: sys::RecvBufs::new(rx_batch, rx_slot),
                    pending: 0,
                },
            })
        } else {
            None
        };
        // Multicast goes out through the device's interface: its address,
        // or for a wildcard bound to a netdev, that netdev.
        let ifindex = cfg.bind_device.as_deref().map_or(0, sys::if_index);
        // An interface that refuses multicast leaves the device without it
        // (joins then fail), not without unicast.
        let mcast_if = match local.ip() {
            IpAddr::V4(a) if !a.is_unspecified() || ifindex != 0 => {
                Some(McastIf { addr: a, ifindex })
            }
            _ => None,
        }
        .filter(|&via| sys::set_multicast_send(fd, via, MCAST_TTL).is_ok());
        let lo = (cfg.loopback && cfg.peer_port == local.port()).then(|| Shortcut {
            q: LoopQueue::new(tx_slots, TX_SLOT),
            pending: 0,
            own: if wildcard {
                Vec::new()
            } else {
                vec![local.ip()]
            },
            wildcard,
            rep: Report {
                port: local.port(),
                tos_ttl: cfg.recv_tos_ttl,
                ttl: sys::unicast_hops(fd, v6).unwrap_or(64),
                ttl6: v6side
                    .as_ref()
                    .map(|s| sys::unicast_hops(s.sock.as_raw_fd(), true).unwrap_or(64)),
            },
        });
        Ok(UdpDriver {
            lo,
            mcast_if,
            groups: Vec::new(),
            group_cfg: cfg.clone(),
            sock,
            local,
            v6: v6side,
            rx: Rx {
                bufs: sys::RecvBufs::new(rx_batch, rx_slot),
                pending: 0,
            },
            tx: sys::SendBufs::new(tx_slots, TX_SLOT, tx_items),
            out,
            gso,
            gro,
            sent_unchecked: 0,
            counters: EngineCounters::default(),
        })
    }

    /// The bound address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether a second socket serves IPv6 (`also_v6`).
    pub fn has_v6_side(&self) -> bool {
        self.v6.is_some()
    }

    /// Whether UDP GSO / GRO are in use (asked for in the configuration and
    /// accepted by the kernel; GSO is never used on IPv6, whose zero UDP
    /// checksum the kernel does not combine with GSO).
    pub fn offloads(&self) -> (bool, bool) {
        (self.gso, self.gro)
    }

    /// Whether the intra-device shortcut is in use (asked for, and the
    /// driver sending to its own port; a wildcard-bound driver uses it for
    /// the addresses of [`UdpDriver::set_local_addrs`]).
    pub fn shortcut(&self) -> bool {
        self.lo.is_some()
    }

    /// A wildcard-bound driver: the local addresses the device serves (as
    /// [`super::Endpoint::set_local_addrs`]), which packets to come back
    /// by the shortcut. A driver bound to one address keeps that one.
    pub fn set_local_addrs(&mut self, addrs: Option<&[IpAddr]>) {
        if let Some(l) = self.lo.as_mut().filter(|l| l.wildcard) {
            l.own.clear();
            l.own.extend_from_slice(addrs.unwrap_or_default());
        }
    }

    /// Packets on the shortcut wait for the next [`UdpDriver::recv`].
    pub fn loopback_waiting(&self) -> bool {
        self.lo.as_ref().is_some_and(|l| !l.q.is_empty())
    }

    /// What the driver counted: packets and bytes in and out, system
    /// calls, and the drops it decides (truncated, empty, unsendable).
    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    // ----------------------------------------------------------- receive

    /// One recvmmsg on each socket whose previous batch was dispatched,
    /// and what the shortcut holds; returns the packets now waiting for
    /// [`UdpDriver::dispatch`].
    pub fn recv(&mut self) -> Result<usize, EngineError> {
        if let Some(l) = &mut self.lo {
            if l.pending == 0 {
                l.pending = l.q.len();
            }
        }
        recv_on(self.sock.as_raw_fd(), &mut self.rx, &mut self.counters)?;
        if let Some(v) = &mut self.v6 {
            recv_on(v.sock.as_raw_fd(), &mut v.rx, &mut self.counters)?;
        }
        for g in &mut self.groups {
            if let Some((s, rx)) = &mut g.own {
                recv_on(s.as_raw_fd(), rx, &mut self.counters)?;
            }
        }
        Ok(self.received())
    }

    /// Datagrams received and not yet dispatched.
    pub fn received(&self) -> usize {
        let groups: usize = self
            .groups
            .iter()
            .filter_map(|g| g.own.as_ref().map(|(_, rx)| rx.pending))
            .sum();
        let lo = self.lo.as_ref().map_or(0, |l| l.pending);
        self.rx.pending + self.v6.as_ref().map_or(0, |v| v.rx.pending) + groups + lo
    }

    /// Hands every packet received by [`UdpDriver::recv`] to `handle`
    /// (GRO datagrams split into their segments); returns how many.
    pub fn dispatch(&mut self, mut handle: impl FnMut(&RecvMeta, &mut [u8])) -> usize {
        let (port, ip) = (self.local.port(), self.out.local_ip);
        let mut n = dispatch_from(&mut self.rx, port, ip, &mut self.counters, &mut handle);
        if let Some(v) = &mut self.v6 {
            n += dispatch_from(&mut v.rx, port, None, &mut self.counters, &mut handle);
        }
        for g in &mut self.groups {
            if let Some((_, rx)) = &mut g.own {
                let ip = Some(IpAddr::V4(g.addr));
                n += dispatch_from(rx, port, ip, &mut self.counters, &mut handle);
            }
        }
        if let Some(l) = &mut self.lo {
            let c = &mut self.counters;
            for _ in 0..std::mem::take(&mut l.pending) {
                let rep = &l.rep;
                l.q.pop_with(|hop, p| {
                    c.rcvd_pkts += 1;
                    c.rcvd_bytes += p.len() as u64;
                    c.loop_rcvd_pkts += 1;
                    handle(&rep.meta(hop), p);
                });
                n += 1;
            }
        }
        n
    }

    // --------------------------------------------------------- multicast

    /// The IPv4 multicast groups received.
    pub fn groups(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.groups.iter().map(|g| g.addr)
    }

    /// Receives exactly the groups of `want` from now on: joins those
    /// not joined yet, leaves the others. On an error the groups joined
    /// so far stay and the error says which failed.
    pub fn sync_groups(&mut self, want: &[Ipv4Addr]) -> Result<(), EngineError> {
        if want.is_empty() && self.groups.is_empty() {
            return Ok(());
        }
        self.groups.retain(|g| {
            let keep = want.contains(&g.addr);
            if !keep && g.own.is_none() {
                if let Some(via) = self.mcast_if {
                    let _ = sys::set_membership(self.sock.as_raw_fd(), g.addr, via, false);
                }
            }
            // A group's own socket leaves the group when it closes.
            keep
        });
        for &g in want {
            if self.groups.iter().any(|x| x.addr == g) {
                continue;
            }
            if self.groups.len() >= MAX_GROUPS {
                return Err(EngineError::TooManyGroups(MAX_GROUPS));
            }
            let group = self.join(g)?;
            self.groups.push(group);
        }
        Ok(())
    }

    fn join(&mut self, g: Ipv4Addr) -> Result<Group, EngineError> {
        if !g.is_multicast() {
            return Err(EngineError::NotMulticast(IpAddr::V4(g)));
        }
        let Some(via) = self.mcast_if else {
            return Err(EngineError::Config("multicast needs an IPv4 device"));
        };
        if via.addr.is_unspecified() {
            sys::set_membership(self.sock.as_raw_fd(), g, via, true)?;
            return Ok(Group { addr: g, own: None });
        }
        let cfg = &self.group_cfg;
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        sock.set_nonblocking(true)?;
        let fd = sock.as_raw_fd();
        sys::set_reuseaddr(fd)?;
        sys::set_multicast_all(fd, false)?;
        if cfg.recv_tos_ttl {
            sys::set_recv_tos_ttl(fd, false)?;
        }
        if cfg.socket_buffer > 0 {
            sys::set_buffers(fd, cfg.socket_buffer);
        }
        if let Some(dev) = &cfg.bind_device {
            sock.bind_device(Some(dev.as_bytes()))?;
        }
        sock.bind(&SockAddr::from(SocketAddr::new(
            IpAddr::V4(g),
            self.local.port(),
        )))?;
        sys::set_membership(fd, g, via, true)?;
        let rx = Rx {
            bufs: sys::RecvBufs::new(GROUP_BATCH, RX_SLOT),
            pending: 0,
        };
        Ok(Group {
            addr: g,
            own: Some((sock, rx)),
        })
    }

    // ---------------------------------------------------------- transmit

    /// Sends what is pending, lets `fill` put one batch of new packets
    /// into a [`TxBatch`] (it returns how many it produced), and sends
    /// them; returns that number (0 when the socket buffer is full or
    /// the driver must receive first).
    pub fn transmit(&mut self, fill: impl FnOnce(&mut TxBatch<'_>) -> usize) -> usize {
        if self.sent_unchecked >= RX_CHECK_EVERY && self.rx_backlogged() {
            // Receive first. A round sends up to 8 GSO datagrams (128
            // packets) and receives 8 GRO datagrams (up to 128 packets, far
            // fewer when the kernel coalesces less) or 32 packets without
            // GRO: with QPs of this device talking to each other (server
            // and client on one device) and nothing to bound them (UC, UD),
            // sending on would overflow our own receive buffer, and UC and
            // UD cannot recover the loss.
            self.counters.tx_paused += 1;
            return 0;
        }
        if self.has_pending() {
            self.flush();
            if self.has_pending() {
                // Socket buffer full: try again next time.
                self.counters.tx_full += 1;
                return 0;
            }
        }
        if self.lo.as_ref().is_some_and(|l| l.q.is_full()) {
            // The shortcut's queue is full: as a full socket buffer, the
            // QPs keep their packets until the next receive empties it.
            self.counters.tx_full += 1;
            return 0;
        }
        self.tx.reset_if_done();
        if let Some(v) = &mut self.v6 {
            v.tx.reset_if_done();
        }
        let looped = self.counters.loop_sent_pkts;
        let produced = fill(&mut TxBatch {
            tx: &mut self.tx,
            out: &mut self.out,
            v6: self.v6.as_mut(),
            lo: self.lo.as_mut(),
            counters: &mut self.counters,
            last: None,
        });
        // Only what went to the socket can fill the receive queue.
        let looped = (self.counters.loop_sent_pkts - looped) as usize;
        self.sent_unchecked += produced.saturating_sub(looped);
        self.flush();
        if self.has_pending() {
            self.counters.tx_full += 1;
        }
        produced
    }

    /// Datagrams are waiting to be sent (the socket buffer was full).
    pub fn has_pending(&self) -> bool {
        self.tx.pending() > 0 || self.v6.as_ref().is_some_and(|v| v.tx.pending() > 0)
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

    /// Sends the pending part of the batches.
    fn flush(&mut self) {
        flush_bufs(&mut self.tx, self.sock.as_raw_fd(), &mut self.counters);
        if let Some(v) = &mut self.v6 {
            flush_bufs(&mut v.tx, v.sock.as_raw_fd(), &mut self.counters);
        }
    }

    // -------------------------------------------------------------- wait

    /// Sleeps until a socket is readable (or writable, with `writable` or
    /// while datagrams wait to be sent), one of `extra` is readable, or
    /// `timeout` passes (`None`: no limit). Returns whether anything is
    /// ready. At most [`MAX_WAIT_EXTRA`] extra descriptors are watched.
    /// Never sleeps while packets wait on the shortcut.
    pub fn wait(
        &self,
        extra: &[RawFd],
        writable: bool,
        timeout: Option<Duration>,
    ) -> io::Result<bool> {
        if self.loopback_waiting() {
            return Ok(true);
        }
        let mut fds = [(-1, false); 2 + MAX_GROUPS + MAX_WAIT_EXTRA];
        fds[0] = (self.sock.as_raw_fd(), writable || self.tx.pending() > 0);
        let mut n = 1;
        if let Some(v) = &self.v6 {
            fds[1] = (v.sock.as_raw_fd(), writable || v.tx.pending() > 0);
            n = 2;
        }
        for g in &self.groups {
            if let Some((s, _)) = &g.own {
                fds[n] = (s.as_raw_fd(), false);
                n += 1;
            }
        }
        for (slot, &fd) in fds[n..].iter_mut().zip(extra) {
            *slot = (fd, false);
        }
        let n = n + extra.len().min(MAX_WAIT_EXTRA);
        sys::wait(&fds[..n], timeout)
    }
}

/// One recvmmsg into `rx` unless its last batch still waits.
fn recv_on(fd: RawFd, rx: &mut Rx, counters: &mut EngineCounters) -> Result<(), EngineError> {
    if rx.pending > 0 {
        return Ok(());
    }
    // A reported ICMP error is not fatal; try once more.
    for _ in 0..2 {
        match rx.bufs.recv(fd) {
            Ok(n) => {
                if n > 0 {
                    counters.rx_syscalls += 1;
                }
                rx.pending = n;
                return Ok(());
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH)
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The packets of one socket's batch to `handle`.
fn dispatch_from(
    rx: &mut Rx,
    port: u16,
    bound_ip: Option<IpAddr>,
    counters: &mut EngineCounters,
    handle: &mut impl FnMut(&RecvMeta, &mut [u8]),
) -> usize {
    let mut total = 0;
    let slot = rx.bufs.slot;
    for i in 0..std::mem::take(&mut rx.pending) {
        let info = rx.bufs.info[i];
        counters.rcvd_bytes += info.len as u64;
        if info.len == 0 {
            // An empty datagram: not even a BTH.
            counters.rcvd_pkts += 1;
            counters.parse_errors += 1;
            continue;
        }
        if info.truncated || info.len > slot {
            counters.rcvd_pkts += 1;
            counters.truncated += 1;
            continue;
        }
        let at = i * slot;
        let dgram = &mut rx.bufs.data[at..at + info.len];
        let seg = info.gro_size.map_or(info.len, usize::from).max(1);
        for (k, p) in dgram.chunks_mut(seg).enumerate() {
            counters.rcvd_pkts += 1;
            total += 1;
            if p.len() > MAX_PACKET {
                counters.truncated += 1;
                continue;
            }
            let meta = RecvMeta {
                src: info.src,
                dst: info.dst.or(bound_ip),
                dst_port: port,
                tos: info.tos,
                ttl: info.ttl,
                flow_label: info.flow_label,
                seg: k as u16,
            };
            handle(&meta, p);
        }
    }
    total
}

/// The send batch [`UdpDriver::transmit`] lends to the endpoint: packet
/// slots on the IPv4 (or only) socket, the IPv6 side's, which a packet
/// for an IPv6 destination is copied to, and the shortcut's queue, which
/// a packet to the own address and port is copied to.
pub struct TxBatch<'a> {
    tx: &'a mut sys::SendBufs,
    out: &'a mut Out,
    v6: Option<&'a mut V6Side>,
    lo: Option<&'a mut Shortcut>,
    counters: &'a mut EngineCounters,
    /// Where the last committed packet went.
    last: Option<Last>,
}

/// Where a committed packet is.
#[derive(Clone, Copy)]
enum Last {
    /// Slot of the IPv4 (or only) socket's batch or the IPv6 side's, and
    /// its length.
    Udp { v6: bool, slot: usize, len: usize },
    /// Slot of the shortcut's queue.
    Loop(usize),
}

impl TxBatch<'_> {
    /// The last committed packet as it goes on the wire (its ICRC
    /// filled), for a fault injector that corrupts it.
    pub fn last_mut(&mut self) -> Option<&mut [u8]> {
        match self.last? {
            Last::Udp { v6, slot, len } => {
                let tx = if v6 {
                    &mut self.v6.as_mut()?.tx
                } else {
                    &mut *self.tx
                };
                Some(&mut tx.slot_mut(slot)[..len])
            }
            Last::Loop(i) => self.lo.as_mut()?.q.get_mut(i),
        }
    }

    /// Hands the packet in send slot `i` to the shortcut if it comes back
    /// to this driver (its own port, an address it serves); returns
    /// whether it did (counted as sent or as a send error).
    fn shortcut(&mut self, i: usize, t: Transmit, src: Option<IpAddr>) -> bool {
        let Some(l) = self.lo.as_deref_mut() else {
            return false;
        };
        // The socket the UDP path would take.
        let out = match &mut self.v6 {
            Some(v) if t.dst.is_ipv6() => &mut v.out,
            _ => &mut *self.out,
        };
        let Some((s, d)) = out.own_dst(t.dst, src, &l.own) else {
            return false;
        };
        let c = &mut *self.counters;
        if !(BTH_LEN + ICRC_LEN..=TX_SLOT).contains(&t.len) {
            c.send_errors += 1;
            return true;
        }
        let pkt = &mut self.tx.slot_mut(i)[..t.len];
        if !out.seal_own(pkt, s, d) {
            c.send_errors += 1;
        }
        // Room was checked by has_room before the QP built the packet.
        match l.q.push(pkt, Hop { src: s, dst: d }) {
            Some(j) => {
                c.sent_pkts += 1;
                c.sent_bytes += t.len as u64;
                c.loop_sent_pkts += 1;
                self.last = Some(Last::Loop(j));
            }
            None => c.send_errors += 1,
        }
        true
    }
}

impl TransmitSink for TxBatch<'_> {
    fn capacity(&self) -> usize {
        self.tx.capacity()
    }

    fn has_room(&self) -> bool {
        // Room on the IPv6 side and the shortcut too: the packet's
        // destination is known only once the QP made it.
        !self.tx.is_full()
            && !self.v6.as_ref().is_some_and(|v| v.tx.is_full())
            && !self.lo.as_ref().is_some_and(|l| l.q.is_full())
    }

    fn buffer(&mut self) -> Option<&mut [u8]> {
        if !self.has_room() {
            return None;
        }
        let i = self.tx.free_slot()?;
        Some(self.tx.slot_mut(i))
    }

    fn commit(&mut self, t: Transmit, src: Option<IpAddr>) {
        self.last = None;
        let Some(i) = self.tx.free_slot() else {
            self.counters.send_errors += 1;
            return;
        };
        if self.shortcut(i, t, src) {
            return;
        }
        match &mut self.v6 {
            Some(v) if t.dst.is_ipv6() => {
                // Copied to the IPv6 batch (the IPv4 slot stays free).
                let Some(j) = v.tx.free_slot() else {
                    self.counters.send_errors += 1;
                    return;
                };
                let len = t.len.min(TX_SLOT);
                v.tx.slot_mut(j)[..len].copy_from_slice(&self.tx.slot_mut(i)[..len]);
                if v.out.finish(&mut v.tx, j, t, src, self.counters) {
                    self.last = Some(Last::Udp {
                        v6: true,
                        slot: j,
                        len: t.len,
                    });
                }
            }
            _ => {
                if self.out.finish(self.tx, i, t, src, self.counters) {
                    self.last = Some(Last::Udp {
                        v6: false,
                        slot: i,
                        len: t.len,
                    });
                }
            }
        }
    }
}

/// One UDP socket on `addr`:`port`, set up as the engine module
/// documentation says.
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
        // Best effort: a kernel without the option (before 4.5) sends its
        // own flow labels, which no RoCE receiver checks.
        let _ = sys::set_no_auto_flowlabel(fd);
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
