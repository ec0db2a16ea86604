//! The queue pair: public face of the requester, responder and completer.
//!
//! This file is the glue: QP state, attributes, posting, flushing and the
//! dispatch of packets and timers to the requester (`requester.rs`), the
//! completer (`completer.rs`) and the responder (`responder.rs`,
//! `resp_ud.rs`, `responses.rs`; their state in `resp_state.rs`).
//!
//! Verbs conventions chosen here:
//! - posting in ERR succeeds and the WQE completes at once with
//!   WR_FLUSH_ERR (as rxe and mlx5 do); posting in RESET is an error;
//!   posting in INIT/RTR queues the WQE until RTS;
//! - modify(state = ERR) flushes every outstanding WQE; modify(state =
//!   RESET) forgets all WQEs (completions already produced stay queued);
//!   ERR can only be left for RESET;
//! - retry_cnt 7 means 7 retries (rnr_retry 7 means infinite); the
//!   retry budgets refill whenever the completer makes progress;
//! - max_rd_atomic 0 is treated as 1 (the peer refuses what it must);
//! - messages are limited to [`super::MAX_MSG_SIZE`] (1 GiB), UD to the
//!   port MTU ([`QpTuning::port_mtu`]); longer ones are refused at post.
//!
//! Transport choices (see [`QpTuning`] for window and AckReq interval):
//! - the responder ACKs only requests with AckReq set, coalescing queued
//!   ACKs; duplicate SEND/WRITE packets are re-ACKed with PSN expected-1;
//! - a SEND longer than the receive buffer is NAKed 0x61 (invalid
//!   request, as the IBA says) and completes LOC_LEN_ERR; a receive WQE
//!   that cannot be written is NAKed 0x63 and completes LOC_PROT_ERR;
//!   the requester maps 0x63 (rxe's answer to a too-long SEND) and any
//!   unknown NAK to REM_OP_ERR;
//! - READ response data is read from memory when each response packet is
//!   built, so a later WRITE may show through an earlier READ (the IBA
//!   allows it; FENCE on the later WQE prevents it); a duplicate READ is
//!   answered as a new READ from its PSN (FIRST/ONLY first), and both
//!   that and rxe's MIDDLE/LAST continuation are accepted by the
//!   completer;
//! - end-to-end credits (IBA 9.7.7.2): an RC responder without an SRQ
//!   puts its RQ's count in every ACK-type AETH and announces receives
//!   posted after it promised few with an unsolicited ACK; the requester
//!   starts no SEND (or WRITE with immediate) beyond the credits of the
//!   newest ACK plus the one the IBA allows, which against a responder
//!   that sends updates first waits for one (`completer.rs`,
//!   `credit_wait`). Code 31 (kernel rxe's answer, or an SRQ) leaves the
//!   requester unlimited.

pub use super::error::QpError;
use super::memory::Memory;
use super::resp_state::Responder;
use super::send_queue::{self, SendQueue, SqEntry};
use super::timers;
use super::tuning::QpTuning;
use super::types::*;
use crate::wire::opcode::flags;
use crate::wire::{Packet, Service, MAX_PACKET};
use crate::Psn;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// Fixed at creation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpConfig {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: u32,
    /// Receive WQEs come from this SRQ instead of the QP's own RQ.
    pub srq: Option<u32>,
    /// XRC_RECV: the XRC domain whose SRQs its requests may name.
    pub xrcd: Option<u32>,
    /// Every send WQE generates a completion (`sq_sig_all`).
    pub sq_sig_all: bool,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
}

/// Attributes applied by [`Qp::modify`]; `None` leaves a field unchanged.
/// Verbs-level validation (which attributes each transition requires) is
/// the provider's job; the transport applies what it is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    pub state: Option<QpState>,
    pub path_mtu: Option<Mtu>,
    pub dest_qpn: Option<u32>,
    /// Peer IP address (from the AH / GID) for RC and UC.
    pub dest_addr: Option<IpAddr>,
    /// GRH flow label; with dest_qpn it picks the UDP source port.
    pub flow_label: Option<u32>,
    pub rq_psn: Option<Psn>,
    pub sq_psn: Option<Psn>,
    pub qkey: Option<u32>,
    /// Remote access the responder allows (bits of `access`).
    pub access_flags: Option<u32>,
    /// Local ACK timeout exponent: 4.096 us * 2^timeout; 0 = infinite.
    pub timeout: Option<u8>,
    pub retry_cnt: Option<u8>,
    /// 7 = infinite.
    pub rnr_retry: Option<u8>,
    /// RNR NAK timer code this QP's responder sends.
    pub min_rnr_timer: Option<u8>,
    /// Initiator depth: READ/atomic requests outstanding at once.
    pub max_rd_atomic: Option<u8>,
    /// Responder resources.
    pub max_dest_rd_atomic: Option<u8>,
}

/// Where a received packet came from (the engine fills this in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxMeta {
    pub src: IpAddr,
    pub src_port: u16,
    /// Local address it was sent to.
    pub dst: IpAddr,
    /// IPv4 TOS / IPv6 traffic class, if known.
    pub tos: u8,
    /// TTL / hop limit, if known (64 otherwise).
    pub ttl: u8,
    /// IPv4 identification (as the ICRC check recovered it; 0 for IPv6).
    pub ip_id: u16,
    /// IPv6 flow label, if known (0 otherwise and for IPv4).
    pub flow_label: u32,
}

/// A packet [`Qp::poll_transmit`] wrote into the caller's buffer:
/// `buf[..len]` is BTH .. pad followed by 4 bytes for the ICRC, which the
/// engine fills in once it knows the IP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub len: usize,
    pub dst: IpAddr,
    pub src_port: u16,
}

/// A source of receive WQEs shared by several QPs (an SRQ).
pub trait RecvSource {
    fn pop(&mut self) -> Option<RecvWqe>;
}

/// What a QP may touch while it runs: memory, and the SRQ it is bound to
/// (for an XRC target: the SRQ the packet in hand names, if that is an
/// XRC SRQ of the QP's domain, with `xrc` saying which and its PD).
pub struct Env<'a> {
    pub mem: &'a mut dyn Memory,
    pub srq: Option<&'a mut dyn RecvSource>,
    pub xrc: Option<XrcTarget>,
}

/// The XRC SRQ a request to an XRC target QP is for, as the endpoint
/// resolved it from the XRCETH (only SRQs of the QP's XRC domain).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XrcTarget {
    pub srqn: u32,
    /// The SRQ's PD: receive buffers and the keys of RDMA and atomics to
    /// the target are checked against it.
    pub pd: u32,
}

/// Asynchronous events a QP raises (delivered to the owner's async fd).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpEvent {
    /// The QP went to ERR on its own (IBV_EVENT_QP_FATAL and friends).
    Fatal,
    /// SRQ-attached QP in ERR has no more WQEs in flight.
    LastWqeReached,
    /// Communication established (first packet received in RTR).
    CommEstablished,
}

/// Declares [`QpCounters`] from one list of fields, so that its
/// (name, value) list and its sum are written once.
macro_rules! qp_counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Per-QP counters, named like rxe's hw_counters.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct QpCounters {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl QpCounters {
            /// Every counter as (name, value), in declaration order (for
            /// `rxu stats`).
            pub fn list(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }

            /// The counters as a device reports the sum over its QPs: its
            /// own sent_pkts / rcvd_pkts are its driver's, and the QPs'
            /// dropped packets are named apart from the driver's.
            pub fn device_totals(&self) -> Vec<(&'static str, u64)> {
                self.list()
                    .into_iter()
                    .filter_map(|(name, v)| match name {
                        "sent_pkts" | "rcvd_pkts" => None,
                        "dropped_pkts" => Some(("qp_dropped_pkts", v)),
                        _ => Some((name, v)),
                    })
                    .collect()
            }

            /// Adds `other`'s counts to these (device totals).
            pub fn add(&mut self, other: &QpCounters) {
                $(self.$name += other.$name;)*
            }
        }
    };
}

qp_counters! {
    sent_pkts,
    rcvd_pkts,
    duplicate_request,
    out_of_seq_request,
    rcvd_rnr_err,
    send_rnr_err,
    rcvd_seq_err,
    retry_exceeded_err,
    rnr_nak_retry_err,
    completer_retry_err,
    retransmitted_pkts,
    local_ack_timeout_err,
    dropped_pkts,
    /// UD packets dropped for a Q_Key mismatch (rxe's qkey_viol_cntr).
    qkey_violations,
    /// Responder: unsolicited ACKs sent to give the requester credits
    /// when receives were posted after an ACK that promised few.
    credit_updates,
    /// Requester: SENDs sent without credit, as a probe, after waiting
    /// for credits in vain.
    credit_probes,
}

/// Attributes in force (defaults as rxe's for a fresh QP).
#[derive(Clone, Debug)]
pub(crate) struct Params {
    pub path_mtu: Mtu,
    pub dest_qpn: u32,
    pub dest_addr: Option<IpAddr>,
    pub flow_label: u32,
    pub qkey: u32,
    pub access: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    /// UDP source port of this connection.
    pub sport: u16,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            path_mtu: Mtu::M256,
            dest_qpn: 0,
            dest_addr: None,
            flow_label: 0,
            qkey: 0,
            access: 0,
            timeout: 0,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            sport: 0xC000,
        }
    }
}

impl Params {
    pub(crate) fn pmtu(&self) -> usize {
        self.path_mtu.bytes()
    }
    pub(crate) fn ack_timeout(&self) -> Option<Duration> {
        timers::ack_timeout(self.timeout)
    }
    pub(crate) fn dst(&self) -> IpAddr {
        self.dest_addr.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }
}

/// A queue pair.
pub struct Qp {
    pub(crate) cfg: QpConfig,
    pub(crate) state: QpState,
    pub(crate) attr: Params,
    pub(crate) tuning: QpTuning,
    pub(crate) sq: SendQueue,
    pub(crate) rq: VecDeque<RecvWqe>,
    pub(crate) resp: Responder,
    pub(crate) cq: VecDeque<Completion>,
    pub(crate) events: VecDeque<QpEvent>,
    pub(crate) counters: QpCounters,
    /// CommEstablished was raised for this RTR.
    comm_est: bool,
    /// Round robin between responder and requester output.
    turn: bool,
}

impl Qp {
    pub fn new(cfg: QpConfig) -> Qp {
        let attr = Params::default();
        let mut resp = Responder {
            pd: cfg.pd,
            ..Responder::default()
        };
        resp.res.resize(usize::from(attr.max_dest_rd_atomic));
        let sq = SendQueue {
            retries_left: attr.retry_cnt,
            rnr_left: attr.rnr_retry,
            cwnd: u32::MAX,
            ..SendQueue::default()
        };
        Qp {
            cfg,
            state: QpState::Reset,
            attr,
            tuning: QpTuning::default(),
            sq,
            rq: VecDeque::new(),
            resp,
            cq: VecDeque::new(),
            events: VecDeque::new(),
            counters: QpCounters::default(),
            comm_est: false,
            turn: false,
        }
    }
    pub fn qpn(&self) -> u32 {
        self.cfg.qpn
    }
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }
    pub fn state(&self) -> QpState {
        self.state
    }
    pub fn counters(&self) -> &QpCounters {
        &self.counters
    }
    pub fn tuning(&self) -> &QpTuning {
        &self.tuning
    }
    /// Replaces the transport tuning (takes effect for the next packet).
    pub fn set_tuning(&mut self, t: QpTuning) {
        self.tuning = QpTuning {
            max_unacked_psns: t.max_unacked_psns.clamp(1, 1 << 20),
            ack_req_interval: t.ack_req_interval.max(1),
            ..t
        };
    }
    /// The UDP source port this QP's packets carry.
    pub fn udp_sport(&self) -> u16 {
        self.attr.sport
    }
    /// Send WQEs posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.sq.entries.len()
    }
    /// Receive WQEs posted to this QP's own RQ and not yet used.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }
    /// First PSN the requester still waits to have answered.
    pub fn sq_comp_psn(&self) -> Psn {
        self.sq.comp_psn
    }
    /// PSN the responder expects next.
    pub fn rq_expected_psn(&self) -> Psn {
        self.resp.epsn
    }

    pub fn modify(&mut self, a: &QpAttr) -> Result<(), QpError> {
        let bad = |c: bool, what| {
            if c {
                Err(QpError::InvalidAttr(what))
            } else {
                Ok(())
            }
        };
        bad(a.timeout.is_some_and(|t| t > 31), "timeout > 31")?;
        bad(a.retry_cnt.is_some_and(|t| t > 7), "retry_cnt > 7")?;
        bad(a.rnr_retry.is_some_and(|t| t > 7), "rnr_retry > 7")?;
        bad(
            a.min_rnr_timer.is_some_and(|t| t > 31),
            "min_rnr_timer > 31",
        )?;
        bad(
            a.dest_qpn.is_some_and(|q| q > 0xFF_FFFF),
            "dest_qpn > 2^24-1",
        )?;
        bad(
            a.flow_label.is_some_and(|f| f > 0xF_FFFF),
            "flow_label > 2^20-1",
        )?;
        if let Some(s) = a.state {
            let from_err_ok = matches!(s, QpState::Reset | QpState::Err);
            if self.state == QpState::Err && !from_err_ok {
                return Err(QpError::InvalidState(self.state));
            }
        }
        if let Some(v) = a.path_mtu {
            self.attr.path_mtu = v;
        }
        if let Some(v) = a.dest_qpn {
            self.attr.dest_qpn = v;
        }
        if let Some(v) = a.dest_addr {
            self.attr.dest_addr = Some(v);
        }
        if let Some(v) = a.flow_label {
            self.attr.flow_label = v;
        }
        if let Some(v) = a.qkey {
            self.attr.qkey = v;
        }
        if let Some(v) = a.access_flags {
            self.attr.access = v;
        }
        if let Some(v) = a.timeout {
            self.attr.timeout = v;
        }
        if let Some(v) = a.retry_cnt {
            self.attr.retry_cnt = v;
            self.sq.retries_left = v;
        }
        if let Some(v) = a.rnr_retry {
            self.attr.rnr_retry = v;
            self.sq.rnr_left = v;
        }
        if let Some(v) = a.min_rnr_timer {
            self.attr.min_rnr_timer = v;
        }
        if let Some(v) = a.max_rd_atomic {
            self.attr.max_rd_atomic = v;
        }
        if let Some(v) = a.max_dest_rd_atomic {
            self.attr.max_dest_rd_atomic = v;
            self.resp.res.resize(usize::from(v));
        }
        self.attr.sport =
            super::udp_sport::udp_sport(self.attr.flow_label, self.cfg.qpn, self.attr.dest_qpn);
        if let Some(v) = a.rq_psn {
            self.resp.epsn = v;
            self.resp.nak_sent = false;
        }
        if let Some(v) = a.sq_psn {
            self.sq.set_psn(v);
        }
        if let Some(s) = a.state {
            self.transition(s);
        }
        Ok(())
    }

    fn transition(&mut self, s: QpState) {
        match s {
            QpState::Reset => self.reset(),
            QpState::Err => self.enter_error(false),
            QpState::Rtr => {
                if self.state != QpState::Rtr {
                    self.comm_est = false;
                }
                self.state = s;
            }
            _ => self.state = s,
        }
    }

    /// Back to a fresh QP; attributes, counters and unpolled completions
    /// stay.
    fn reset(&mut self) {
        self.state = QpState::Reset;
        self.sq.reset(Psn::new(0));
        self.sq.retries_left = self.attr.retry_cnt;
        self.sq.rnr_left = self.attr.rnr_retry;
        self.rq.clear();
        self.resp.reset();
        self.comm_est = false;
    }

    pub fn post_send(&mut self, wqe: SendWqe) -> Result<(), QpError> {
        match self.state {
            QpState::Reset => return Err(QpError::InvalidState(self.state)),
            QpState::Err | QpState::Sqe => {
                let (kind, len) = (send_queue::kind_of(&wqe.op), wqe.payload.len());
                let e = SqEntry::new(wqe, kind, len, true);
                self.cq
                    .push_back(e.completion(WcStatus::WrFlushErr, self.cfg.qpn));
                return Ok(());
            }
            _ => {}
        }
        if self.sq.entries.len() >= self.cfg.max_send_wr as usize {
            return Err(QpError::QueueFull);
        }
        let (kind, len) =
            send_queue::validate(self.cfg.qp_type, &wqe, self.tuning.port_mtu.bytes())?;
        self.sq
            .entries
            .push_back(SqEntry::new(wqe, kind, len, self.cfg.sq_sig_all));
        Ok(())
    }

    pub fn post_recv(&mut self, wqe: RecvWqe) -> Result<(), QpError> {
        if self.cfg.srq.is_some() {
            return Err(QpError::InvalidWr("QP receives from an SRQ"));
        }
        if self.cfg.qp_type.is_xrc() {
            return Err(QpError::InvalidWr("XRC QPs have no receive queue"));
        }
        match self.state {
            QpState::Reset => return Err(QpError::InvalidState(self.state)),
            QpState::Err => {
                self.cq
                    .push_back(recv_completion(&wqe, WcStatus::WrFlushErr, self.cfg.qpn));
                return Ok(());
            }
            _ => {}
        }
        if self.rq.len() >= self.cfg.max_recv_wr as usize {
            return Err(QpError::QueueFull);
        }
        self.rq.push_back(wqe);
        self.offer_credits();
        Ok(())
    }

    /// A packet for this QP arrived (ICRC already verified by the engine).
    pub fn handle_packet(
        &mut self,
        now: Instant,
        pkt: &Packet<'_>,
        meta: &RxMeta,
        env: &mut Env<'_>,
    ) {
        self.counters.rcvd_pkts += 1;
        let op = pkt.opcode();
        let Some(info) = op.info() else {
            self.counters.dropped_pkts += 1;
            return;
        };
        // No congestion control: CNPs are ignored (and are not errors).
        if info.has(flags::CNP) {
            return;
        }
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            self.counters.dropped_pkts += 1;
            return;
        }
        let service_ok = match (self.cfg.qp_type, op.service()) {
            (QpType::Rc, Service::Rc) | (QpType::Uc, Service::Uc) | (QpType::Ud, Service::Ud) => {
                true
            }
            // An XRC initiator takes only responses, a target only requests.
            (QpType::XrcSend, Service::Xrc) => info.has(flags::RESPONSE),
            (QpType::XrcRecv, Service::Xrc) => info.has(flags::REQUEST),
            _ => false,
        };
        // Connected QPs talk to one peer only (rxe's check_addr).
        if !service_ok || (self.cfg.qp_type != QpType::Ud && !self.is_peer(meta)) {
            self.counters.dropped_pkts += 1;
            return;
        }
        if self.state == QpState::Rtr && !self.comm_est {
            self.comm_est = true;
            self.events.push_back(QpEvent::CommEstablished);
        }
        // XRC is RC plus an XRCETH: the requester, completer and
        // responder see the RC opcode (the XRCETH stays in the headers).
        let mut rc;
        let pkt = if op.service() == Service::Xrc {
            rc = *pkt;
            rc.hdr.bth.opcode = op.on_service(Service::Rc);
            &rc
        } else {
            pkt
        };
        if info.has(flags::RESPONSE) {
            self.handle_response(now, pkt, env);
        } else {
            self.handle_request(pkt, meta, env);
        }
        if self.state != QpState::Err {
            self.sq.fix_cursor();
        }
    }

    fn is_peer(&self, meta: &RxMeta) -> bool {
        self.attr
            .dest_addr
            .is_none_or(|d| d.to_canonical() == meta.src.to_canonical())
    }

    /// The deadline from [`Qp::poll_timeout`] passed.
    pub fn handle_timeout(&mut self, now: Instant, _env: &mut Env<'_>) {
        if !self.sending_state() {
            return;
        }
        if self.sq.rnr_deadline.is_some_and(|t| t <= now) {
            self.sq.rnr_deadline = None;
            self.sq.seek(self.sq.comp_psn);
            self.sq.since_ack_req = 0;
        }
        if self.sq.ack_deadline.is_some_and(|t| t <= now) {
            self.sq.ack_deadline = None;
            self.on_ack_timeout(now);
        }
        if self.sq.probe_deadline.is_some_and(|t| t <= now) {
            self.sq.probe_deadline = None;
            self.sq.probe_ok = true;
        }
        if self.state != QpState::Err {
            self.sq.fix_cursor();
        }
    }

    /// The earliest time this QP wants [`Qp::handle_timeout`] called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.sending_state() {
            return None;
        }
        [
            self.sq.ack_deadline,
            self.sq.rnr_deadline,
            self.sq.probe_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn sending_state(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd | QpState::Sqe)
    }

    /// True when [`Qp::poll_transmit`] would produce a packet now.
    pub fn has_transmit(&self) -> bool {
        match self.state {
            QpState::Err | QpState::Rtr => !self.resp.out.is_empty(),
            QpState::Rts | QpState::Sqd | QpState::Sqe => {
                !self.resp.out.is_empty() || self.requester_ready()
            }
            _ => false,
        }
    }

    /// Writes the next packet into `buf` (at least `wire::MAX_PACKET`
    /// bytes) and says where it goes.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        env: &mut Env<'_>,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if buf.len() < MAX_PACKET {
            return None;
        }
        let out = match self.state {
            QpState::Err | QpState::Rtr => self.poll_response(env, buf),
            QpState::Rts | QpState::Sqd | QpState::Sqe => {
                // Alternate so that a long READ response stream and a
                // long request stream share the wire.
                self.turn = !self.turn;
                if self.turn {
                    self.poll_response(env, buf)
                        .or_else(|| self.poll_request(now, env, buf))
                } else {
                    self.poll_request(now, env, buf)
                        .or_else(|| self.poll_response(env, buf))
                }
            }
            _ => None,
        };
        let (len, dst) = out?;
        self.counters.sent_pkts += 1;
        Some(Transmit {
            len,
            dst,
            src_port: self.attr.sport,
        })
    }
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }

    /// Moves the QP to ERR: every outstanding send and receive WQE
    /// completes, in order, with its error or WR_FLUSH_ERR. `own`: the
    /// transport decided this (raises a fatal event), not the user.
    pub(crate) fn enter_error(&mut self, own: bool) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        let qpn = self.cfg.qpn;
        for e in self.sq.entries.drain(..) {
            let status = match (e.done, e.error) {
                (_, Some(s)) => s,
                (true, None) => WcStatus::Success,
                (false, None) => WcStatus::WrFlushErr,
            };
            if status != WcStatus::Success || e.signaled {
                self.cq.push_back(e.completion(status, qpn));
            }
        }
        let psn = self.sq.comp_psn;
        self.sq.set_psn(psn);
        if let Some(h) = self.resp.held.take() {
            self.cq.push_back(h.completion(WcStatus::WrFlushErr, qpn));
        }
        for w in self.rq.drain(..) {
            self.cq
                .push_back(recv_completion(&w, WcStatus::WrFlushErr, qpn));
        }
        self.resp.out.clear();
        self.resp.in_msg = None;
        if own {
            self.events.push_back(QpEvent::Fatal);
        }
        if self.cfg.srq.is_some() {
            self.events.push_back(QpEvent::LastWqeReached);
        }
    }
}

impl super::resp_state::HeldRecv {
    /// Its completion: to the QP's receive CQ, or for a receive taken
    /// from an XRC SRQ to that SRQ's.
    pub(crate) fn completion(&self, status: WcStatus, qpn: u32) -> Completion {
        let mut c = recv_completion(&self.wqe, status, qpn);
        if let Some(n) = self.xrc_srq {
            c.side = CqSide::Srq(n);
        }
        c
    }
}

/// A receive completion with only the essentials set. A successful one
/// says IBV_WC_GRH whatever the QP type, as rxe's do (every RoCE packet
/// has a network header; only UD's lands in the buffer).
pub(crate) fn recv_completion(w: &RecvWqe, status: WcStatus, qpn: u32) -> Completion {
    let mut c = Completion::new(CqSide::Recv, w.wr_id, status, WcOpcode::Recv, qpn);
    if status == WcStatus::Success {
        c.wc_flags = wc_flags::GRH;
    }
    c
}
