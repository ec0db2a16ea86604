//! The sans-IO connection manager of one rxu device: the kernel's `ib_cm`
//! (comm IDs, REQ/REP/RTU/REJ/MRA/DREQ/DREP/SIDR, retransmissions,
//! TimeWait, stale and duplicate detection) and `rdma_cm` (ids, port
//! spaces, listeners, events, QP attributes) in one state machine.
//!
//! It owns no socket, thread or clock: the daemon feeds it commands
//! (`bind`, `connect`, ...), received MADs (`handle_mad`) and the time
//! (`handle_timeout` when `poll_timeout` is due), and drains MADs to send
//! (`poll_transmit`) and events for the ids' owners (`poll_event`).
//!
//! Two layers, as in the kernel: [`ids::Id`] is the rdma_cm id the client
//! sees; [`conn::Conn`] is the IB CM connection (keyed by local comm ID)
//! that may outlive its id through TimeWait.

mod active;
mod conn;
mod counters;
mod destroy;
mod disconnect;
mod dispatch;
mod error;
mod events;
mod ids;
mod listen;
mod mads;
mod passive;
mod ports;
mod qp_attr;
mod reject;
mod rng;
mod route;
mod sidr;
mod status;
mod timers;
mod timing;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

use rxu_abi::proto::cm::CmEventRecord;

use crate::wire::{CmMad, MAD_LEN};

pub use counters::CmCounters;
pub use error::CmError;
pub use route::sgid_index;
pub use status::IdStatus;

/// The daemon's handle for whoever owns an id (its session and channel).
pub type Owner = u64;

/// CM timing parameters (IBA time exponents). `Default` = the kernel's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmTiming {
    /// `CMA_CM_RESPONSE_TIMEOUT` (20: 4096 ms).
    pub cm_response_timeout: u8,
    /// `CMA_MAX_CM_RETRIES` (15).
    pub max_cm_retries: u8,
    /// `CMA_IBOE_PACKET_LIFETIME` (18: 1024 ms).
    pub packet_life_time: u8,
    /// The device's `local_ca_ack_delay` (rxe: 15).
    pub local_ack_delay: u8,
}

impl Default for CmTiming {
    fn default() -> CmTiming {
        CmTiming {
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 18,
            local_ack_delay: 15,
        }
    }
}

/// What the engine needs to know of its device.
#[derive(Clone, Debug)]
pub struct CmConfig {
    /// The device's node GUID (REQ/REP Local CA GUID, QUERY_ROUTE).
    pub node_guid: u64,
    /// The IP addresses the device serves (its GIDs).
    pub local_addrs: Vec<IpAddr>,
    /// IB MTU enum (1 = 256 .. 5 = 4096) of the device.
    pub mtu: u8,
    pub timing: CmTiming,
    /// Ephemeral ports (inclusive), like `ip_local_port_range`.
    pub port_range: (u16, u16),
    /// Seeds comm IDs, starting PSNs, TIDs and ephemeral ports.
    pub seed: u64,
}

/// Where a received MAD came from (the IP header of its packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadRx {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// A MAD to send to QP1 of `dst`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MadTx {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dst_qpn: u32,
    pub mad: [u8; MAD_LEN],
}

/// A MAD to send, as a value (the engine's inner transmit queue).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MadOut {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub mad: CmMad,
}

/// The connection manager of one device.
pub struct Cm {
    cfg: CmConfig,
    rng: rng::Rng,
    /// High half of every TID this engine starts (the kernel's `hi_tid`).
    hi_tid: u32,
    ids: BTreeMap<u32, ids::Id>,
    /// (owner, id) of every id: what one owner holds, without a scan.
    by_owner: BTreeSet<(Owner, u32)>,
    next_id: u32,
    conns: BTreeMap<u32, conn::Conn>,
    /// (remote CA GUID, remote comm ID) -> local comm ID: duplicate REQs.
    remote_ids: HashMap<(u64, u32), u32>,
    /// (remote CA GUID, remote QPN) -> local comm ID: stale connections.
    remote_qps: HashMap<(u64, u32), u32>,
    /// Deadlines of conns' timers, (when, local comm ID).
    timers: BTreeSet<(Instant, u32)>,
    ports: ports::Ports,
    tx: VecDeque<MadOut>,
    events: VecDeque<(Owner, CmEventRecord)>,
    counters: CmCounters,
}

impl Cm {
    pub fn new(cfg: CmConfig) -> Cm {
        let mut rng = rng::Rng::new(cfg.seed);
        let hi_tid = rng.next_u32();
        Cm {
            cfg,
            rng,
            hi_tid,
            ids: BTreeMap::new(),
            by_owner: BTreeSet::new(),
            next_id: 1,
            conns: BTreeMap::new(),
            remote_ids: HashMap::new(),
            remote_qps: HashMap::new(),
            timers: BTreeSet::new(),
            ports: ports::Ports::default(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    /// The next event for an id's owner (`tag` is left 0).
    pub fn poll_event(&mut self) -> Option<(Owner, CmEventRecord)> {
        self.events.pop_front()
    }

    /// The next MAD to send, as a value.
    pub fn poll_transmit_msg(&mut self) -> Option<MadOut> {
        self.tx.pop_front()
    }

    pub fn counters(&self) -> &CmCounters {
        &self.counters
    }

    /// How many ids and IB CM connections (TimeWait included) exist: for
    /// leak checks.
    pub fn object_counts(&self) -> (usize, usize) {
        debug_assert_eq!(self.by_owner.len(), self.ids.len(), "owner index");
        (self.ids.len(), self.conns.len())
    }

    fn timing(&self) -> CmTiming {
        self.cfg.timing
    }

    /// Queues an event for the live id `id` (nothing for a destroyed id).
    fn push_event(&mut self, id: u32, mut rec: CmEventRecord) {
        if let Some(i) = self.ids.get(&id) {
            rec.id = id;
            self.events.push_back((i.owner, rec));
        }
    }

    /// The address vector of `path` on this device (its source GID's index).
    fn ah_of(&self, path: &route::Path) -> rxu_abi::proto::AhAttr {
        path.ah(route::sgid_index(&self.cfg.local_addrs, &path.sgid))
    }

    fn push_tx(&mut self, src: IpAddr, dst: IpAddr, mad: CmMad) {
        self.counters.count_sent(&mad.msg);
        self.tx.push_back(MadOut { src, dst, mad });
    }
}
