//! The device's rdma_cm service: the `rxu-cm` engine driven by the
//! daemon. It takes the CM MADs that reach QP 1 and sends the engine's
//! through the endpoint, runs the engine's timers with the data path's,
//! answers the ucma emulator's requests (`Request::Cm`) and writes the
//! engine's events to the event channel sockets the emulator attached.
//!
//! Owners: the engine tags each id with an opaque `Owner`; here it is
//! (session, channel), so a migrated id just changes owner and a session
//! that closes takes all of its ids with it (peers get DREQ / REJ).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use rxu_abi::proto::cm::{
    event, port_space, CmEventParam, CmEventRecord, CmIdStatus, CmRequest, CmResponse,
    RDMA_UDP_QKEY,
};
use rxu_abi::proto::{encode, AhAttr, QpType, Response};
use rxu_cm::engine::{Cm, CmConfig, CmTiming, MadRx, Owner};
use transport::engine::{Endpoint, GsiSend};
use transport::qp::Memory;

use super::cm_join::{Join, Joins};
use super::log::{debug, warning};
use super::port::Port;
use super::reply::{refuse, Handled, Refused, Reply};
use super::sys;

/// Hop limit of rdma_cm's RoCEv2 multicast address vectors.
const MCAST_HOP_LIMIT: u8 = 64;

/// The (session, channel) an id belongs to.
pub fn owner(session: u32, channel: u32) -> Owner {
    (u64::from(session) << 32) | u64::from(channel)
}

fn session_of(o: Owner) -> u32 {
    (o >> 32) as u32
}

/// Every owner of `session` (its channels), as a range of the owner index.
fn owners_of(session: u32) -> RangeInclusive<Owner> {
    owner(session, 0)..=owner(session, u32::MAX)
}

/// Events a channel keeps while its reader is behind (the kernel's ucma
/// queues them in the file's list). Past this a CONNECT_REQUEST is
/// turned down with a REJ, as a listener whose backlog is full, and other
/// events are counted as dropped: memory stays bounded for a client that
/// never reads.
pub const MAX_PENDING_EVENTS: usize = 1024;

/// An attached event channel.
struct Channel {
    sock: OwnedFd,
    tag: u32,
    /// Encoded records the socket had no room for, oldest first.
    pending: VecDeque<Vec<u8>>,
}

impl Channel {
    fn new(sock: OwnedFd, tag: u32) -> Channel {
        Channel {
            sock,
            tag,
            pending: VecDeque::new(),
        }
    }
}

/// What became of an event handed to a channel.
#[derive(Debug, PartialEq, Eq)]
enum Delivery {
    Sent,
    Queued,
    /// No channel, the reader is gone, or the queue is full.
    Dropped,
}

/// The CM of one device and the channels its events go to.
pub struct CmService {
    cm: Cm,
    channels: BTreeMap<Owner, Channel>,
    /// rdma_join_multicast of the ids.
    joins: Joins,
    /// Channels with queued events (flushed every pump).
    backed_up: BTreeSet<Owner>,
    /// Events written / not written (channel gone or full).
    pub events_sent: u64,
    pub events_dropped: u64,
}

impl CmService {
    pub fn new(port: &Port, timing: CmTiming, port_range: (u16, u16)) -> CmService {
        let facts = port.facts();
        let seed = facts.node_guid ^ u64::from(std::process::id()).rotate_left(32);
        let cfg = CmConfig {
            node_guid: facts.node_guid,
            local_addrs: port.addrs().to_vec(),
            mtu: port.mtu() as u8,
            timing,
            port_range,
            seed: seed ^ now_nanos(),
        };
        CmService {
            cm: Cm::new(cfg),
            channels: BTreeMap::new(),
            joins: Joins::default(),
            backed_up: BTreeSet::new(),
            events_sent: 0,
            events_dropped: 0,
        }
    }

    pub fn engine(&self) -> &Cm {
        &self.cm
    }

    /// The ids of `session`, for `rxu status`.
    pub fn status_of(&self, session: u32) -> Vec<CmIdStatus> {
        self.cm
            .status_of(owners_of(session))
            .into_iter()
            .map(|s| CmIdStatus {
                id: s.id,
                ps: ps_name(s.ps),
                state: s.state,
                local: Some(s.local),
                remote: s.remote,
                qpn: s.qpn,
            })
            .collect()
    }

    /// What `session` holds: rdma_cm ids, multicast joins and event
    /// channel sockets (for its quota). Counted in what `session` holds
    /// only: no request pays for other sessions' ids.
    pub fn usage(&self, session: u32) -> (u64, u64, u64) {
        let ids = self.cm.ids_owned(owners_of(session)).count();
        let joins = self.joins.of_session(session);
        let channels = self.channels.range(owners_of(session)).count();
        (ids as u64, joins, channels as u64)
    }

    /// The device's addresses changed (ids bound to a vanished one hear
    /// ADDR_CHANGE).
    pub fn set_local_addrs(&mut self, port: &Port) {
        self.cm.set_local_addrs(port.addrs());
    }

    /// One rdma_cm request of `session`.
    pub fn handle(
        &mut self,
        now: Instant,
        session: u32,
        req: CmRequest,
        fds: Vec<OwnedFd>,
        port: &Port,
    ) -> Handled {
        let takes_fd = matches!(req, CmRequest::AttachChannel { .. });
        if takes_fd != (fds.len() == 1) || fds.len() > 1 {
            return refuse(libc::EINVAL, "wrong number of file descriptors");
        }
        let cm = &mut self.cm;
        let ok = |r: CmResponse| Ok(Reply::ok(Response::Cm(r)));
        match req {
            CmRequest::QueryDevice => ok(CmResponse::Device {
                name: port.name().to_owned(),
                node_guid: port.facts().node_guid,
                netdev: port.netdev().to_owned(),
                addrs: port.addrs().to_vec(),
            }),
            CmRequest::AttachChannel { channel, tag } => {
                let Some(sock) = fds.into_iter().next() else {
                    return refuse(libc::EINVAL, "AttachChannel needs the channel socket");
                };
                if !sys::is_socket(sock.as_fd()) {
                    return refuse(libc::EINVAL, "the channel fd is not a socket");
                }
                self.channels
                    .insert(owner(session, channel), Channel::new(sock, tag));
                ok(CmResponse::Ok)
            }
            CmRequest::DetachChannel { channel } => {
                let o = owner(session, channel);
                self.destroy_owned(now, o..=o);
                self.channels.remove(&o);
                self.backed_up.remove(&o);
                ok(CmResponse::Ok)
            }
            CmRequest::Bind {
                channel,
                ps,
                qp_type,
                addr,
                reuseaddr,
                afonly,
                tos,
            } => {
                let o = owner(session, channel);
                if !self.channels.contains_key(&o) {
                    return refuse(libc::EINVAL, "no such event channel");
                }
                let (id, bound) = cm
                    .bind(o, ps, qp_type, addr, reuseaddr, afonly, tos)
                    .map_err(refused)?;
                let route = cm.route(id).map_err(refused)?;
                ok(CmResponse::Bound {
                    id,
                    addr: bound,
                    route,
                })
            }
            req => {
                let id = id_of(&req);
                // Another session's id is "no such id".
                if id.is_some_and(|id| cm.owner_of(id).map(session_of) != Some(session)) {
                    return refuse(libc::EINVAL, "no such rdma_cm id");
                }
                self.handle_id(now, session, req)
            }
        }
    }

    fn handle_id(&mut self, now: Instant, session: u32, req: CmRequest) -> Handled {
        let cm = &mut self.cm;
        let done = |r: Result<(), rxu_cm::engine::CmError>| {
            r.map_err(refused)?;
            Ok(Reply::ok(Response::Cm(CmResponse::Ok)))
        };
        match req {
            CmRequest::Resolve { id, dst } => {
                let route = cm.resolve(id, dst).map_err(refused)?;
                Ok(Reply::ok(Response::Cm(CmResponse::Route(route))))
            }
            CmRequest::Listen { id, backlog } => done(cm.listen(id, backlog)),
            CmRequest::Connect { id, param, ece } => done(cm.connect(now, id, &param, ece)),
            CmRequest::Accept { id, param, ece } => done(cm.accept(now, id, param.as_ref(), ece)),
            CmRequest::Reject {
                id,
                private_data,
                reason,
            } => done(cm.reject(now, id, &private_data, reason)),
            CmRequest::Disconnect { id } => done(cm.disconnect(now, id)),
            CmRequest::InitQpAttr { id, state } => {
                let (mask, attr) = cm.init_qp_attr(id, state).map_err(refused)?;
                Ok(Reply::ok(Response::Cm(CmResponse::QpAttr { mask, attr })))
            }
            CmRequest::SetOption { id, option } => done(cm.set_option(id, option)),
            CmRequest::Notify { id, .. } => done(cm.route(id).map(|_| ())),
            CmRequest::Migrate { id, channel } => {
                let o = owner(session, channel);
                if !self.channels.contains_key(&o) {
                    return refuse(libc::EINVAL, "no such event channel");
                }
                done(self.cm.set_owner(id, o))
            }
            CmRequest::Destroy { id } => {
                let r = cm.destroy(now, id);
                self.joins.remove_id(id);
                done(r)
            }
            CmRequest::JoinMcast {
                id,
                addr,
                send_only,
            } => {
                self.join(session, id, addr, send_only)?;
                done(Ok(()))
            }
            CmRequest::LeaveMcast { id, addr } => {
                if !self.joins.leave(id, addr) {
                    return refuse(libc::ENOENT, format!("id {id} did not join {addr}"));
                }
                done(Ok(()))
            }
            CmRequest::QueryDevice
            | CmRequest::AttachChannel { .. }
            | CmRequest::DetachChannel { .. }
            | CmRequest::Bind { .. } => refuse(libc::EINVAL, "handled above"),
        }
    }

    /// A session went away: its ids are destroyed as rdma_destroy_id
    /// would (DREQ for connections, REJ for pending ones), its channels
    /// closed.
    pub fn session_closed(&mut self, now: Instant, session: u32) {
        self.destroy_owned(now, owners_of(session));
        let mine: Vec<Owner> = self
            .channels
            .range(owners_of(session))
            .map(|(&o, _)| o)
            .collect();
        for o in mine {
            self.channels.remove(&o);
            self.backed_up.remove(&o);
        }
    }

    /// Destroys the ids of `owners` and forgets their joins.
    fn destroy_owned(&mut self, now: Instant, owners: RangeInclusive<Owner>) {
        let ids: Vec<u32> = self.cm.ids_owned(owners.clone()).collect();
        self.cm.destroy_owned(now, owners);
        for id in ids {
            self.joins.remove_id(id);
        }
    }

    // ---------------------------------------------------------- multicast

    /// `rdma_join_multicast` of `id` (a UD id): recorded now; the device
    /// joins the IP group and the id hears MULTICAST_JOIN (or _ERROR) when
    /// the daemon settles the joins after this request. RoCEv2 maps only
    /// IPv4 groups (an IPv6 group is EOPNOTSUPP, as on a kernel).
    fn join(
        &mut self,
        session: u32,
        id: u32,
        group: SocketAddr,
        send_only: bool,
    ) -> Result<(), Refused> {
        if self.cm.qp_type_of(id) != Some(QpType::Ud) {
            return refuse(libc::EINVAL, "multicast needs a UD rdma_cm id");
        }
        match group.ip() {
            IpAddr::V4(g) if g.is_multicast() => {}
            IpAddr::V6(g) if g.is_multicast() => {
                return refuse(libc::EOPNOTSUPP, "IPv6 groups over RoCEv2")
            }
            _ => return refuse(libc::EINVAL, format!("{group} is not a multicast group")),
        }
        self.joins.add(
            session,
            Join {
                id,
                group,
                send_only,
            },
        );
        Ok(())
    }

    /// Some id joined a group.
    pub fn has_mcast(&self) -> bool {
        !self.joins.is_empty()
    }

    /// The IPv4 groups the joins need received (send-only ones aside).
    pub fn mcast_groups(&self) -> impl Iterator<Item = std::net::Ipv4Addr> + '_ {
        self.joins.received_groups()
    }

    /// Reports the joins not reported yet: MULTICAST_JOIN with the group's
    /// address vector, or (the device could not join: `err`) MULTICAST_ERROR
    /// with `-err`, and such joins are dropped.
    pub fn settle_joins(&mut self, err: Option<i32>) {
        for j in self.joins.take_unreported() {
            if !self.joins.holds(&j) {
                continue;
            }
            let Some(o) = self.cm.owner_of(j.id) else {
                self.joins.remove_id(j.id);
                continue;
            };
            let rec = match err {
                None => self.join_event(j),
                Some(e) => {
                    self.joins.leave(j.id, j.group);
                    CmEventRecord {
                        id: j.id,
                        event: event::MULTICAST_ERROR,
                        status: -e,
                        mcast: Some(j.group),
                        ..CmEventRecord::default()
                    }
                }
            };
            self.write_event(o, rec);
        }
    }

    /// MULTICAST_JOIN as the kernel reports it on RoCEv2: the MGID
    /// `::ffff:group`, hop limit 64, DestQP 0xFFFFFF, the UD Q_Key.
    fn join_event(&self, j: Join) -> CmEventRecord {
        let tc = self.cm.route(j.id).map_or(0, |r| r.traffic_class);
        let dgid = match j.group.ip() {
            IpAddr::V4(g) => g.to_ipv6_mapped().octets(),
            IpAddr::V6(g) => g.octets(),
        };
        CmEventRecord {
            id: j.id,
            event: event::MULTICAST_JOIN,
            param: CmEventParam {
                qp_num: transport::engine::MCAST_QPN,
                qkey: RDMA_UDP_QKEY,
                ah: Some(AhAttr {
                    dgid,
                    flow_label: 0,
                    sgid_index: 0,
                    hop_limit: MCAST_HOP_LIMIT,
                    traffic_class: tc,
                    sl: 0,
                    is_global: true,
                    port_num: 1,
                }),
                ..CmEventParam::default()
            },
            mcast: Some(j.group),
            ..CmEventRecord::default()
        }
    }

    /// DEVICE_REMOVAL to every id (the device goes away under them).
    pub fn device_removal(&mut self) {
        let ids: Vec<(Owner, u32)> = self.cm.owned_ids().collect();
        for (o, id) in ids {
            let rec = CmEventRecord {
                id,
                event: event::DEVICE_REMOVAL,
                ..CmEventRecord::default()
            };
            self.write_event(o, rec);
        }
    }

    /// The engine's side of one turn: MADs that reached QP 1 in, due
    /// timers, MADs out to the endpoint, events out to the channels.
    /// Returns how much happened.
    pub fn pump<M: Memory>(&mut self, now: Instant, endpoint: &mut Endpoint<M>) -> usize {
        let mut work = 0;
        while let Some(d) = endpoint.poll_gsi() {
            let rx = MadRx {
                src: d.src,
                dst: d.dst,
                hop_limit: d.hop_limit,
                traffic_class: d.traffic_class,
            };
            self.cm.handle_mad(now, &rx, &d.payload);
            work += 1;
        }
        if self.cm.poll_timeout().is_some_and(|t| t <= now) {
            self.cm.handle_timeout(now);
            work += 1;
        }
        work += self.flush_pending();
        work + self.flush(endpoint)
    }

    /// Whether a channel holds events its reader has not taken yet (the
    /// loop must come back for them: no wake-up says a socket has room).
    pub fn has_pending(&self) -> bool {
        !self.backed_up.is_empty()
    }

    /// Writes what the backed-up channels queued, in order, as far as
    /// their sockets take it; returns how many records went.
    fn flush_pending(&mut self) -> usize {
        let mut sent = 0;
        let owners: Vec<Owner> = self.backed_up.iter().copied().collect();
        for o in owners {
            let Some(ch) = self.channels.get_mut(&o) else {
                self.backed_up.remove(&o);
                continue;
            };
            while let Some(buf) = ch.pending.front() {
                match sys::try_send_record(ch.sock.as_fd(), buf) {
                    Ok(true) => {
                        ch.pending.pop_front();
                        sent += 1;
                    }
                    Ok(false) => break,
                    Err(_) => {
                        // The reader is gone: nothing will take them.
                        self.events_dropped += ch.pending.len() as u64;
                        ch.pending.clear();
                    }
                }
            }
            if ch.pending.is_empty() {
                self.backed_up.remove(&o);
            }
        }
        self.events_sent += sent as u64;
        sent
    }

    /// Moves what the engine produced (after a request, or a pump) to the
    /// endpoint and the channels.
    pub fn flush<M: Memory>(&mut self, endpoint: &mut Endpoint<M>) -> usize {
        let mut work = 0;
        // Events first: a CONNECT_REQUEST no channel takes is turned down,
        // and the REJ that makes goes out below.
        while let Some((o, rec)) = self.cm.poll_event() {
            self.write_event(o, rec);
            work += 1;
        }
        while let Some(tx) = self.cm.poll_transmit() {
            endpoint.send_gsi(GsiSend {
                src: tx.src,
                dst: tx.dst,
                dst_qpn: tx.dst_qpn,
                payload: tx.mad.to_vec(),
            });
            work += 1;
        }
        work
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.cm.poll_timeout()
    }

    fn write_event(&mut self, o: Owner, rec: CmEventRecord) {
        let (kind, new_id) = (rec.event, rec.new_id);
        match self.deliver(o, rec) {
            Delivery::Sent => self.events_sent += 1,
            Delivery::Queued => {}
            Delivery::Dropped => {
                self.events_dropped += 1;
                if kind == event::CONNECT_REQUEST {
                    // Nobody will accept or reject it: turn it down now
                    // (a REJ to the peer) rather than leave it in ReqRcvd.
                    debug!("rdma_cm: CONNECT_REQUEST for id {new_id} not deliverable; rejected");
                    let _ = self.cm.destroy(Instant::now(), new_id);
                }
            }
        }
    }

    /// Hands `rec` to `o`'s channel: written now, or queued behind what
    /// the channel already holds, or dropped.
    fn deliver(&mut self, o: Owner, mut rec: CmEventRecord) -> Delivery {
        let Some(ch) = self.channels.get_mut(&o) else {
            debug!("rdma_cm event {} for a closed channel dropped", rec.event);
            return Delivery::Dropped;
        };
        rec.tag = ch.tag;
        let buf = match encode(&rec) {
            Ok(buf) => buf,
            Err(e) => {
                warning!("rdma_cm event not encodable: {e}");
                return Delivery::Dropped;
            }
        };
        if ch.pending.is_empty() {
            match sys::try_send_record(ch.sock.as_fd(), &buf) {
                Ok(true) => return Delivery::Sent,
                Ok(false) => {}
                Err(_) => return Delivery::Dropped,
            }
        }
        if ch.pending.len() >= MAX_PENDING_EVENTS {
            return Delivery::Dropped;
        }
        ch.pending.push_back(buf);
        self.backed_up.insert(o);
        Delivery::Queued
    }
}

fn id_of(req: &CmRequest) -> Option<u32> {
    match *req {
        CmRequest::Resolve { id, .. }
        | CmRequest::Listen { id, .. }
        | CmRequest::Connect { id, .. }
        | CmRequest::Accept { id, .. }
        | CmRequest::Reject { id, .. }
        | CmRequest::Disconnect { id }
        | CmRequest::InitQpAttr { id, .. }
        | CmRequest::SetOption { id, .. }
        | CmRequest::Notify { id, .. }
        | CmRequest::Migrate { id, .. }
        | CmRequest::Destroy { id }
        | CmRequest::JoinMcast { id, .. }
        | CmRequest::LeaveMcast { id, .. } => Some(id),
        CmRequest::QueryDevice
        | CmRequest::AttachChannel { .. }
        | CmRequest::DetachChannel { .. }
        | CmRequest::Bind { .. } => None,
    }
}

fn refused(e: rxu_cm::engine::CmError) -> Refused {
    Refused {
        errno: e.errno(),
        msg: e.to_string(),
    }
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn ps_name(ps: u16) -> String {
    match ps {
        port_space::TCP => "TCP".into(),
        port_space::UDP => "UDP".into(),
        port_space::IB => "IB".into(),
        port_space::IPOIB => "IPoIB".into(),
        n => format!("ps{n:#x}"),
    }
}

/// The kernel's rule for rdma_cm ports (`cma_use_port`): binding a port
/// below 1024 needs CAP_NET_BIND_SERVICE, the caller's, not rxud's (EACCES,
/// as bind(2)); port 0 (ephemeral) never does.
pub fn check_port_privilege(port: u16, net_bind_service: bool) -> Result<(), Refused> {
    if port != 0 && port < 1024 && !net_bind_service {
        return refuse(
            libc::EACCES,
            format!("rdma_cm port {port} is below 1024: binding it needs CAP_NET_BIND_SERVICE"),
        );
    }
    Ok(())
}
