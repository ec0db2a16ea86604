//! One client connection and everything it owns.
//!
//! Handles are the client's names for its objects: PD handles are the
//! device-wide PD numbers (so the memory layer's PD check also separates
//! clients), QP handles are QP numbers, the rest are numbers drawn per
//! session. Every lookup goes through the session's own tables, so a
//! client can never name another client's object.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::fd::{AsFd, OwnedFd};

use rxu_abi::proto::abi::CqeBytes;
use rxu_abi::proto::{QpAttr, QpCap, QpType};
use rxu_abi::ring::{Consumer, Doorbell, Producer};

use super::idle::Idle;
use super::sys;

/// `enum ibv_event_type` values (the shared vocabulary's).
pub use transport::verbs::event_type as event;

pub struct Mr {
    pub pd: u32,
    pub lkey: u32,
    pub rkey: u32,
    pub len: u64,
}

/// A memory window; its state lives in the memory layer, under `rkey`'s
/// index (the low 8 bits change with binds).
pub struct Mw {
    pub pd: u32,
    pub rkey: u32,
}

pub struct Cq {
    /// Device-wide number: the CQ tag the endpoint's completions carry.
    pub id: u32,
    /// Capacity granted to the client (the ring holds `cqe + 1` or more).
    pub cqe: u32,
    pub user_handle: u64,
    pub ring: Producer,
    /// Completions waiting for room in the ring, oldest first.
    pub backlog: VecDeque<CqeBytes>,
    /// Write end of the completion channel socket.
    pub channel: Option<OwnedFd>,
    /// CQ_ERR was raised for the current overrun.
    pub overrun: bool,
    /// A completion was lost (ring and backlog full) since the last
    /// delivery pass.
    pub lost: bool,
    /// Completions posted since the last delivery pass, and whether one
    /// of those that reached the ring may be solicited (for the channel).
    pub posted: usize,
    pub wake: bool,
    /// Entries carry their completion times (created with timestamps).
    pub timestamps: bool,
}

pub struct Srq {
    /// The endpoint's SRQ id.
    pub id: u32,
    pub pd: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    /// Armed limit (0 = not armed).
    pub limit: u32,
    /// The endpoint's count of WQEs taken from it, when the limit was
    /// last looked at: the event needs a WQE taken since.
    pub taken_seen: u64,
    /// Receives of it whose completions were posted.
    pub used: u64,
    /// Taken receives whose ring slots were given back: the most of
    /// `used` and the endpoint's taken count when last looked at (each
    /// completion is of a taken receive, so never more than taken).
    pub released: u64,
    pub user_handle: u64,
    pub ring: Consumer,
    /// The ring's indices were corrupt: no longer read.
    pub broken: bool,
    /// An XRC SRQ: its domain and its CQ (handle).
    pub xrc: Option<SrqXrc>,
    /// Whether its ring is parked (`rq`), and when it last had work.
    pub idle: Idle,
}

/// An SRQ's receives keep their ring slots from when the data path takes
/// them into the endpoint until a message uses them (see the ring's read
/// ahead): the client's room is max_wr less what it has outstanding, as
/// in rxe's SRQ queue. A slot goes back when the receive's completion is
/// posted (before the client can see it) or when the endpoint's taken
/// count shows it used (a receive that ends without a completion).
impl Srq {
    /// A receive of this SRQ completed.
    pub fn receive_used(&mut self) {
        self.used += 1;
        self.taken_up_to(self.used);
    }

    /// The endpoint has taken `taken` receives of this SRQ so far.
    pub fn taken_up_to(&mut self, taken: u64) {
        if taken > self.released {
            let n = u32::try_from(taken - self.released).unwrap_or(u32::MAX);
            self.ring.release_read(n);
            self.released = taken;
        }
    }
}

/// What an XRC SRQ has besides what every SRQ has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqXrc {
    pub xrcd: u32,
    pub cq: u32,
    /// The number XRC initiators name it by (the endpoint's SRQ id).
    pub srqn: u32,
}

pub struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: u32,
    /// CQ and SRQ handles (of this session).
    pub send_cq: u32,
    pub recv_cq: u32,
    pub srq: Option<u32>,
    pub cap: QpCap,
    pub sq_sig_all: bool,
    pub user_handle: u64,
    pub sq: Consumer,
    pub rq: Option<Consumer>,
    /// Attributes as last set by the client, for QueryQp.
    pub attr: QpAttr,
    /// A ring index was corrupt: the QP went to ERR and its rings are no
    /// longer read (until a reset).
    pub broken: bool,
    /// An XRC target QP: its domain.
    pub xrcd: Option<u32>,
    /// Which of its rings are parked, and when it last had work.
    pub idle: Idle,
}

pub struct Session {
    pub id: u32,
    /// From SO_PEERCRED, not from what the client claims.
    pub pid: u32,
    pub admin: bool,
    /// The client runs as another user than the daemon (and not as root):
    /// served as a verbs client on an `--all-users` device, never obeyed
    /// as an admin (SO_PEERCRED's uid).
    pub other_user: bool,
    /// The client process had CAP_NET_RAW in the daemon's user namespace
    /// when it connected: it may set controlled Q_Keys (verbs rules).
    pub net_raw: bool,
    /// ... and CAP_NET_BIND_SERVICE: it may bind rdma_cm ports below 1024.
    pub net_bind_service: bool,
    /// Hello accepted.
    pub ready: bool,
    /// Opened with CmHello: an rdma_cm client (the ucma emulator).
    pub cm_only: bool,
    /// Where async events go (16-byte records).
    pub async_sock: Option<OwnedFd>,
    pub bell: Option<Doorbell>,
    pub pds: BTreeSet<u32>,
    /// PDs of other sessions of the group this one imported (`share`).
    pub shared_pds: BTreeSet<u32>,
    /// The session whose context this one imported, or its own id: the
    /// sessions of a group share PDs and MRs (`share`).
    pub group: u32,
    /// A copy of the application's cmd_fd, which names the context to
    /// `ibv_import_device` (`share`).
    pub cmd_file: Option<OwnedFd>,
    pub mrs: BTreeMap<u32, Mr>,
    pub mws: BTreeMap<u32, Mw>,
    pub cqs: BTreeMap<u32, Cq>,
    pub srqs: BTreeMap<u32, Srq>,
    pub qps: BTreeMap<u32, Qp>,
    next_handle: u32,
    /// Events that could not be written (socket full or closed).
    pub events_dropped: u64,
    /// A reply being sent in pieces (`admin::paged`).
    pub pending_reply: Option<Vec<u8>>,
}

impl Session {
    pub fn new(id: u32, pid: u32) -> Session {
        Session {
            id,
            pid,
            admin: false,
            other_user: false,
            net_raw: false,
            net_bind_service: false,
            ready: false,
            cm_only: false,
            async_sock: None,
            bell: None,
            pds: BTreeSet::new(),
            shared_pds: BTreeSet::new(),
            group: id,
            cmd_file: None,
            mrs: BTreeMap::new(),
            mws: BTreeMap::new(),
            cqs: BTreeMap::new(),
            srqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            next_handle: 1,
            events_dropped: 0,
            pending_reply: None,
        }
    }

    /// A fresh handle for an MR, MW, CQ or SRQ (unique within the session).
    pub fn new_handle(&mut self) -> u32 {
        let h = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        h
    }

    /// Whether objects of this session may be created in PD `pd`: its own,
    /// or one it imported.
    pub fn may_use_pd(&self, pd: u32) -> bool {
        self.pds.contains(&pd) || self.shared_pds.contains(&pd)
    }

    pub fn pd_in_use(&self, pd: u32) -> bool {
        self.mrs.values().any(|m| m.pd == pd)
            || self.mws.values().any(|m| m.pd == pd)
            || self.srqs.values().any(|s| s.pd == pd)
            || self.qps.values().any(|q| q.pd == pd)
    }

    pub fn cq_in_use(&self, cq: u32) -> bool {
        self.qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
            || self
                .srqs
                .values()
                .any(|s| s.xrc.is_some_and(|x| x.cq == cq))
    }

    /// Whether XRC SRQs or target QPs of this session are in domain `x`.
    pub fn xrcd_in_use(&self, x: u32) -> bool {
        self.srqs
            .values()
            .any(|s| s.xrc.is_some_and(|s| s.xrcd == x))
            || self.qps.values().any(|q| q.xrcd == Some(x))
    }

    pub fn srq_in_use(&self, srq: u32) -> bool {
        self.qps.values().any(|q| q.srq == Some(srq))
    }

    /// Writes an async event record `{u64 element, u32 type, u32 0}`
    /// (native endian, as `struct ib_uverbs_async_event_desc`).
    pub fn send_event(&mut self, element: u64, event_type: u32) -> bool {
        let Some(s) = &self.async_sock else {
            return false;
        };
        let rec = event_record(element, event_type);
        let ok = sys::send_record(s.as_fd(), &rec);
        if !ok {
            self.events_dropped += 1;
        }
        ok
    }
}

pub fn event_record(element: u64, event_type: u32) -> [u8; 16] {
    let mut rec = [0u8; 16];
    rec[..8].copy_from_slice(&element.to_ne_bytes());
    rec[8..12].copy_from_slice(&event_type.to_ne_bytes());
    rec
}
