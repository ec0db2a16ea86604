//! The device's objects: the client sessions and what they own, the
//! device-wide numbers (client ids, PDs, CQ ids, the QP-number and CQ-id
//! -> owner maps) and the limits they are held to. The QPs themselves
//! live in the endpoint; this is the bookkeeping that says whose they
//! are, and where a completion goes.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::AsFd;

use transport::engine::Endpoint;
use transport::qp::QpCounters;

use crate::mem::DeviceMemory;
use rxu_abi::proto::DeviceAttr;

use super::completion::post_completion;
use super::counters::DaemonCounters;
use super::quota::Quota;
use super::ready::Ready;
use super::reply::Refused;
use super::session::{event, Cq, Qp, Session, Srq};
use super::sys;
use super::xrcd::Xrcds;
use transport::engine::CqSink;
use transport::qp::Completion;

pub struct Objects {
    /// What `ibv_query_device` reports; its `max_*` are the limits every
    /// object is held to.
    attr: DeviceAttr,
    sessions: BTreeMap<u32, Session>,
    /// QP number -> owning session (exactly the QPs of the sessions).
    qp_owner: HashMap<u32, u32>,
    /// CQ id (the tag of the endpoint's completions) -> owning session
    /// and its handle there (exactly the CQs of the sessions).
    cq_owner: HashMap<u32, (u32, u32)>,
    /// SRQ id (the endpoint's) -> owning session and its handle there.
    srq_owner: HashMap<u32, (u32, u32)>,
    /// The rings, CQs and sessions the loop looks at (`ready.rs`).
    pub(super) ready: Ready,
    /// Transport counters of QPs already destroyed (device totals are
    /// these plus the live QPs').
    retired_qps: QpCounters,
    /// Accept the daemon's own /proc/self/mem as a client's memory (only
    /// in-process tests, where the test plays both sides).
    allow_own_mem: bool,
    next_client: u32,
    next_pd: u32,
    next_cq: u32,
    next_mr: u32,
    /// The XRC domains and who has them open.
    pub(super) xrcds: Xrcds,
    /// What each session and uid holds, and their limits.
    pub(super) quota: Quota,
}

impl Objects {
    pub fn new(attr: DeviceAttr) -> Objects {
        Objects {
            attr,
            sessions: BTreeMap::new(),
            qp_owner: HashMap::new(),
            cq_owner: HashMap::new(),
            srq_owner: HashMap::new(),
            ready: Ready::default(),
            retired_qps: QpCounters::default(),
            allow_own_mem: false,
            next_client: 1,
            next_pd: 1,
            next_cq: 1,
            next_mr: 1,
            xrcds: Xrcds::default(),
            quota: Quota::default(),
        }
    }

    /// The device attributes (and limits).
    pub fn attr(&self) -> &DeviceAttr {
        &self.attr
    }

    pub fn allow_own_mem(&self) -> bool {
        self.allow_own_mem
    }

    /// A new session for a client of `uid` that connected; returns its
    /// id. Refused past the uid's share of connections (quota).
    pub(super) fn connect(&mut self, pid: u32, uid: u32) -> Result<u32, Refused> {
        let id = loop {
            let id = self.next_client;
            self.next_client = self.next_client.wrapping_add(1).max(1);
            if !self.sessions.contains_key(&id) {
                break id;
            }
        };
        self.quota.open(id, uid)?;
        self.sessions.insert(id, Session::new(id, pid));
        Ok(id)
    }

    /// Removes a session and retires its QPs (keeping their counters;
    /// what they still complete has no CQ to go to) but XRC target QPs
    /// another session still holds; the caller releases what else it held
    /// in the endpoint.
    pub(super) fn disconnect(
        &mut self,
        endpoint: &mut Endpoint<DeviceMemory>,
        counters: &mut DaemonCounters,
        id: u32,
    ) -> Option<Session> {
        let s = self.sessions.remove(&id)?;
        self.quota.close(id);
        for cq in s.cqs.values() {
            self.cq_owner.remove(&cq.id);
        }
        for srq in s.srqs.values() {
            self.srq_owner.remove(&srq.id);
            self.ready.unparked_srq(srq);
        }
        for qp in s.qps.values() {
            self.ready.unparked_qp(qp);
        }
        self.ready.forget_session(id);
        for &qpn in s.qps.keys() {
            if !self.hand_on_qp(qpn) {
                self.retire_qp(endpoint, counters, qpn);
            }
        }
        self.xrcds.release_session(id);
        Some(s)
    }

    /// QPs, CQs and SRQs held by all sessions (O(1)).
    pub(super) fn live_objects(&self) -> usize {
        self.qp_owner.len() + self.cq_owner.len() + self.srq_owner.len()
    }

    /// Gives back the room the owner maps grew for objects now gone.
    pub(super) fn shrink(&mut self) {
        self.qp_owner.shrink_to_fit();
        self.cq_owner.shrink_to_fit();
        self.srq_owner.shrink_to_fit();
    }

    pub fn session(&self, id: u32) -> Option<&Session> {
        self.sessions.get(&id)
    }

    pub(super) fn get_mut(&mut self, id: u32) -> Option<&mut Session> {
        self.sessions.get_mut(&id)
    }

    /// The session of a client (always present while it sends requests).
    pub(super) fn session_mut(&mut self, id: u32) -> Result<&mut Session, Refused> {
        self.sessions.get_mut(&id).ok_or_else(|| Refused {
            errno: libc::EINVAL,
            msg: "no such session".into(),
        })
    }

    /// Every session, by id.
    pub fn sessions(&self) -> impl Iterator<Item = &Session> {
        self.sessions.values()
    }

    pub(super) fn sessions_mut(&mut self) -> impl Iterator<Item = &mut Session> {
        self.sessions.values_mut()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Objects of one kind across all clients (for the device limits).
    pub fn count(&self, f: impl Fn(&Session) -> usize) -> usize {
        self.sessions.values().map(f).sum()
    }

    /// A device-wide unique PD number; skips numbers still in use after
    /// a wrap.
    pub(super) fn alloc_pd(&mut self) -> u32 {
        loop {
            let pd = self.next_pd;
            self.next_pd = self.next_pd.wrapping_add(1).max(1);
            if !self.sessions.values().any(|s| s.pds.contains(&pd)) {
                return pd;
            }
        }
    }

    /// A device-wide unique MR handle (so that within a group of sessions
    /// sharing a context, a handle names one MR).
    pub(super) fn alloc_mr_handle(&mut self) -> u32 {
        loop {
            let h = self.next_mr;
            self.next_mr = self.next_mr.wrapping_add(1).max(1);
            if !self.sessions.values().any(|s| s.mrs.contains_key(&h)) {
                return h;
            }
        }
    }

    /// The session of group `group` that allocated PD `pd`.
    pub(super) fn pd_owner(&self, group: u32, pd: u32) -> Option<u32> {
        self.sessions
            .values()
            .find(|s| s.group == group && s.pds.contains(&pd))
            .map(|s| s.id)
    }

    /// The session of group `group` that registered MR `mr`.
    pub(super) fn mr_owner(&self, group: u32, mr: u32) -> Option<u32> {
        self.sessions
            .values()
            .find(|s| s.group == group && s.mrs.contains_key(&mr))
            .map(|s| s.id)
    }

    /// A device-wide unique CQ id (the endpoint's name for the CQ).
    pub(super) fn alloc_cq_id(&mut self) -> u32 {
        loop {
            let id = self.next_cq;
            self.next_cq = self.next_cq.wrapping_add(1).max(1);
            if !self.cq_owner.contains_key(&id) {
                return id;
            }
        }
    }

    /// Records a CQ of session `id` (its `id` from [`Objects::alloc_cq_id`]);
    /// returns its handle.
    pub(super) fn add_cq(&mut self, id: u32, cq: Cq) -> Result<u32, Refused> {
        let cq_id = cq.id;
        let s = self.session_mut(id)?;
        let h = s.new_handle();
        s.cqs.insert(h, cq);
        self.cq_owner.insert(cq_id, (id, h));
        Ok(h)
    }

    /// Removes CQ `h` of session `id`, if it has one.
    pub(super) fn remove_cq(&mut self, id: u32, h: u32) -> Option<Cq> {
        let cq = self.sessions.get_mut(&id)?.cqs.remove(&h)?;
        self.cq_owner.remove(&cq.id);
        Some(cq)
    }

    /// The CQ the endpoint calls `cq`, if it still exists.
    pub(super) fn cq_mut(&mut self, cq: u32) -> Option<&mut Cq> {
        let (id, h) = self.cq_owner.get(&cq)?;
        self.sessions.get_mut(id)?.cqs.get_mut(h)
    }

    /// Records a QP the engine created for session `id` (its rings
    /// watched).
    pub(super) fn add_qp(&mut self, id: u32, qp: Qp) -> Result<(), Refused> {
        let qpn = qp.qpn;
        self.session_mut(id)?.qps.insert(qpn, qp);
        self.qp_owner.insert(qpn, id);
        self.ready.qps.insert((id, qpn));
        Ok(())
    }

    /// Records an SRQ of session `id` under handle `h` (its ring watched).
    pub(super) fn add_srq(&mut self, id: u32, h: u32, srq: Srq) -> Result<(), Refused> {
        let srq_id = srq.id;
        self.session_mut(id)?.srqs.insert(h, srq);
        self.srq_owner.insert(srq_id, (id, h));
        self.ready.srqs.insert((id, h));
        Ok(())
    }

    /// Removes SRQ `h` of session `id`, if it has one.
    pub(super) fn remove_srq(&mut self, id: u32, h: u32) -> Option<Srq> {
        let srq = self.sessions.get_mut(&id)?.srqs.remove(&h)?;
        self.srq_owner.remove(&srq.id);
        self.ready.unparked_srq(&srq);
        Some(srq)
    }

    /// The session and handle of the SRQ the endpoint calls `srq`.
    pub(super) fn srq_owner(&self, srq: u32) -> Option<(u32, u32)> {
        self.srq_owner.get(&srq).copied()
    }

    /// The owner (session, handle) of the CQ the endpoint calls `cq`.
    pub(super) fn cq_owner(&self, cq: u32) -> Option<(u32, u32)> {
        self.cq_owner.get(&cq).copied()
    }

    /// Session `id` and the device-wide books the data path updates
    /// while it holds the session's objects.
    pub(super) fn parts(&mut self, id: u32) -> Option<Parts<'_>> {
        let s = self.sessions.get_mut(&id)?;
        Some(Parts {
            s,
            cq_owner: &self.cq_owner,
            ready: &mut self.ready,
        })
    }

    /// Destroys a QP of session `id`; false if it has none of that number.
    pub(super) fn destroy_qp(
        &mut self,
        endpoint: &mut Endpoint<DeviceMemory>,
        counters: &mut DaemonCounters,
        id: u32,
        qpn: u32,
    ) -> Result<bool, Refused> {
        let Some(qp) = self.session_mut(id)?.qps.remove(&qpn) else {
            return Ok(false);
        };
        self.ready.unparked_qp(&qp);
        if !self.hand_on_qp(qpn) {
            self.retire_qp(endpoint, counters, qpn);
        }
        Ok(true)
    }

    /// An XRC target QP one session let go of lives on while another
    /// session holds it (`ibv_open_qp`): that one becomes its owner (its
    /// async events go there). False when no session holds it.
    fn hand_on_qp(&mut self, qpn: u32) -> bool {
        match self.sessions.values().find(|s| s.qps.contains_key(&qpn)) {
            Some(s) => {
                self.qp_owner.insert(qpn, s.id);
                true
            }
            None => false,
        }
    }

    /// The XRC domain of target QP `qpn` (None: no such QP, or not one).
    pub(super) fn tgt_qp_xrcd(&self, qpn: u32) -> Option<u32> {
        let owner = self.qp_owner.get(&qpn)?;
        self.sessions.get(owner)?.qps.get(&qpn)?.xrcd
    }

    /// Records that session `id` holds target QP `qpn` too (the QP
    /// itself stays with its owner).
    pub(super) fn share_qp(&mut self, id: u32, qp: Qp) -> Result<(), Refused> {
        let qpn = qp.qpn;
        self.session_mut(id)?.qps.insert(qpn, qp);
        self.ready.qps.insert((id, qpn));
        Ok(())
    }

    /// Destroys a QP in the endpoint, keeping its counters in the totals;
    /// what it completed meanwhile goes to its CQs.
    fn retire_qp(
        &mut self,
        endpoint: &mut Endpoint<DeviceMemory>,
        counters: &mut DaemonCounters,
        qpn: u32,
    ) {
        if let Some(q) = endpoint.qp(qpn) {
            self.retired_qps.add(q.counters());
        }
        let _ = endpoint.destroy_qp(qpn, &mut DeviceCqs::new(self, counters));
        // Type 2 windows bound through it are freed: the QP number may
        // come back for another QP.
        endpoint.memory_mut().release_qp(qpn);
        self.qp_owner.remove(&qpn);
    }

    /// The session owning QP `qpn`, if it still exists.
    pub(super) fn owner_of_qp_mut(&mut self, qpn: u32) -> Option<&mut Session> {
        let owner = self.qp_owner.get(&qpn)?;
        self.sessions.get_mut(owner)
    }

    /// The session owning QP `qpn`.
    pub(super) fn qp_owner(&self, qpn: u32) -> Option<u32> {
        self.qp_owner.get(&qpn).copied()
    }

    /// Whether QP `qpn` belongs to some session.
    pub fn has_qp(&self, qpn: u32) -> bool {
        self.qp_owner.contains_key(&qpn)
    }

    /// The numbers of every live QP, ascending.
    pub fn qpns(&self) -> Vec<u32> {
        let mut qpns: Vec<u32> = self.qp_owner.keys().copied().collect();
        qpns.sort_unstable();
        qpns
    }

    /// Transport counters summed over every QP the device ever had.
    pub fn qp_totals(&self, endpoint: &Endpoint<DeviceMemory>) -> QpCounters {
        let mut t = self.retired_qps;
        for &qpn in self.qp_owner.keys() {
            if let Some(q) = endpoint.qp(qpn) {
                t.add(q.counters());
            }
        }
        t
    }

    /// One port event (element: port number 1) to every open context.
    pub(super) fn port_event(&mut self, ty: u32, counters: &mut DaemonCounters) {
        for s in self.sessions.values_mut() {
            if !s.ready || s.admin {
                continue;
            }
            if s.send_event(1, ty) {
                counters.async_events += 1;
            } else {
                counters.async_events_dropped += 1;
            }
        }
    }

    /// IBV_EVENT_DEVICE_FATAL to every application (once), then the
    /// async socket is shut down: the client (which says DEVICE_FATAL
    /// itself for a daemon that died without it) finds it shut and does
    /// not repeat it, and its reader sees EOF after the event. A socket
    /// with no room for it is only let go, not shut: the client's own
    /// write end then says it once its application has read enough (the
    /// kernel queues this event, it never drops it).
    pub(super) fn fatal_to_all(&mut self) {
        for s in self.sessions.values_mut() {
            if s.ready && !s.admin && s.async_sock.is_some() {
                let sent = s.send_event(0, event::DEVICE_FATAL);
                if let Some(sock) = s.async_sock.take() {
                    if sent {
                        sys::shutdown_write(sock.as_fd());
                    }
                }
            }
        }
    }
}

/// A session and what the data path updates besides it (see
/// [`Objects::parts`]).
pub struct Parts<'a> {
    pub s: &'a mut Session,
    pub cq_owner: &'a HashMap<u32, (u32, u32)>,
    pub ready: &'a mut Ready,
}

/// Every client's CQs as the endpoint's completion sink (the data path
/// and control requests). A completion for a CQ that is gone (with its
/// client) goes nowhere.
pub struct DeviceCqs<'a> {
    objects: &'a mut Objects,
    counters: &'a mut DaemonCounters,
}

impl<'a> DeviceCqs<'a> {
    pub fn new(objects: &'a mut Objects, counters: &'a mut DaemonCounters) -> DeviceCqs<'a> {
        DeviceCqs { objects, counters }
    }
}

impl CqSink for DeviceCqs<'_> {
    fn post(&mut self, cq: u32, c: Completion) {
        if let Some(q) = self.objects.cq_mut(cq) {
            post_completion(q, &c, self.counters);
            self.objects.ready.cqs.insert(cq);
        }
    }

    /// The SRQ belongs to the session of the CQ its receive completes on
    /// (a QP's CQs and SRQ are of one context; an XRC SRQ's CQ is its own).
    fn srq_receive_used(&mut self, cq: u32, srq: u32) {
        let Some(&(id, _)) = self.objects.cq_owner.get(&cq) else {
            return;
        };
        // Only an SRQ of that session (the CQ's owner).
        let Some((sid, h)) = self.objects.srq_owner(srq) else {
            return;
        };
        if sid != id {
            return;
        }
        if let Some(srq) = self
            .objects
            .sessions
            .get_mut(&id)
            .and_then(|s| s.srqs.get_mut(&h))
        {
            srq.receive_used();
        }
    }
}

impl Objects {
    /// In-process clients only (tests, fuzzing): see `Device::set_allow_own_mem`.
    pub(super) fn set_allow_own_mem(&mut self, allow: bool) {
        self.allow_own_mem = allow;
    }
}
