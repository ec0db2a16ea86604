//! The queue pair: public face of the requester, responder and completer.
//!
//! CONTRACT (shared with the engine and, later, the provider). Bodies are
//! filled in by the QP state-machine work; signatures change only by
//! agreement.

use super::memory::Memory;
use super::types::*;
use crate::wire::Packet;
use crate::Psn;
use std::net::IpAddr;
use std::time::Instant;

/// Fixed at creation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpConfig {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: u32,
    /// Receive WQEs come from this SRQ instead of the QP's own RQ.
    pub srq: Option<u32>,
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

/// What a QP may touch while it runs: memory, and the SRQ it is bound to.
pub struct Env<'a> {
    pub mem: &'a mut dyn Memory,
    pub srq: Option<&'a mut dyn RecvSource>,
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

/// Misuse of the QP API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QpError {
    #[error("operation not allowed in QP state {0:?}")]
    InvalidState(QpState),
    #[error("work queue full")]
    QueueFull,
    #[error("work request not valid for this QP: {0}")]
    InvalidWr(&'static str),
    #[error("attribute not valid: {0}")]
    InvalidAttr(&'static str),
}

/// Per-QP counters, named like rxe's hw_counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounters {
    pub sent_pkts: u64,
    pub rcvd_pkts: u64,
    pub duplicate_request: u64,
    pub out_of_seq_request: u64,
    pub rcvd_rnr_err: u64,
    pub send_rnr_err: u64,
    pub rcvd_seq_err: u64,
    pub retry_exceeded_err: u64,
    pub rnr_nak_retry_err: u64,
    pub completer_retry_err: u64,
    pub retransmitted_pkts: u64,
    pub local_ack_timeout_err: u64,
    pub dropped_pkts: u64,
}

/// A queue pair.
pub struct Qp {
    cfg: QpConfig,
}

impl Qp {
    pub fn new(cfg: QpConfig) -> Qp {
        Qp { cfg }
    }
    pub fn qpn(&self) -> u32 {
        self.cfg.qpn
    }
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }
    pub fn state(&self) -> QpState {
        unimplemented!("QP state machine")
    }
    pub fn counters(&self) -> &QpCounters {
        unimplemented!("QP state machine")
    }
    pub fn modify(&mut self, _attr: &QpAttr) -> Result<(), QpError> {
        unimplemented!("QP state machine")
    }
    pub fn post_send(&mut self, _wqe: SendWqe) -> Result<(), QpError> {
        unimplemented!("QP state machine")
    }
    pub fn post_recv(&mut self, _wqe: RecvWqe) -> Result<(), QpError> {
        unimplemented!("QP state machine")
    }
    /// A packet for this QP arrived (ICRC already verified by the engine).
    pub fn handle_packet(
        &mut self,
        _now: Instant,
        _pkt: &Packet<'_>,
        _meta: &RxMeta,
        _env: &mut Env<'_>,
    ) {
        unimplemented!("QP state machine")
    }
    /// The deadline from [`Qp::poll_timeout`] passed.
    pub fn handle_timeout(&mut self, _now: Instant, _env: &mut Env<'_>) {
        unimplemented!("QP state machine")
    }
    /// The earliest time this QP wants [`Qp::handle_timeout`] called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        unimplemented!("QP state machine")
    }
    /// True when [`Qp::poll_transmit`] would produce a packet now.
    pub fn has_transmit(&self) -> bool {
        unimplemented!("QP state machine")
    }
    /// Writes the next packet into `buf` (at least `wire::MAX_PACKET`
    /// bytes) and says where it goes.
    pub fn poll_transmit(
        &mut self,
        _now: Instant,
        _env: &mut Env<'_>,
        _buf: &mut [u8],
    ) -> Option<Transmit> {
        unimplemented!("QP state machine")
    }
    pub fn poll_completion(&mut self) -> Option<Completion> {
        unimplemented!("QP state machine")
    }
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        unimplemented!("QP state machine")
    }
}
