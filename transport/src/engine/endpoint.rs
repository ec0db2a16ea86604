//! The sans-IO endpoint: every QP of a device, their SRQs and timers, the
//! demultiplexing of packets to QPs and the receive-side ICRC policy. No
//! sockets, no system calls: datagrams come in as bytes with a
//! [`RecvMeta`], packets go out into a [`TransmitSink`], completions go
//! to a [`CqSink`] the moment a QP produces them.
//!
//! Families (as quinn-proto's `Endpoint`/`Connection`):
//! - `handle_*`: [`Endpoint::handle_datagram`], [`Endpoint::handle_timeout`];
//! - verbs: create / modify / destroy QPs and SRQs, post WQEs;
//! - `poll_*`: [`Endpoint::poll_transmit`], [`Endpoint::poll_timeout`],
//!   [`Endpoint::poll_event`].
//!
//! Every call that can run a QP takes the [`CqSink`], so a completion
//! leaves the endpoint in the call that made it (as rxe's completer and
//! responder call `rxe_cq_post()`): the owner of the CQ keeps the only
//! queue, and anything it queues itself lands in order by construction.

#![forbid(unsafe_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use super::config::{EngineCounters, EngineError, QpSpec};
use super::gsi::{Gsi, GsiDatagram, GsiSend, GSI_QPN};
use super::mcast::{self, Groups, MCAST_QPN};
use crate::qp::{
    Completion, CqSide, Env, Memory, Qp, QpAttr, QpConfig, QpEvent, QpTuning, QpType, RecvSource,
    RecvWqe, RxMeta, SendWqe, Transmit, XrcTarget,
};
use crate::wire::icrc::{self, ReceivedIcrc};
use crate::wire::Packet;

/// What the driver knows about one received packet (the UDP payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvMeta {
    /// The sender's address and port.
    pub src: SocketAddr,
    /// The local address it was sent to (IP_PKTINFO, or the bound
    /// address); None if the socket did not say.
    pub dst: Option<IpAddr>,
    /// The local UDP port it was sent to.
    pub dst_port: u16,
    /// IPv4 TOS / IPv6 traffic class, TTL / hop limit, when reported.
    pub tos: Option<u8>,
    pub ttl: Option<u8>,
    /// IPv6 flow label (IPV6_FLOWINFO), when reported.
    pub flow_label: Option<u32>,
    /// Segment index within a GRO datagram (0 otherwise): an rxu GSO
    /// sender gave segment `k` the IPv4 ID `k`.
    pub seg: u16,
}

/// The owner of the completion queues: takes each completion, tagged
/// with the CQ its QP names for that side, as the QP produces it.
pub trait CqSink {
    fn post(&mut self, cq: u32, c: Completion);
    /// Called just before the [`CqSink::post`] of a receive completion
    /// whose WQE came from SRQ `srq`: the receive is used up, so a driver
    /// that keeps its slot in a ring until then gives it back before the
    /// completion can be seen.
    fn srq_receive_used(&mut self, _cq: u32, _srq: u32) {}
}

/// One FIFO of tagged completions (the convenience loop and tests).
impl CqSink for VecDeque<(u32, Completion)> {
    fn post(&mut self, cq: u32, c: Completion) {
        self.push_back((cq, c));
    }
}

/// Where [`Endpoint::poll_transmit`] writes packets: the driver's send
/// batch. The endpoint asks for a buffer, lets a QP write one packet into
/// it (BTH .. pad, room for the ICRC) and commits it; the sink adds the
/// IP-level facts (addresses, GSO grouping, the ICRC over them).
pub trait TransmitSink {
    /// Packets one batch holds (bounds each QP's burst).
    fn capacity(&self) -> usize;
    /// Whether [`TransmitSink::buffer`] would give a buffer.
    fn has_room(&self) -> bool;
    /// The buffer for the next packet, None when the batch is full.
    fn buffer(&mut self) -> Option<&mut [u8]>;
    /// The packet just written into the last [`TransmitSink::buffer`];
    /// `src`: the QP's source address, if it has one (see
    /// [`Endpoint::set_qp_source`]).
    fn commit(&mut self, t: Transmit, src: Option<IpAddr>);
}

/// A shared receive queue: receive WQEs any of its QPs may take.
#[derive(Debug)]
struct Srq {
    q: VecDeque<RecvWqe>,
    max: usize,
    /// WQEs its QPs have taken, ever (the SRQ limit event watches it).
    taken: u64,
    /// A WQE was taken since it was last reported
    /// ([`Endpoint::take_touched_srqs`]).
    touched: bool,
    /// An XRC SRQ: XRC target QPs of its domain deliver into it.
    xrc: Option<XrcSrq>,
}

/// What makes an SRQ an XRC SRQ (`ibv_create_srq_ex` with IBV_SRQT_XRC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XrcSrq {
    /// The XRC domain: only target QPs of the same one reach it.
    pub xrcd: u32,
    /// Its completion queue (the target QPs have none).
    pub cq: u32,
    /// Its PD: receive buffers and the rkeys of RDMA/atomics through it.
    pub pd: u32,
}

impl RecvSource for Srq {
    fn pop(&mut self) -> Option<RecvWqe> {
        let w = self.q.pop_front();
        self.taken += u64::from(w.is_some());
        self.touched |= w.is_some();
        w
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
    /// Source address of its packets when the driver is bound to a
    /// wildcard: set by [`Endpoint::set_qp_source`], else learnt from the
    /// destination of the packets it receives.
    src: Option<IpAddr>,
    src_pinned: bool,
}

/// What a QP may touch while it runs: the memory, and its SRQ if it has
/// one (a free function, so the caller keeps its borrow of the QP slot).
fn qp_env<'a, M: Memory>(
    mem: &'a mut M,
    srqs: &'a mut HashMap<u32, Srq>,
    srq: Option<u32>,
) -> Env<'a> {
    let srq = srq
        .and_then(|id| srqs.get_mut(&id))
        .map(|s| s as &mut dyn RecvSource);
    Env {
        mem,
        srq,
        xrc: None,
    }
}

/// The environment of an XRC target QP of domain `xrcd` for a request
/// naming XRC SRQ `srqn`: that SRQ if it is an XRC SRQ of the domain,
/// else none (the responder answers "invalid request").
fn xrc_env<'a, M: Memory>(
    mem: &'a mut M,
    srqs: &'a mut HashMap<u32, Srq>,
    xrcd: Option<u32>,
    srqn: Option<u32>,
) -> Env<'a> {
    let hit = srqn.zip(xrcd).and_then(|(n, d)| {
        let s = srqs.get_mut(&n)?;
        let x = s.xrc.filter(|x| x.xrcd == d)?;
        Some((s, XrcTarget { srqn: n, pd: x.pd }))
    });
    match hit {
        Some((s, t)) => Env {
            mem,
            srq: Some(s as &mut dyn RecvSource),
            xrc: Some(t),
        },
        None => Env {
            mem,
            srq: None,
            xrc: None,
        },
    }
}

/// Receive WQEs a QP can take now: its own RQ's or its SRQ's.
fn recv_level(qp: &Qp, srqs: &HashMap<u32, Srq>, srq: Option<u32>) -> usize {
    match srq {
        Some(id) => srqs.get(&id).map_or(0, |s| s.q.len()),
        None => qp.recv_queue_len(),
    }
}

/// Largest QPN + 1.
const QPN_SPACE: u32 = 1 << 24;

/// The QPs of one device and everything between them and the wire bytes.
/// See the module documentation.
pub struct Endpoint<M: Memory> {
    mem: M,
    qps: HashMap<u32, QpSlot>,
    srqs: HashMap<u32, Srq>,
    events: VecDeque<(u32, QpEvent)>,
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
    /// QPs with packets to send, in turn.
    active: VecDeque<u32>,
    /// Scratch for the QPs whose timers fire.
    due: Vec<u32>,
    next_qpn: u32,
    next_srq: u32,
    /// Local addresses packets are accepted for (None: any).
    accept: Option<Vec<IpAddr>>,
    /// QP 1: connection-manager MADs in and out.
    gsi: Gsi,
    /// Multicast groups and the UD QPs attached to each.
    groups: Groups,
    counters: EngineCounters,
    /// A packet took the last receive WQE of a QP's RQ or of an SRQ
    /// (see [`Endpoint::take_recv_starved`]).
    recv_starved: bool,
    /// SRQs whose QPs took WQEs since [`Endpoint::take_touched_srqs`].
    touched_srqs: Vec<u32>,
}

impl<M: Memory> Endpoint<M> {
    /// Gives back the room the tables grew for QPs and SRQs now gone (a
    /// client with thousands of them went away).
    pub fn shrink(&mut self) {
        self.qps.shrink_to_fit();
        self.srqs.shrink_to_fit();
        self.timers.shrink_to_fit();
        self.active.shrink_to_fit();
        self.due.shrink_to_fit();
        self.touched_srqs.shrink_to_fit();
    }

    /// An endpoint whose QPs reach `mem`; QP numbers start at `first_qpn`.
    pub fn new(first_qpn: u32, mem: M) -> Result<Endpoint<M>, EngineError> {
        if first_qpn >= QPN_SPACE {
            return Err(EngineError::Config("first_qpn must be below 2^24"));
        }
        Ok(Endpoint {
            mem,
            qps: HashMap::new(),
            srqs: HashMap::new(),
            events: VecDeque::new(),
            timers: BinaryHeap::new(),
            active: VecDeque::new(),
            due: Vec::new(),
            next_qpn: first_qpn.max(2),
            next_srq: 1,
            accept: None,
            gsi: Gsi::default(),
            groups: Groups::default(),
            counters: EngineCounters::default(),
            recv_starved: false,
            touched_srqs: Vec::new(),
        })
    }

    // ------------------------------------------------------------ getters

    pub fn memory(&self) -> &M {
        &self.mem
    }

    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }

    pub fn into_memory(self) -> M {
        self.mem
    }

    /// What the endpoint counted: parse, ICRC, demux and timer counters
    /// (the driver counts the I/O ones).
    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    /// The QP (for its state and counters).
    /// How many QPs and SRQs the endpoint holds (table audits).
    pub fn object_counts(&self) -> (usize, usize) {
        (self.qps.len(), self.srqs.len())
    }

    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(&qpn).map(|s| &s.qp)
    }

    /// QP numbers in use.
    pub fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        self.qps.keys().copied()
    }

    /// Receive WQEs waiting in an SRQ.
    pub fn srq_len(&self, srq: u32) -> Option<usize> {
        self.srqs.get(&srq).map(|s| s.q.len())
    }

    /// Receive WQEs an SRQ's QPs have taken since it was created.
    pub fn srq_taken(&self, srq: u32) -> Option<u64> {
        self.srqs.get(&srq).map(|s| s.taken)
    }

    /// Moves into `out` the SRQs whose QPs took receive WQEs since the
    /// last call (each once), so a driver looks at those only.
    pub fn take_touched_srqs(&mut self, out: &mut Vec<u32>) {
        out.append(&mut self.touched_srqs);
    }

    /// Records SRQ `srq` as touched if a WQE was taken from it.
    fn note_srq(&mut self, srq: Option<u32>) {
        if let Some(s) = srq.and_then(|id| self.srqs.get_mut(&id).map(|s| (id, s))) {
            if std::mem::take(&mut s.1.touched) {
                self.touched_srqs.push(s.0);
            }
        }
    }

    /// Some QP has packets to send.
    pub fn has_transmit(&self) -> bool {
        !self.active.is_empty() || self.gsi.has_transmit()
    }

    // ---------------------------------------------------------------- QP 1

    /// The next datagram that reached QP 1 (a CM MAD for the daemon's CM).
    pub fn poll_gsi(&mut self) -> Option<GsiDatagram> {
        self.gsi.poll_received()
    }

    /// Queues a MAD to send from QP 1; false when the queue is full (the
    /// MAD is dropped and counted, as a lost packet would be).
    pub fn send_gsi(&mut self, s: GsiSend) -> bool {
        self.gsi.send(s)
    }

    /// Datagrams to QP 1 dropped (not UD SEND, wrong Q_Key, queue full).
    pub fn gsi_dropped(&self) -> u64 {
        self.gsi.dropped
    }

    // ---------------------------------------------------------- multicast

    /// `ibv_attach_mcast`: UD QP `qpn` receives the packets sent to
    /// `group` (an IPv4 multicast address, or its IPv4-mapped GID) with
    /// DestQP 0xFFFFFF. Attaching twice is not an error (as rxe).
    pub fn attach_mcast(&mut self, qpn: u32, group: IpAddr) -> Result<(), EngineError> {
        let slot = self.qps.get(&qpn).ok_or(EngineError::NoQp(qpn))?;
        if slot.qp.config().qp_type != crate::qp::QpType::Ud {
            return Err(EngineError::NotUd(qpn));
        }
        self.groups.attach(qpn, group)
    }

    /// `ibv_detach_mcast`; EngineError::NotAttached if it was not.
    pub fn detach_mcast(&mut self, qpn: u32, group: IpAddr) -> Result<(), EngineError> {
        self.groups.detach(qpn, group)
    }

    /// The groups some QP is attached to (the driver must receive them).
    pub fn mcast_groups(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.groups.addrs()
    }

    /// The QPs attached to `group`.
    pub fn mcast_members(&self, group: IpAddr) -> &[u32] {
        self.groups.members(mcast::group_key(group))
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
            xrcd: spec.xrcd,
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

    /// Replaces a QP's transport tuning (window, ACK interval, ...).
    pub fn set_qp_tuning(
        &mut self,
        qpn: u32,
        t: QpTuning,
        cqs: &mut impl CqSink,
    ) -> Result<(), EngineError> {
        let slot = self.qps.get_mut(&qpn).ok_or(EngineError::NoQp(qpn))?;
        slot.qp.set_tuning(t);
        self.after_activity(qpn, cqs);
        Ok(())
    }

    /// The source address of a QP's packets (its GID's address) when the
    /// driver is bound to a wildcard address; without it the driver uses
    /// the address the QP's peer last sent to, or the route's source.
    pub fn set_qp_source(&mut self, qpn: u32, addr: IpAddr) -> Result<(), EngineError> {
        let slot = self.qps.get_mut(&qpn).ok_or(EngineError::NoQp(qpn))?;
        slot.src = Some(addr);
        slot.src_pinned = true;
        Ok(())
    }

    /// Accept packets only when sent to one of `addrs` (the device's GIDs
    /// on a wildcard-bound driver); `None` accepts any local address.
    pub fn set_local_addrs(&mut self, addrs: Option<&[IpAddr]>) {
        self.accept = addrs.map(<[IpAddr]>::to_vec);
    }

    pub fn modify_qp(
        &mut self,
        qpn: u32,
        attr: &QpAttr,
        cqs: &mut impl CqSink,
    ) -> Result<(), EngineError> {
        let slot = self.qps.get_mut(&qpn).ok_or(EngineError::NoQp(qpn))?;
        let r = slot.qp.modify(attr);
        self.after_activity(qpn, cqs);
        r.map_err(EngineError::from)
    }

    /// Destroys a QP. Completions it already produced go to `cqs` first.
    pub fn destroy_qp(&mut self, qpn: u32, cqs: &mut impl CqSink) -> Result<(), EngineError> {
        if !self.qps.contains_key(&qpn) {
            return Err(EngineError::NoQp(qpn));
        }
        self.after_activity(qpn, cqs);
        self.qps.remove(&qpn);
        self.active.retain(|&q| q != qpn);
        self.groups.forget_qp(qpn);
        Ok(())
    }

    pub fn post_send(
        &mut self,
        qpn: u32,
        wqe: SendWqe,
        cqs: &mut impl CqSink,
    ) -> Result<(), EngineError> {
        let slot = self.qps.get_mut(&qpn).ok_or(EngineError::NoQp(qpn))?;
        let r = slot.qp.post_send(wqe);
        self.after_activity(qpn, cqs);
        r.map_err(EngineError::from)
    }

    pub fn post_recv(
        &mut self,
        qpn: u32,
        wqe: RecvWqe,
        cqs: &mut impl CqSink,
    ) -> Result<(), EngineError> {
        let slot = self.qps.get_mut(&qpn).ok_or(EngineError::NoQp(qpn))?;
        let r = slot.qp.post_recv(wqe);
        self.after_activity(qpn, cqs);
        r.map_err(EngineError::from)
    }

    // --------------------------------------------------------------- SRQs

    /// Creates an SRQ holding at most `max_wr` receive WQEs.
    pub fn create_srq(&mut self, max_wr: u32) -> u32 {
        self.new_srq(max_wr, None)
    }

    /// Creates an XRC SRQ; its number is what XRC initiators put in
    /// their XRCETH (`ibv_get_srq_num`), unique in the device and below
    /// 2^24.
    pub fn create_xrc_srq(&mut self, max_wr: u32, xrc: XrcSrq) -> u32 {
        self.new_srq(max_wr, Some(xrc))
    }

    fn new_srq(&mut self, max_wr: u32, xrc: Option<XrcSrq>) -> u32 {
        let mut id = self.next_srq;
        // Bounded: fewer SRQs exist than u32 values.
        for _ in 0..=self.srqs.len() {
            if !self.srqs.contains_key(&id) && id != 0 {
                break;
            }
            id = id.wrapping_add(1) & 0xFF_FFFF;
        }
        self.next_srq = id.wrapping_add(1) & 0xFF_FFFF;
        self.srqs.insert(
            id,
            Srq {
                q: VecDeque::new(),
                max: max_wr as usize,
                taken: 0,
                touched: false,
                xrc,
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

    /// Changes how many receive WQEs the SRQ holds at most. The WQEs it
    /// holds stay, in order; fewer room than that is refused with
    /// [`EngineError::SrqFull`] and changes nothing.
    pub fn resize_srq(&mut self, srq: u32, max_wr: u32) -> Result<(), EngineError> {
        let s = self.srqs.get_mut(&srq).ok_or(EngineError::NoSrq(srq))?;
        if s.q.len() > max_wr as usize {
            return Err(EngineError::SrqFull(srq));
        }
        s.max = max_wr as usize;
        Ok(())
    }

    /// Destroys an SRQ; its QPs find no receive WQEs from then on.
    pub fn destroy_srq(&mut self, srq: u32) -> Result<(), EngineError> {
        self.srqs
            .remove(&srq)
            .map(|_| ())
            .ok_or(EngineError::NoSrq(srq))
    }

    // ------------------------------------------------------------- events

    /// The next asynchronous QP event.
    pub fn poll_event(&mut self) -> Option<(u32, QpEvent)> {
        self.events.pop_front()
    }

    // ------------------------------------------------------------ receive

    /// Verifies and dispatches one RoCE packet (the UDP payload). Bad
    /// packets are counted and dropped; nothing from the network panics.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        meta: &RecvMeta,
        buf: &[u8],
        cqs: &mut impl CqSink,
    ) {
        let pkt = match Packet::parse(buf) {
            Ok(p) => p,
            Err(_) => {
                self.counters.parse_errors += 1;
                return;
            }
        };
        let Some(dst) = meta.dst else {
            self.counters.truncated += 1;
            return;
        };
        if let Some(acc) = &self.accept {
            if !acc.contains(&dst) && !self.groups.has(dst) {
                self.counters.not_local += 1;
                return;
            }
        }
        let to = SocketAddr::new(dst, meta.dst_port);
        let ip_id = match icrc::verify_received(meta.src, to, meta.seg, buf) {
            ReceivedIcrc::Valid(id) => id,
            ReceivedIcrc::ValidOtherId(id) => {
                self.counters.icrc_nonzero_id += 1;
                id
            }
            ReceivedIcrc::Invalid => {
                self.counters.icrc_errors += 1;
                return;
            }
        };
        let rx = RxMeta {
            src: meta.src.ip(),
            src_port: meta.src.port(),
            dst,
            tos: meta.tos.unwrap_or(0),
            ttl: meta.ttl.unwrap_or(64),
            ip_id,
            flow_label: meta.flow_label.unwrap_or(0),
        };
        let qpn = pkt.hdr.bth.dest_qpn;
        if qpn == MCAST_QPN || mcast::is_group(dst) {
            self.deliver_mcast(now, &pkt, &rx, cqs);
            return;
        }
        if qpn == GSI_QPN {
            // Refusals are counted by the GSI queue itself.
            let _ = self.gsi.receive(&pkt, rx.src, dst, rx.ttl, rx.tos);
            return;
        }
        let Some(slot) = self.qps.get_mut(&qpn) else {
            self.counters.unknown_qp += 1;
            return;
        };
        if !slot.src_pinned {
            slot.src = Some(dst);
        }
        let cfg = slot.qp.config();
        let xrc = cfg.qp_type == QpType::XrcRecv;
        // An XRC target takes its receives from the SRQ the packet names.
        let srq = if xrc { pkt.hdr.xrceth } else { slot.srq };
        let before = recv_level(&slot.qp, &self.srqs, srq);
        let mut env = if xrc {
            xrc_env(&mut self.mem, &mut self.srqs, cfg.xrcd, pkt.hdr.xrceth)
        } else {
            qp_env(&mut self.mem, &mut self.srqs, slot.srq)
        };
        slot.qp.handle_packet(now, &pkt, &rx, &mut env);
        if before > 0 && recv_level(&slot.qp, &self.srqs, srq) == 0 {
            self.recv_starved = true;
        }
        self.note_srq(srq);
        self.after_activity(qpn, cqs);
    }

    /// Whether a packet took the last receive WQE a QP had (its RQ's or
    /// its SRQ's) since the last call; clears it. A driver whose clients
    /// post receives elsewhere (rings) posts what they have before the
    /// next packet, so a SEND is not refused (RNR NAK) while a receive
    /// for it waits in a ring: a batch of small SENDs can use up an RQ
    /// in the middle of one receive batch.
    pub fn take_recv_starved(&mut self) -> bool {
        std::mem::take(&mut self.recv_starved)
    }

    /// A packet to a multicast group: a copy to every QP attached to it
    /// (each checks its Q_Key as for any UD packet). DestQP must be
    /// 0xFFFFFF and the destination a group; anything else is dropped.
    fn deliver_mcast(
        &mut self,
        now: Instant,
        pkt: &Packet<'_>,
        rx: &RxMeta,
        cqs: &mut impl CqSink,
    ) {
        let group = mcast::group_key(rx.dst);
        let n = self.groups.members(group).len();
        if pkt.hdr.bth.dest_qpn != MCAST_QPN || n == 0 {
            self.counters.unknown_qp += 1;
            return;
        }
        // Indexed: delivering cannot change the member list.
        for i in 0..n {
            let Some(&qpn) = self.groups.members(group).get(i) else {
                break;
            };
            let Some(slot) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let mut env = qp_env(&mut self.mem, &mut self.srqs, slot.srq);
            slot.qp.handle_packet(now, pkt, rx, &mut env);
            self.after_activity(qpn, cqs);
        }
    }

    // ------------------------------------------------------------- timers

    /// The earliest QP deadline (may be one that was re-armed later: an
    /// early wake-up finds nothing due).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Fires the QP timers due at `now`; returns how many fired.
    pub fn handle_timeout(&mut self, now: Instant, cqs: &mut impl CqSink) -> usize {
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
            let mut env = qp_env(&mut self.mem, &mut self.srqs, slot.srq);
            slot.qp.handle_timeout(now, &mut env);
            fired += 1;
            self.after_activity(qpn, cqs);
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

    // ----------------------------------------------------------- transmit

    /// Fills `out` from the QPs with packets to send, in turn, each a
    /// burst of at most one batch; returns how many packets they made.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        out: &mut impl TransmitSink,
        cqs: &mut impl CqSink,
    ) -> usize {
        let mut produced = 0;
        let cap = out.capacity();
        // MADs first: few, small, and a connection waits for each.
        while self.gsi.has_transmit() {
            let Some(buf) = out.buffer() else {
                break;
            };
            let Some((t, src)) = self.gsi.poll_transmit(buf) else {
                break;
            };
            produced += 1;
            out.commit(t, Some(src));
        }
        // Every turn removes a QP from the queue (it returns only through
        // after_activity), so the loop ends.
        for _ in 0..cap + self.qps.len() {
            if !out.has_room() {
                break;
            }
            let Some(qpn) = self.active.pop_front() else {
                break;
            };
            let Some(slot) = self.qps.get_mut(&qpn) else {
                continue;
            };
            slot.queued = false;
            let mut env = qp_env(&mut self.mem, &mut self.srqs, slot.srq);
            for _ in 0..cap {
                let Some(buf) = out.buffer() else {
                    break;
                };
                let Some(t) = slot.qp.poll_transmit(now, &mut env, buf) else {
                    break;
                };
                produced += 1;
                out.commit(t, slot.src);
            }
            self.after_activity(qpn, cqs);
        }
        produced
    }

    /// Collects what a QP produced after any call into it: completions to
    /// their CQs, events, its timer, its place in the transmit queue.
    fn after_activity(&mut self, qpn: u32, cqs: &mut impl CqSink) {
        let Some(slot) = self.qps.get_mut(&qpn) else {
            return;
        };
        let srq = slot.srq;
        self.note_srq(srq);
        let Some(slot) = self.qps.get_mut(&qpn) else {
            return;
        };
        let mut flushed = false;
        while let Some(c) = slot.qp.poll_completion() {
            if !flushed {
                // A completion says the data is in place.
                self.mem.flush_writes();
                flushed = true;
            }
            let (cq, srq) = match c.side {
                CqSide::Send => (slot.send_cq, None),
                CqSide::Recv => (slot.recv_cq, slot.srq),
                // An XRC SRQ destroyed meanwhile has no CQ to go to.
                CqSide::Srq(n) => match self.srqs.get(&n).and_then(|s| s.xrc) {
                    Some(x) => (x.cq, Some(n)),
                    None => continue,
                },
            };
            if let Some(srq) = srq {
                cqs.srq_receive_used(cq, srq);
            }
            cqs.post(cq, c);
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
}

#[cfg(test)]
mod tests {
    //! Two endpoints wired back to back in memory: no socket anywhere.
    use super::*;
    use crate::qp::{
        access, send_flags, BufferMemory, Mtu, Payload, QpState, QpType, SendOp, Sge, WcOpcode,
        WcStatus,
    };
    use crate::wire::icrc::{fill_icrc, IcrcIp};
    use crate::wire::MAX_PACKET;
    use crate::Psn;
    use std::net::Ipv4Addr;

    const A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
    const PORT: u16 = 4791;
    const VA: u64 = 0x10_0000;

    /// A send batch that seals each packet as an IPv4 sender with ID 0
    /// would, and keeps it.
    struct Wire {
        src: Ipv4Addr,
        buf: Vec<u8>,
        out: Vec<(Transmit, Vec<u8>)>,
    }

    impl TransmitSink for Wire {
        fn capacity(&self) -> usize {
            16
        }
        fn has_room(&self) -> bool {
            self.out.len() < 16
        }
        fn buffer(&mut self) -> Option<&mut [u8]> {
            self.has_room().then_some(&mut self.buf[..])
        }
        fn commit(&mut self, t: Transmit, _src: Option<IpAddr>) {
            let IpAddr::V4(dst) = t.dst else {
                panic!("IPv4 only here")
            };
            let mut p = self.buf[..t.len].to_vec();
            fill_icrc(&IcrcIp::v4(self.src, dst), PORT, PORT, &mut p).unwrap();
            self.out.push((t, p));
        }
    }

    fn meta(src: Ipv4Addr, dst: Ipv4Addr) -> RecvMeta {
        RecvMeta {
            src: SocketAddr::from((src, PORT)),
            dst: Some(IpAddr::V4(dst)),
            dst_port: PORT,
            tos: None,
            ttl: None,
            flow_label: None,
            seg: 0,
        }
    }

    fn rc_pair() -> (Endpoint<BufferMemory>, u32, Endpoint<BufferMemory>, u32) {
        let mut a = Endpoint::new(0x11, BufferMemory::new()).unwrap();
        let mut b = Endpoint::new(0x40, BufferMemory::new()).unwrap();
        let spec = QpSpec {
            qp_type: QpType::Rc,
            pd: 1,
            send_cq: 7,
            recv_cq: 8,
            srq: None,
            xrcd: None,
            sq_sig_all: false,
            max_send_wr: 16,
            max_recv_wr: 16,
        };
        let qa = a.create_qp(spec).unwrap();
        let qb = b.create_qp(spec).unwrap();
        let mut none = VecDeque::new();
        for (e, q, peer, addr) in [(&mut a, qa, qb, B), (&mut b, qb, qa, A)] {
            let steps = [
                QpAttr {
                    state: Some(QpState::Init),
                    access_flags: Some(access::LOCAL_WRITE | access::REMOTE_WRITE),
                    ..QpAttr::default()
                },
                QpAttr {
                    state: Some(QpState::Rtr),
                    path_mtu: Some(Mtu::M1024),
                    rq_psn: Some(Psn::new(5)),
                    dest_qpn: Some(peer),
                    dest_addr: Some(IpAddr::V4(addr)),
                    min_rnr_timer: Some(1),
                    max_dest_rd_atomic: Some(1),
                    ..QpAttr::default()
                },
                QpAttr {
                    state: Some(QpState::Rts),
                    sq_psn: Some(Psn::new(5)),
                    timeout: Some(14),
                    retry_cnt: Some(7),
                    rnr_retry: Some(7),
                    max_rd_atomic: Some(1),
                    ..QpAttr::default()
                },
            ];
            for s in &steps {
                e.modify_qp(q, s, &mut none).unwrap();
            }
        }
        assert!(none.is_empty());
        (a, qa, b, qb)
    }

    fn wire(src: Ipv4Addr) -> Wire {
        Wire {
            src,
            buf: vec![0; MAX_PACKET + 64],
            out: Vec::new(),
        }
    }

    #[test]
    fn a_send_crosses_two_endpoints_and_completes_on_the_tagged_cqs() {
        let (mut a, qa, mut b, qb) = rc_pair();
        let now = Instant::now();
        let (mut ca, mut cb) = (VecDeque::new(), VecDeque::new());
        let la = a.memory_mut().register(1, VA, vec![0x5a; 3000], 0);
        let lb = b
            .memory_mut()
            .register(1, VA, vec![0; 3000], access::LOCAL_WRITE);
        let sge = |lkey| Sge {
            addr: VA,
            length: 3000,
            lkey,
        };
        b.post_recv(
            qb,
            RecvWqe {
                wr_id: 2,
                sges: vec![sge(lb)],
            },
            &mut cb,
        )
        .unwrap();
        let w = SendWqe {
            wr_id: 1,
            op: SendOp::Send,
            flags: send_flags::SIGNALED,
            payload: Payload::Sges(vec![sge(la)]),
            ud: None,
            xrc_srqn: None,
        };
        a.post_send(qa, w, &mut ca).unwrap();
        assert!(a.has_transmit());
        // Bounded ping-pong until both sides are quiet.
        for _ in 0..16 {
            let (mut wa, mut wb) = (wire(A), wire(B));
            a.poll_transmit(now, &mut wa, &mut ca);
            for (_, p) in &wa.out {
                b.handle_datagram(now, &meta(A, B), p, &mut cb);
            }
            b.poll_transmit(now, &mut wb, &mut cb);
            for (_, p) in &wb.out {
                a.handle_datagram(now, &meta(B, A), p, &mut ca);
            }
            if wa.out.is_empty() && wb.out.is_empty() {
                break;
            }
        }
        let (cq, c) = ca.pop_front().expect("send completion");
        assert_eq!((cq, c.wr_id, c.status), (7, 1, WcStatus::Success));
        let (cq, c) = cb.pop_front().expect("receive completion");
        assert_eq!((cq, c.wr_id, c.opcode), (8, 2, WcOpcode::Recv));
        assert_eq!(c.byte_len, 3000);
        assert!(ca.is_empty() && cb.is_empty());
        assert_eq!(b.counters().icrc_errors + b.counters().unknown_qp, 0);
    }

    /// A QP streaming with the longest legal ACK timeout (31: 2.4 hours)
    /// moves its deadline with every ACK, and each move pushes a heap
    /// entry that will not come due for hours; the heap must still stay
    /// within its bound (stale entries are swept when they outnumber the
    /// QPs' live ones), not grow with the traffic.
    #[test]
    fn the_timer_heap_stays_bounded_under_a_long_ack_timeout() {
        let (mut a, qa, mut b, _qb) = rc_pair();
        let mut none = VecDeque::new();
        let long = QpAttr {
            timeout: Some(31),
            ..QpAttr::default()
        };
        a.modify_qp(qa, &long, &mut none).unwrap();
        let mut now = Instant::now();
        let (mut ca, mut cb) = (VecDeque::new(), VecDeque::new());
        let la = a.memory_mut().register(1, VA, vec![0x5a; 64], 0);
        let lb = b.memory_mut().register(
            1,
            VA,
            vec![0; 64],
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        );
        let bound = 1024 + 8 + 1;
        let mut most = 0;
        for i in 0..20_000u64 {
            let w = SendWqe {
                wr_id: i,
                op: SendOp::Write {
                    remote_addr: VA,
                    rkey: lb,
                },
                flags: 0,
                payload: Payload::Sges(vec![Sge {
                    addr: VA,
                    length: 8,
                    lkey: la,
                }]),
                ud: None,
                xrc_srqn: None,
            };
            a.post_send(qa, w, &mut ca).unwrap();
            // One turn of a driver: timers, then both directions.
            a.handle_timeout(now, &mut ca);
            let (mut wa, mut wb) = (wire(A), wire(B));
            a.poll_transmit(now, &mut wa, &mut ca);
            for (_, p) in &wa.out {
                b.handle_datagram(now, &meta(A, B), p, &mut cb);
            }
            b.poll_transmit(now, &mut wb, &mut cb);
            for (_, p) in &wb.out {
                a.handle_datagram(now, &meta(B, A), p, &mut ca);
            }
            most = most.max(a.timers.len());
            now += std::time::Duration::from_micros(10);
        }
        assert_eq!(a.counters().timer_fires, 0, "nothing came due");
        assert!(
            most <= bound,
            "{most} timer entries for one QP after 20000 messages"
        );
    }

    #[test]
    fn taking_the_last_receive_is_reported_once_so_the_driver_can_refill_in_time() {
        let (mut a, qa, mut b, qb) = rc_pair();
        let now = Instant::now();
        let (mut ca, mut cb) = (VecDeque::new(), VecDeque::new());
        let la = a.memory_mut().register(1, VA, vec![0x5a; 64], 0);
        let lb = b.memory_mut().register(
            1,
            VA,
            vec![0; 64],
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        );
        let sge = |lkey| Sge {
            addr: VA,
            length: 4,
            lkey,
        };
        let recv = |id| RecvWqe {
            wr_id: id,
            sges: vec![sge(lb)],
        };
        for id in [10, 11] {
            b.post_recv(qb, recv(id), &mut cb).unwrap();
        }
        // A WRITE needs no receive: an empty RQ is not starved by it.
        let write = SendWqe {
            wr_id: 0,
            op: SendOp::Write {
                remote_addr: VA,
                rkey: lb,
            },
            flags: 0,
            payload: Payload::Sges(vec![sge(la)]),
            ud: None,
            xrc_srqn: None,
        };
        a.post_send(qa, write, &mut ca).unwrap();
        for id in 1..=3 {
            let w = SendWqe {
                wr_id: id,
                op: SendOp::Send,
                flags: send_flags::SIGNALED,
                payload: Payload::Sges(vec![sge(la)]),
                ud: None,
                xrc_srqn: None,
            };
            a.post_send(qa, w, &mut ca).unwrap();
        }
        let mut wa = wire(A);
        a.poll_transmit(now, &mut wa, &mut ca);
        assert_eq!(wa.out.len(), 4, "one WRITE and three SENDs of one packet");
        let deliver = |b: &mut Endpoint<BufferMemory>, cb: &mut VecDeque<_>, i: usize| {
            b.handle_datagram(now, &meta(A, B), &wa.out[i].1, cb);
            b.take_recv_starved()
        };
        assert!(!deliver(&mut b, &mut cb, 0), "the WRITE took no receive");
        assert!(!deliver(&mut b, &mut cb, 1), "one receive left");
        assert!(deliver(&mut b, &mut cb, 2), "the last receive went");
        assert!(!b.take_recv_starved(), "reported once");
        // What a driver does then: the receive posted meanwhile goes in
        // before the next packet, which finds it (no RNR NAK).
        b.post_recv(qb, recv(12), &mut cb).unwrap();
        assert!(deliver(&mut b, &mut cb, 3));
        let c = b.qp(qb).unwrap().counters();
        assert_eq!((c.send_rnr_err, c.out_of_seq_request), (0, 0));
        let got: Vec<u64> = cb.iter().map(|(_, c)| c.wr_id).collect();
        assert_eq!(got, [10, 11, 12]);
        // An RQ that is empty already reports nothing more.
        let mut wb = wire(B);
        b.poll_transmit(now, &mut wb, &mut cb);
        assert!(!b.take_recv_starved());
    }

    #[test]
    fn bad_datagrams_are_counted_where_they_fail() {
        let (mut a, qa, mut b, qb) = rc_pair();
        let now = Instant::now();
        let mut cqs = VecDeque::new();
        let la = a.memory_mut().register(1, VA, vec![1; 8], 0);
        let w = SendWqe {
            wr_id: 1,
            op: SendOp::Send,
            flags: 0,
            payload: Payload::Sges(vec![Sge {
                addr: VA,
                length: 8,
                lkey: la,
            }]),
            ud: None,
            xrc_srqn: None,
        };
        a.post_send(qa, w, &mut cqs).unwrap();
        let mut wa = wire(A);
        a.poll_transmit(now, &mut wa, &mut cqs);
        let pkt = wa.out.pop().expect("a packet").1;
        let mut flipped = pkt.clone();
        flipped[13] ^= 1;
        b.handle_datagram(now, &meta(A, B), &flipped, &mut cqs);
        b.handle_datagram(now, &meta(A, B), &pkt[..3], &mut cqs);
        let nowhere = RecvMeta {
            dst: None,
            ..meta(A, B)
        };
        b.handle_datagram(now, &nowhere, &pkt, &mut cqs);
        b.set_local_addrs(Some(&[IpAddr::V4(A)]));
        b.handle_datagram(now, &meta(A, B), &pkt, &mut cqs);
        b.set_local_addrs(None);
        b.destroy_qp(qb, &mut cqs).unwrap();
        b.handle_datagram(now, &meta(A, B), &pkt, &mut cqs);
        let c = *b.counters();
        assert_eq!(
            (
                c.icrc_errors,
                c.parse_errors,
                c.truncated,
                c.not_local,
                c.unknown_qp
            ),
            (1, 1, 1, 1, 1),
            "{c:?}"
        );
    }

    /// A UD QP on `e` in RTS with Q_Key `qkey` and one 256-byte receive
    /// posted; returns the QPN (also the receive's wr_id) and its lkey.
    fn ud_qp_mem(
        e: &mut Endpoint<BufferMemory>,
        qkey: u32,
        cqs: &mut VecDeque<(u32, Completion)>,
    ) -> (u32, u32) {
        let spec = QpSpec {
            qp_type: QpType::Ud,
            pd: 1,
            send_cq: 7,
            recv_cq: 8,
            srq: None,
            xrcd: None,
            sq_sig_all: false,
            max_send_wr: 16,
            max_recv_wr: 16,
        };
        let q = e.create_qp(spec).unwrap();
        for a in [
            QpAttr {
                state: Some(QpState::Init),
                qkey: Some(qkey),
                ..QpAttr::default()
            },
            QpAttr {
                state: Some(QpState::Rtr),
                ..QpAttr::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                sq_psn: Some(Psn::new(1)),
                ..QpAttr::default()
            },
        ] {
            e.modify_qp(q, &a, cqs).unwrap();
        }
        let va = VA + u64::from(q) * 0x1000;
        let lkey = e
            .memory_mut()
            .register(1, va, vec![0; 256], access::LOCAL_WRITE);
        let sges = vec![Sge {
            addr: va,
            length: 256,
            lkey,
        }];
        e.post_recv(
            q,
            RecvWqe {
                wr_id: u64::from(q),
                sges,
            },
            cqs,
        )
        .unwrap();
        (q, lkey)
    }

    fn ud_qp(
        e: &mut Endpoint<BufferMemory>,
        qkey: u32,
        cqs: &mut VecDeque<(u32, Completion)>,
    ) -> u32 {
        ud_qp_mem(e, qkey, cqs).0
    }

    #[test]
    fn a_datagram_to_a_group_reaches_every_attached_qp_once() {
        const QKEY: u32 = 0x0123_4567;
        let group = Ipv4Addr::new(239, 1, 2, 3);
        let now = Instant::now();
        let (mut ca, mut cb) = (VecDeque::new(), VecDeque::new());
        let mut a = Endpoint::new(0x11, BufferMemory::new()).unwrap();
        let mut b = Endpoint::new(0x40, BufferMemory::new()).unwrap();
        b.set_local_addrs(Some(&[IpAddr::V4(B)]));
        let sender = ud_qp(&mut a, QKEY, &mut ca);
        let ((m1, k1), (m2, k2), gone, other_key) = (
            ud_qp_mem(&mut b, QKEY, &mut cb),
            ud_qp_mem(&mut b, QKEY, &mut cb),
            ud_qp(&mut b, QKEY, &mut cb),
            ud_qp(&mut b, 0x77, &mut cb),
        );
        let mapped = IpAddr::V6(group.to_ipv6_mapped());
        for q in [m1, m2, gone, other_key] {
            b.attach_mcast(q, mapped).unwrap();
        }
        b.attach_mcast(m1, IpAddr::V4(group)).unwrap();
        b.detach_mcast(gone, IpAddr::V4(group)).unwrap();
        assert_eq!(b.mcast_groups().collect::<Vec<_>>(), [IpAddr::V4(group)]);
        let ld = a.memory_mut().register(1, VA, b"to the group".to_vec(), 0);
        let w = SendWqe {
            wr_id: 1,
            op: SendOp::Send,
            flags: send_flags::SIGNALED,
            payload: Payload::Sges(vec![Sge {
                addr: VA,
                length: 12,
                lkey: ld,
            }]),
            ud: Some(crate::qp::UdDest {
                addr: IpAddr::V4(group),
                qpn: MCAST_QPN,
                qkey: QKEY,
            }),
            xrc_srqn: None,
        };
        a.post_send(sender, w, &mut ca).unwrap();
        let mut wa = wire(A);
        a.poll_transmit(now, &mut wa, &mut ca);
        assert_eq!(wa.out.len(), 1);
        let (t, p) = &wa.out[0];
        assert_eq!(t.dst, IpAddr::V4(group));
        // A group no QP of this device joined is not local.
        b.handle_datagram(now, &meta(A, Ipv4Addr::new(239, 9, 9, 9)), p, &mut cb);
        assert_eq!(b.counters().not_local, 1);
        b.handle_datagram(now, &meta(A, group), p, &mut cb);
        let mut got: Vec<(u32, u64, u32)> = cb
            .drain(..)
            .map(|(cq, c)| (cq, c.wr_id, c.src_qp))
            .collect();
        got.sort_unstable();
        assert_eq!(
            got,
            [(8, u64::from(m1), sender), (8, u64::from(m2), sender)]
        );
        for k in [k1, k2] {
            let r = b.memory().region(k).unwrap();
            assert_eq!(&r.data[40..52], b"to the group");
        }
        assert_eq!(b.qp(other_key).unwrap().counters().qkey_violations, 1);
        // The same packet to a unicast QP number of the group is dropped.
        let mut unicast = p.clone();
        unicast[5..8].copy_from_slice(&m1.to_be_bytes()[1..]);
        fill_icrc(&IcrcIp::v4(A, group), PORT, PORT, &mut unicast).unwrap();
        b.handle_datagram(now, &meta(A, group), &unicast, &mut cb);
        // Destroyed QPs leave their groups; with none left, the group is gone.
        for q in [m1, m2, other_key] {
            b.destroy_qp(q, &mut cb).unwrap();
        }
        assert_eq!(b.mcast_groups().count(), 0);
        b.handle_datagram(now, &meta(A, group), p, &mut cb);
        assert!(cb.is_empty(), "{cb:?}");
        assert_eq!((b.counters().unknown_qp, b.counters().not_local), (1, 2));
    }

    #[test]
    fn srq_resize_keeps_its_wqes_and_refuses_less_room_than_they_need() {
        let mut e = Endpoint::new(0x11, BufferMemory::new()).unwrap();
        let srq = e.create_srq(2);
        let wqe = |wr_id| RecvWqe {
            wr_id,
            sges: vec![],
        };
        e.post_srq_recv(srq, wqe(1)).unwrap();
        e.post_srq_recv(srq, wqe(2)).unwrap();
        assert!(matches!(
            e.post_srq_recv(srq, wqe(3)),
            Err(EngineError::SrqFull(_))
        ));
        assert!(matches!(e.resize_srq(srq, 1), Err(EngineError::SrqFull(_))));
        assert!(
            e.post_srq_recv(srq, wqe(3)).is_err(),
            "still 2 after a refusal"
        );
        e.resize_srq(srq, 4).unwrap();
        e.post_srq_recv(srq, wqe(3)).unwrap();
        e.resize_srq(srq, 3).unwrap();
        assert!(
            e.post_srq_recv(srq, wqe(4)).is_err(),
            "shrunk to what it holds"
        );
        let s = e.srqs.get_mut(&srq).unwrap();
        let order: Vec<u64> = std::iter::from_fn(|| s.pop()).map(|w| w.wr_id).collect();
        assert_eq!(order, [1, 2, 3]);
        assert!(matches!(
            e.resize_srq(srq + 1, 4),
            Err(EngineError::NoSrq(_))
        ));
    }

    #[test]
    fn only_ud_qps_attach_and_only_to_ipv4_groups() {
        let (_, _, mut b, qb) = rc_pair();
        let g: IpAddr = "239.1.1.1".parse().unwrap();
        assert!(matches!(b.attach_mcast(qb, g), Err(EngineError::NotUd(_))));
        assert!(matches!(
            b.attach_mcast(999, g),
            Err(EngineError::NoQp(999))
        ));
        let mut cqs = VecDeque::new();
        let u = ud_qp(&mut b, 1, &mut cqs);
        assert!(matches!(
            b.attach_mcast(u, "10.1.1.1".parse().unwrap()),
            Err(EngineError::NotMulticast(_))
        ));
        // An IPv6 group is a group, but not one rxu joins.
        assert!(matches!(
            b.attach_mcast(u, "ff02::1".parse().unwrap()),
            Err(EngineError::Config(_))
        ));
        assert!(matches!(
            b.detach_mcast(u, g),
            Err(EngineError::NotAttached(..))
        ));
    }
}
