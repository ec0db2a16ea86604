//! IB CM connections (the kernel's `cm_id_private`): keyed by local comm
//! ID, they carry what was negotiated, the message a timer resends, and
//! outlive their rdma_cm id through TimeWait.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use rxu_abi::proto::QpType;

use super::timing::conv;
use super::Cm;
use crate::wire::CmMad;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// Active: REQ sent, waiting for REP (an MRA may have extended it).
    ReqSent,
    /// Active: REP received and reported, RTU not sent yet.
    RepRcvd,
    /// Passive: REQ reported as CONNECT_REQUEST, no answer yet.
    ReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    Established,
    DreqSent,
    DreqRcvd,
    TimeWait,
    SidrReqSent,
    SidrReqRcvd,
}

impl ConnState {
    pub fn name(self) -> &'static str {
        match self {
            ConnState::ReqSent => "req_sent",
            ConnState::RepRcvd => "rep_rcvd",
            ConnState::ReqRcvd => "req_rcvd",
            ConnState::RepSent => "rep_sent",
            ConnState::Established => "established",
            ConnState::DreqSent => "dreq_sent",
            ConnState::DreqRcvd => "dreq_rcvd",
            ConnState::TimeWait => "timewait",
            ConnState::SidrReqSent => "sidr_req_sent",
            ConnState::SidrReqRcvd => "sidr_req_rcvd",
        }
    }
}

pub(crate) struct Conn {
    /// The rdma_cm id; None once it was destroyed (TimeWait goes on).
    pub id: Option<u32>,
    /// Passive: the listener the REQ came to (its backlog counts us).
    pub parent: Option<u32>,
    pub state: ConnState,
    pub qp_type: QpType,
    pub local_ip: IpAddr,
    pub peer_ip: IpAddr,
    /// TID of the message exchange (REQ's or SIDR_REQ's; DREQ's own).
    pub tid: u64,
    pub remote_comm_id: u32,
    pub remote_guid: u64,
    pub remote_qpn: u32,
    pub local_qpn: u32,
    /// The peer's starting PSN (RTS sq_psn).
    pub remote_psn: u32,
    pub path_mtu: u8,
    /// QP ACK timeout (`av.timeout`); also the TimeWait length.
    pub av_timeout: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// Retransmission interval and budget of this side's requests.
    pub timeout: Duration,
    pub max_cm_retries: u8,
    /// What the timer resends, and how many more times.
    pub last: Option<CmMad>,
    pub retries_left: u8,
    pub deadline: Option<Instant>,
    /// An MRA extended the current wait (honoured once, as the kernel).
    pub mra_rcvd: bool,
    /// SIDR: the service ID asked for.
    pub service_id: u64,
    /// In `remote_ids` / `remote_qps`.
    pub remote_inserted: bool,
}

impl Conn {
    pub fn new(state: ConnState, qp_type: QpType, local_ip: IpAddr, peer_ip: IpAddr) -> Conn {
        Conn {
            id: None,
            parent: None,
            state,
            qp_type,
            local_ip,
            peer_ip,
            tid: 0,
            remote_comm_id: 0,
            remote_guid: 0,
            remote_qpn: 0,
            local_qpn: 0,
            remote_psn: 0,
            path_mtu: 0,
            av_timeout: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            timeout: Duration::ZERO,
            max_cm_retries: 0,
            last: None,
            retries_left: 0,
            deadline: None,
            mra_rcvd: false,
            service_id: 0,
            remote_inserted: false,
        }
    }
}

impl Cm {
    /// A fresh local comm ID (random, non-zero, unused).
    pub(crate) fn alloc_comm_id(&mut self) -> u32 {
        loop {
            let c = self.rng.next_u32();
            if c != 0 && !self.conns.contains_key(&c) {
                return c;
            }
        }
    }

    /// A new TID for a request this side starts (`cm_form_tid`).
    pub(crate) fn new_tid(&self, comm: u32) -> u64 {
        ((self.hi_tid as u64) << 32) | comm as u64
    }

    pub(crate) fn conn_of(&self, id: u32) -> Option<(u32, &Conn)> {
        let c = self.ids.get(&id)?.conn?;
        self.conns.get(&c).map(|x| (c, x))
    }

    pub(crate) fn arm(&mut self, comm: u32, at: Instant) {
        self.disarm(comm);
        if let Some(c) = self.conns.get_mut(&comm) {
            c.deadline = Some(at);
            self.timers.insert((at, comm));
        }
    }

    pub(crate) fn disarm(&mut self, comm: u32) {
        if let Some(c) = self.conns.get_mut(&comm) {
            if let Some(d) = c.deadline.take() {
                self.timers.remove(&(d, comm));
            }
        }
    }

    /// Sends a message of the conn once.
    pub(crate) fn conn_send(&mut self, comm: u32, mad: CmMad) {
        if let Some(c) = self.conns.get(&comm) {
            let (src, dst) = (c.local_ip, c.peer_ip);
            self.push_tx(src, dst, mad);
        }
    }

    /// Sends a request of the conn and keeps resending it every
    /// `c.timeout`, `c.max_cm_retries` times (the MAD layer's retries).
    pub(crate) fn conn_send_retrying(&mut self, now: Instant, comm: u32, mad: CmMad) {
        self.conn_send(comm, mad.clone());
        let Some(c) = self.conns.get(&comm) else {
            return;
        };
        let at = now + c.timeout;
        self.arm(comm, at);
        if let Some(c) = self.conns.get_mut(&comm) {
            c.retries_left = c.max_cm_retries;
            c.last = Some(mad);
        }
    }

    pub(crate) fn insert_remote(&mut self, comm: u32) {
        if let Some(c) = self.conns.get_mut(&comm) {
            c.remote_inserted = true;
            self.remote_ids
                .insert((c.remote_guid, c.remote_comm_id), comm);
            self.remote_qps.insert((c.remote_guid, c.remote_qpn), comm);
        }
    }

    fn remove_remote(&mut self, comm: u32) {
        if let Some(c) = self.conns.get_mut(&comm) {
            if c.remote_inserted {
                c.remote_inserted = false;
                let (ki, kq) = (
                    (c.remote_guid, c.remote_comm_id),
                    (c.remote_guid, c.remote_qpn),
                );
                if self.remote_ids.get(&ki) == Some(&comm) {
                    self.remote_ids.remove(&ki);
                }
                if self.remote_qps.get(&kq) == Some(&comm) {
                    self.remote_qps.remove(&kq);
                }
            }
        }
    }

    /// TimeWait for `conv(av_timeout)`: nothing more is sent. The peer's
    /// (GUID, QPN) and (GUID, comm ID) are forgotten at once, as the
    /// kernel's cm_enter_timewait does: a REQ from that QP now is a new
    /// connection, not a stale one.
    pub(crate) fn enter_timewait(&mut self, now: Instant, comm: u32) {
        self.remove_remote(comm);
        let Some(c) = self.conns.get_mut(&comm) else {
            return;
        };
        c.state = ConnState::TimeWait;
        c.last = None;
        let at = now + conv(c.av_timeout);
        self.arm(comm, at);
    }

    /// The conn is over (the kernel's IDLE): forgotten, its id keeps its
    /// rdma_cm state without an IB CM connection.
    pub(crate) fn free_conn(&mut self, comm: u32) {
        self.disarm(comm);
        self.remove_remote(comm);
        if let Some(c) = self.conns.remove(&comm) {
            if let Some(i) = c.id.and_then(|i| self.ids.get_mut(&i)) {
                if i.conn == Some(comm) {
                    i.conn = None;
                }
            }
        }
    }
}
