//! The device as the daemon holds it, in owned parts: the objects of its
//! clients ([`Objects`]), its port ([`Port`]), the transport's endpoint
//! (with the registered memory inside) and UDP driver, and its counters.
//! A request handler is a function of the parts it needs (see `handle`);
//! the device only sequences the work that spans several.
//! No loop here: requests come in as values and `Device::pump` runs one
//! turn of the data path, so all of this is testable in-process.

use transport::engine::{Endpoint, EngineConfig, EngineCounters, EngineError, UdpDriver};

use crate::mem::DeviceMemory;
use crate::verbs::{self, DeviceFacts};
use rxu_abi::proto::Response;

use super::admin;
use super::cm::CmService;
use super::counters::DaemonCounters;
use super::log::{debug, info};
use super::objects::Objects;
use super::port::{Port, PortChange, PortView};
use super::quota::{Limits, Quota};
use super::reply::Refused;
use super::session::event;
use super::share;
use super::sys;
use rxu_cm::engine::CmTiming;

/// How many QPs, CQs and SRQs must have gone since the peak (and at least
/// half of them) for rxud to shrink its tables and trim the heap (a few
/// milliseconds with a large heap, so not after every destroy).
const TRIM_AFTER_OBJECTS: usize = 256;

/// Object counts across the device's tables (`Device::audit`): with no
/// session left, every one is 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    pub sessions: usize,
    pub session_qps: usize,
    pub session_cqs: usize,
    pub session_srqs: usize,
    pub session_mrs: usize,
    pub session_pds: usize,
    pub endpoint_qps: usize,
    pub endpoint_srqs: usize,
    pub memory_clients: usize,
    pub memory_regions: usize,
    /// Entries of the loop's watched and dirty sets (`ready.rs`).
    pub watched_qps: usize,
    pub watched_srqs: usize,
    pub dirty_cqs: usize,
    /// rdma_cm ids (connections in TimeWait may outlive them).
    pub cm_ids: usize,
}

/// The parts are the daemon module's to borrow apart (a request handler
/// takes only those it needs); each part keeps its own fields private.
pub struct Device {
    /// The clients' sessions and objects, with the device limits.
    pub(super) objects: Objects,
    /// The device's facts and port 1, following its netdev.
    pub(super) port: Port,
    /// The QPs, SRQs and timers, and every client's registered memory.
    pub(super) endpoint: Endpoint<DeviceMemory>,
    /// The UDP socket(s).
    pub(super) driver: UdpDriver,
    /// Receive/transmit rounds per turn of the data path.
    pub(super) rounds: usize,
    pub(super) counters: DaemonCounters,
    /// rdma_cm: the connection manager and its event channels.
    pub(super) cm: CmService,
    /// A Shutdown request was accepted: the loop stops after replying.
    pub(super) shutdown: bool,
    /// Scratch space for one ring slot.
    pub(super) slot_buf: Vec<u8>,
    /// Most QPs, CQs and SRQs held at once since the last trim.
    peak_objects: usize,
}

impl Device {
    /// Binds the socket(s) and computes the device's attributes.
    pub fn new(facts: DeviceFacts, cfg: EngineConfig) -> Result<Device, EngineError> {
        let endpoint = Endpoint::new(cfg.first_qpn, DeviceMemory::new())?;
        let driver = UdpDriver::new(&cfg)?;
        let objects = Objects::new(verbs::device_attr(&facts));
        let port = Port::new(facts, driver.local_addr().ip());
        let cm = CmService::new(&port, CmTiming::default(), local_port_range());
        Ok(Device {
            cm,
            objects,
            port,
            endpoint,
            driver,
            rounds: cfg.io_rounds(),
            counters: DaemonCounters::default(),
            shutdown: false,
            slot_buf: vec![0u8; rxu_abi::ring::layout::MAX_SLOT_SIZE as usize],
            peak_objects: 0,
        })
    }

    /// Before the loop sleeps: once clients destroyed many objects (one by
    /// one, or by going), rxud gives back what it grew for them, the
    /// tables' room and the allocator's free pages, so its RSS follows
    /// what is held now rather than the largest client it ever served.
    pub(super) fn give_back_memory(&mut self) {
        let live = self.objects.live_objects();
        if live >= self.peak_objects {
            self.peak_objects = live;
            return;
        }
        let gone = self.peak_objects - live;
        if gone >= TRIM_AFTER_OBJECTS && live <= self.peak_objects / 2 {
            self.objects.shrink();
            self.endpoint.shrink();
            sys::trim_heap();
            self.counters.heap_trims += 1;
            self.peak_objects = live;
        }
    }

    /// Replaces the CM (before any client came) with one using `timing`.
    pub fn set_cm_timing(&mut self, timing: CmTiming) {
        self.cm = CmService::new(&self.port, timing, local_port_range());
    }

    /// A client connected; returns its session id (in-process clients:
    /// tests, the control-sequence fuzz target).
    pub fn connect(&mut self, pid: u32) -> u32 {
        // In-process callers (tests) connect as the daemon's own user.
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        self.connect_as(pid, uid)
            .expect("the default quota admits a connection")
    }

    /// A client of `uid` connected; returns its session id, or why it is
    /// refused (past the uid's share of connections).
    pub fn connect_as(&mut self, pid: u32, uid: u32) -> Result<u32, Refused> {
        let id = self.objects.connect(pid, uid)?;
        self.counters.clients_accepted += 1;
        // Read now, while the peer is surely the process that connected.
        let caps = super::sys::client_caps(pid);
        if let Ok(s) = self.objects.session_mut(id) {
            s.net_raw = super::sys::holds(caps, super::sys::CAP_NET_RAW);
            s.net_bind_service = super::sys::holds(caps, super::sys::CAP_NET_BIND_SERVICE);
        }
        debug!("client {id} (pid {pid}, uid {uid}) connected");
        Ok(id)
    }

    /// The quota limits (before any client came).
    pub fn set_limits(&mut self, limits: Limits) {
        self.objects.quota = Quota::new(limits);
    }

    /// How long a connection may stay silent before Hello.
    pub fn hello_timeout(&self) -> std::time::Duration {
        self.objects.quota.limits().hello_timeout
    }

    /// Lets clients pass this process's own memory: for in-process
    /// clients (tests, the control-sequence fuzz target) only.
    pub fn set_allow_own_mem(&mut self, on: bool) {
        self.objects.set_allow_own_mem(on);
    }

    /// What the device's tables hold now, for consistency checks.
    pub fn audit(&self) -> Audit {
        let (endpoint_qps, endpoint_srqs) = self.endpoint.object_counts();
        let m = self.endpoint.memory().stats();
        Audit {
            sessions: self.objects.len(),
            session_qps: self.objects.count(|s| s.qps.len()),
            session_cqs: self.objects.count(|s| s.cqs.len()),
            session_srqs: self.objects.count(|s| s.srqs.len()),
            session_mrs: self.objects.count(|s| s.mrs.len()),
            session_pds: self.objects.count(|s| s.pds.len()),
            endpoint_qps,
            endpoint_srqs,
            memory_clients: self.endpoint.memory().client_count(),
            memory_regions: m.mrs as usize,
            watched_qps: self.objects.ready.qps.len(),
            watched_srqs: self.objects.ready.srqs.len(),
            dirty_cqs: self.objects.ready.cqs.len(),
            cm_ids: self.cm.engine().object_counts().0,
        }
    }

    /// Marks client `id` as another user's (see `Session::other_user`).
    pub fn mark_other_user(&mut self, id: u32) {
        if let Ok(s) = self.objects.session_mut(id) {
            s.other_user = true;
        }
    }

    /// A client's connection closed: destroy everything it owned. Its
    /// QPs vanish from the wire, so their peers (local or remote) see
    /// their retries run out, not a hang.
    pub fn disconnect(&mut self, id: u32) {
        share::hand_over(&mut self.objects, self.endpoint.memory_mut(), id);
        let Some(s) = self
            .objects
            .disconnect(&mut self.endpoint, &mut self.counters, id)
        else {
            return;
        };
        self.cm.session_closed(std::time::Instant::now(), id);
        self.cm.flush(&mut self.endpoint);
        // Its QPs and ids left their groups.
        let _ = self.sync_groups();
        let (nq, nc, ns, nm) = (s.qps.len(), s.cqs.len(), s.srqs.len(), s.mrs.len());
        self.counters.mr_deregistrations += nm as u64;
        for srq in s.srqs.values() {
            let _ = self.endpoint.destroy_srq(srq.id);
        }
        if s.ready && !s.admin {
            self.endpoint.memory_mut().remove_client(id);
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

    /// Re-reads the netdev and applies what changed; with `notify`, every
    /// open context hears of it. Returns whether anything changed.
    pub fn refresh_port(&mut self, notify: bool) -> bool {
        let change = self.port.refresh();
        self.port_changed(change, notify)
    }

    /// Applies a derived port view (separate from the reading, for tests).
    pub fn apply_port(&mut self, v: PortView, notify: bool) -> bool {
        let change = self.port.apply(v);
        self.port_changed(change, notify)
    }

    fn port_changed(&mut self, change: Option<PortChange>, notify: bool) -> bool {
        let Some(c) = change else {
            return false;
        };
        if self.port.all_addrs() {
            // Packets to an address that is no GID (any more) are not ours.
            self.endpoint.set_local_addrs(Some(self.port.addrs()));
            self.driver.set_local_addrs(Some(self.port.addrs()));
        }
        if c.gids_changed {
            self.cm.set_local_addrs(&self.port);
            self.cm.flush(&mut self.endpoint);
        }
        if c.went_up || c.went_down {
            self.counters.port_changes += 1;
        }
        if c.gids_changed {
            self.counters.gid_changes += 1;
        }
        if notify {
            let (objects, counters) = (&mut self.objects, &mut self.counters);
            if c.went_down {
                objects.port_event(event::PORT_ERR, counters);
            }
            if c.gids_changed {
                objects.port_event(event::GID_CHANGE, counters);
            }
            if c.went_up {
                objects.port_event(event::PORT_ACTIVE, counters);
            }
        }
        true
    }

    /// IBV_EVENT_DEVICE_FATAL to every application (see
    /// [`Objects::fatal_to_all`]).
    pub fn fatal_to_all(&mut self) {
        self.cm.device_removal();
        self.objects.fatal_to_all();
    }

    /// Whose objects session `id` may see in `rxu status` and `rxu stats`:
    /// everyone's (None) for root and the daemon's user, else its own
    /// uid's only. One user learns nothing of another's processes, QPs
    /// or peers from the daemon, as /proc hides other users' fds.
    pub fn viewer(&self, id: u32) -> Option<admin::Viewer> {
        let s = self.objects.session(id)?;
        if !s.other_user {
            return None;
        }
        // A session the quota does not know has no uid of its own: it
        // sees nobody's (u32::MAX is no one's uid).
        let uid = self.objects.quota.uid_of(id).unwrap_or(u32::MAX);
        let qpns = self
            .objects
            .sessions()
            .filter(|s| self.objects.quota.uid_of(s.id) == Some(uid))
            .flat_map(|s| s.qps.keys().copied())
            .collect();
        Some(admin::Viewer { uid, qpns })
    }

    /// What `rxu status` shows.
    pub fn status(&self) -> Response {
        admin::status(&self.objects, &self.endpoint, &self.port, &self.cm)
    }

    /// What `rxu stats` shows.
    pub fn stats(&self) -> Response {
        admin::stats(
            &self.objects,
            &self.endpoint,
            &self.engine_counters(),
            self.driver.shortcut(),
            &self.port,
            &self.counters,
            &self.cm,
        )
    }

    /// Which path packets between this device's own QPs take, as the log
    /// and `rxu stats` say it.
    pub fn path_name(&self) -> &'static str {
        if self.driver.shortcut() {
            "intra-device shortcut on"
        } else {
            "all packets by UDP"
        }
    }

    /// The endpoint's and the driver's counters together.
    pub fn engine_counters(&self) -> EngineCounters {
        let mut c = *self.endpoint.counters();
        c.add(self.driver.counters());
        c
    }
}

/// The kernel's ephemeral port range (`ip_local_port_range`), which
/// rdma_cm also allocates from.
fn local_port_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| {
            let mut it = t.split_whitespace().map(|v| v.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .filter(|(lo, hi)| lo <= hi && *lo > 0)
        .unwrap_or((32768, 60999))
}
