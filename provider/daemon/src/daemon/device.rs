//! The device as the daemon holds it: the engine (with the registered
//! memory inside), the client sessions and their objects, counters.
//! No sockets or loops here: requests come in as values, so all of this
//! is testable in-process.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::os::fd::OwnedFd;

use transport::engine::{Engine, EngineConfig, EngineError};
use transport::qp::{Completion, Mtu, QpCounters};

use crate::mem::DeviceMemory;
use crate::verbs::{self, DeviceFacts};
use rxu_abi::proto::{DeviceAttr, PortAttr, Response};

use super::log::{debug, info};
use super::session::Session;

/// What one request produced: the response, the fds that go with it,
/// and whether the connection is to be closed after sending it.
pub struct Reply {
    pub resp: Response,
    pub fds: Vec<OwnedFd>,
    pub close: bool,
}

impl Reply {
    pub fn ok(resp: Response) -> Reply {
        Reply {
            resp,
            fds: Vec::new(),
            close: false,
        }
    }

    pub fn with_fds(resp: Response, fds: Vec<OwnedFd>) -> Reply {
        Reply {
            resp,
            fds,
            close: false,
        }
    }
}

/// A refused request: errno (as rdma-core users know it) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub errno: i32,
    pub msg: String,
}

pub type Handled = Result<Reply, Refused>;

pub fn refuse<T>(errno: i32, msg: impl Into<String>) -> Result<T, Refused> {
    Err(Refused {
        errno,
        msg: msg.into(),
    })
}

/// Daemon-level counters (the engine and memory keep their own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DaemonCounters {
    pub clients_accepted: u64,
    pub requests: u64,
    pub requests_refused: u64,
    pub wqes_posted: u64,
    pub bad_wqes: u64,
    pub cqes_delivered: u64,
    pub cqes_dropped: u64,
    pub cq_overruns: u64,
    pub channel_events: u64,
    pub async_events: u64,
    pub async_events_dropped: u64,
    pub sleeps: u64,
    pub doorbells: u64,
    /// Bytes of every successful registration since start.
    pub mr_bytes_registered: u64,
    /// Regions released (DeregMr, or with their client).
    pub mr_deregistrations: u64,
    /// Port state changes and GID table changes (netdev events).
    pub port_changes: u64,
    pub gid_changes: u64,
}

pub struct Device {
    pub engine: Engine<DeviceMemory>,
    pub facts: DeviceFacts,
    pub dev_attr: DeviceAttr,
    pub port_attr: PortAttr,
    /// Active MTU of port 1 (largest path MTU; UD payload limit).
    pub port_mtu: Mtu,
    /// The address the engine is bound to (the only GID it can serve,
    /// unless `all_addrs`).
    pub served: IpAddr,
    /// Serving every address of the netdev (engine on the wildcards).
    pub all_addrs: bool,
    /// The netdev's interface index (0 until first read).
    pub ifindex: u32,
    /// Where the device tree is, for port changes (None: not written).
    pub node: Option<super::port::NodeLoc>,
    pub sessions: BTreeMap<u32, Session>,
    /// QP number -> owning session.
    pub qp_owner: HashMap<u32, u32>,
    pub counters: DaemonCounters,
    /// Transport counters of QPs already destroyed (device totals are
    /// these plus the live QPs').
    pub retired_qps: QpCounters,
    /// A Shutdown request was accepted: the loop stops after replying.
    pub shutdown: bool,
    /// Accept the daemon's own /proc/self/mem as a client's memory (only
    /// in-process tests, where the test plays both sides).
    pub allow_own_mem: bool,
    next_client: u32,
    next_pd: u32,
    next_cq: u32,
    /// Scratch space for one ring slot and a batch of completions.
    pub(super) slot_buf: Vec<u8>,
    pub(super) comps: Vec<Completion>,
}

impl Device {
    /// Binds the engine and computes the device's attributes.
    pub fn new(facts: DeviceFacts, cfg: EngineConfig) -> Result<Device, EngineError> {
        let engine = Engine::new(cfg, DeviceMemory::new())?;
        let dev_attr = verbs::device_attr(&facts);
        let port_attr = verbs::port_attr(&facts);
        let port_mtu = Mtu::from_enum(port_attr.active_mtu)
            .or(Mtu::for_netdev_mtu(facts.netdev_mtu as usize))
            .unwrap_or(Mtu::M256);
        let served = engine.local_addr().ip();
        Ok(Device {
            served,
            all_addrs: false,
            ifindex: 0,
            node: None,
            engine,
            facts,
            dev_attr,
            port_attr,
            port_mtu,
            sessions: BTreeMap::new(),
            qp_owner: HashMap::new(),
            counters: DaemonCounters::default(),
            retired_qps: QpCounters::default(),
            shutdown: false,
            allow_own_mem: false,
            next_client: 1,
            next_pd: 1,
            next_cq: 1,
            slot_buf: vec![0u8; rxu_abi::ring::layout::MAX_SLOT_SIZE as usize],
            comps: Vec::new(),
        })
    }

    /// A client connected; returns its session id.
    pub fn connect(&mut self, pid: u32) -> u32 {
        let id = loop {
            let id = self.next_client;
            self.next_client = self.next_client.wrapping_add(1).max(1);
            if !self.sessions.contains_key(&id) {
                break id;
            }
        };
        self.sessions.insert(id, Session::new(id, pid));
        self.counters.clients_accepted += 1;
        debug!("client {id} (pid {pid}) connected");
        id
    }

    /// A client's connection closed: destroy everything it owned. Its
    /// QPs vanish from the wire, so their peers (local or remote) see
    /// their retries run out, not a hang.
    pub fn disconnect(&mut self, id: u32) {
        let Some(s) = self.sessions.remove(&id) else {
            return;
        };
        let (nq, nc, ns, nm) = (s.qps.len(), s.cqs.len(), s.srqs.len(), s.mrs.len());
        for &qpn in s.qps.keys() {
            self.retire_qp(qpn);
        }
        self.counters.mr_deregistrations += nm as u64;
        for srq in s.srqs.values() {
            let _ = self.engine.destroy_srq(srq.id);
        }
        for cq in s.cqs.values() {
            self.drain_engine_cq(cq.id);
        }
        if s.ready && !s.admin {
            self.engine.memory_mut().remove_client(id);
        }
        if s.ready && !s.admin {
            info!(
                "client {id} (pid {}) gone: destroyed {nq} QPs, {ns} SRQs, {nc} CQs, {nm} MRs, {} PDs",
                s.pid,
                s.pds.len()
            );
        } else {
            debug!("client {id} (pid {}) gone", s.pid);
        }
    }

    /// Destroys a QP in the engine, keeping its counters in the totals.
    pub(super) fn retire_qp(&mut self, qpn: u32) {
        if let Some(q) = self.engine.qp(qpn) {
            add_qp_counters(&mut self.retired_qps, q.counters());
        }
        let _ = self.engine.destroy_qp(qpn);
        self.qp_owner.remove(&qpn);
    }

    /// Transport counters summed over every QP the device ever had.
    pub fn qp_totals(&self) -> QpCounters {
        let mut t = self.retired_qps;
        for &qpn in self.qp_owner.keys() {
            if let Some(q) = self.engine.qp(qpn) {
                add_qp_counters(&mut t, q.counters());
            }
        }
        t
    }

    /// Throws away completions the engine still holds for a CQ.
    pub(super) fn drain_engine_cq(&mut self, cq: u32) {
        let mut buf = std::mem::take(&mut self.comps);
        buf.resize(64, EMPTY_COMPLETION);
        // Bounded: each round removes up to 64 of a finite queue.
        for _ in 0..=self.engine.cq_len(cq) / 64 {
            if self.engine.poll_cq_into(cq, &mut buf) == 0 {
                break;
            }
        }
        self.comps = buf;
    }

    pub(super) fn alloc_pd(&mut self) -> u32 {
        // Device-wide unique; skips numbers still in use after a wrap.
        loop {
            let pd = self.next_pd;
            self.next_pd = self.next_pd.wrapping_add(1).max(1);
            if !self.sessions.values().any(|s| s.pds.contains(&pd)) {
                return pd;
            }
        }
    }

    pub(super) fn alloc_cq_id(&mut self) -> u32 {
        loop {
            let id = self.next_cq;
            self.next_cq = self.next_cq.wrapping_add(1).max(1);
            if !self
                .sessions
                .values()
                .any(|s| s.cqs.values().any(|c| c.id == id))
            {
                return id;
            }
        }
    }

    /// Objects of one kind across all clients (for the device limits).
    pub(super) fn count(&self, f: impl Fn(&Session) -> usize) -> usize {
        self.sessions.values().map(f).sum()
    }
}

fn add_qp_counters(t: &mut QpCounters, c: &QpCounters) {
    t.sent_pkts += c.sent_pkts;
    t.rcvd_pkts += c.rcvd_pkts;
    t.duplicate_request += c.duplicate_request;
    t.out_of_seq_request += c.out_of_seq_request;
    t.rcvd_rnr_err += c.rcvd_rnr_err;
    t.send_rnr_err += c.send_rnr_err;
    t.rcvd_seq_err += c.rcvd_seq_err;
    t.retry_exceeded_err += c.retry_exceeded_err;
    t.rnr_nak_retry_err += c.rnr_nak_retry_err;
    t.completer_retry_err += c.completer_retry_err;
    t.retransmitted_pkts += c.retransmitted_pkts;
    t.local_ack_timeout_err += c.local_ack_timeout_err;
    t.dropped_pkts += c.dropped_pkts;
    t.qkey_violations += c.qkey_violations;
}

pub(super) const EMPTY_COMPLETION: Completion = Completion {
    side: transport::qp::CqSide::Send,
    wr_id: 0,
    status: transport::qp::WcStatus::Success,
    opcode: transport::qp::WcOpcode::Send,
    qp_num: 0,
    byte_len: 0,
    wc_flags: 0,
    imm: 0,
    invalidated_rkey: 0,
    src_qp: 0,
    src_addr: None,
    vendor_err: 0,
};
