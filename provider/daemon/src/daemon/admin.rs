//! Requests of the rxu tool: Status, Stats, Shutdown.

use transport::engine::{Endpoint, EngineCounters};

use crate::mem::DeviceMemory;
use crate::verbs;
use rxu_abi::proto::{self, ClientStatus, Counter, QpStatus, QuotaLimit, Response, UidUse};

use super::cm::CmService;
use super::counters::DaemonCounters;
use super::log::info;
use super::objects::Objects;
use super::port::Port;
use super::quota::KINDS;
use super::reply::{refuse, Handled, Reply};

/// The payload of one [`Response::Chunk`]: what fits in a message with
/// the variant's own fields (three varints and a tag).
const CHUNK: usize = proto::MAX_MSG - 64;

fn counter(name: &str, value: u64) -> Counter {
    Counter {
        name: name.to_owned(),
        value,
    }
}

pub(super) fn status(
    objects: &Objects,
    endpoint: &Endpoint<DeviceMemory>,
    port: &Port,
    cm: &CmService,
) -> Response {
    let clients = objects
        .sessions()
        .filter(|s| s.ready)
        .map(|s| ClientStatus {
            pid: s.pid,
            admin: s.admin,
            pds: s.pds.len() as u32,
            mrs: s.mrs.len() as u32,
            cqs: s.cqs.len() as u32,
            srqs: s.srqs.len() as u32,
            qps: s
                .qps
                .values()
                .map(|q| QpStatus {
                    qpn: q.qpn,
                    qp_type: q.qp_type as u8,
                    state: endpoint.qp(q.qpn).map_or(0, |e| e.state() as u8),
                    dest_qpn: q.attr.dest_qp_num,
                    dest: if q.attr.ah.dgid == [0; 16] {
                        String::new()
                    } else {
                        verbs::addr_of_gid(&q.attr.ah.dgid).to_string()
                    },
                })
                .collect(),
            cm_ids: cm.status_of(s.id),
            uid: objects.quota.uid_of(s.id).unwrap_or(0),
        })
        .collect();
    let l = objects.quota.limits();
    Response::Status {
        device: port.name().to_owned(),
        addrs: port.addrs().iter().map(|a| a.to_string()).collect(),
        netdev: port.netdev().to_owned(),
        clients,
        limits: KINDS
            .iter()
            .map(|&k| QuotaLimit {
                name: k.name().to_owned(),
                per_session: l.get(k).per_session,
                per_uid: l.get(k).per_uid,
            })
            .collect(),
        uids: objects
            .quota
            .by_uid()
            .map(|(uid, used)| UidUse {
                uid,
                used: used.into_iter().map(|(_, n)| n).collect(),
            })
            .collect(),
    }
}

/// Who asks for a Status or Stats that may not see everything: a uid
/// and the QPs of that uid's sessions.
pub struct Viewer {
    pub uid: u32,
    pub qpns: std::collections::BTreeSet<u32>,
}

/// `resp` (a Status or Stats reply) as `viewer` may see it: only that
/// uid's clients, uid use and QPs (None: all of them). Device-wide
/// figures stay, as the kernel's port counters are readable by all.
pub(super) fn restrict(resp: Response, viewer: Option<Viewer>) -> Response {
    let Some(Viewer { uid, qpns: own }) = viewer else {
        return resp;
    };
    match resp {
        Response::Status {
            device,
            addrs,
            netdev,
            clients,
            limits,
            uids,
        } => {
            let clients: Vec<ClientStatus> = clients.into_iter().filter(|c| c.uid == uid).collect();
            Response::Status {
                device,
                addrs,
                netdev,
                clients,
                limits,
                uids: uids.into_iter().filter(|u| u.uid == uid).collect(),
            }
        }
        Response::Stats { device, qps } => Response::Stats {
            device,
            qps: qps.into_iter().filter(|(q, _)| own.contains(q)).collect(),
        },
        other => other,
    }
}

/// A reply that may not fit in one message (Status, Stats with many QPs):
/// sent whole when it fits, else kept for session `id` and sent as
/// [`Response::Chunk`]s it fetches one after another (a snapshot: the
/// pieces are of one reply).
pub(super) fn paged(objects: &mut Objects, id: u32, resp: Response) -> Handled {
    let bytes = proto::encode_unbounded(&resp).map_err(|e| super::reply::Refused {
        errno: libc::EIO,
        msg: format!("encoding the reply: {e}"),
    })?;
    let s = objects.session_mut(id)?;
    if bytes.len() <= proto::MAX_MSG {
        s.pending_reply = None;
        return Ok(Reply::ok(resp));
    }
    s.pending_reply = Some(bytes);
    chunk(objects, id, 0)
}

/// The piece at `offset` of the reply kept by [`paged`]; the last piece
/// lets it go.
pub(super) fn chunk(objects: &mut Objects, id: u32, offset: u64) -> Handled {
    let s = objects.session_mut(id)?;
    let Some(all) = &s.pending_reply else {
        return refuse(libc::EINVAL, "no reply in pieces is pending");
    };
    let total = all.len() as u64;
    let Some(start) = usize::try_from(offset).ok().filter(|&o| o < all.len()) else {
        return refuse(libc::EINVAL, format!("offset {offset} not below {total}"));
    };
    let end = all.len().min(start + CHUNK);
    let bytes = all[start..end].to_vec();
    if end == all.len() {
        s.pending_reply = None;
    }
    Ok(Reply::ok(Response::Chunk {
        total,
        offset,
        bytes,
    }))
}

pub(super) fn stats(
    objects: &Objects,
    endpoint: &Endpoint<DeviceMemory>,
    e: &EngineCounters,
    shortcut: bool,
    port: &Port,
    d: &DaemonCounters,
    cm: &CmService,
) -> Response {
    let m = endpoint.memory().stats();
    let mut device = vec![
        counter("sent_pkts", e.sent_pkts),
        counter("sent_bytes", e.sent_bytes),
        counter("rcvd_pkts", e.rcvd_pkts),
        counter("rcvd_bytes", e.rcvd_bytes),
        counter("icrc_errors", e.icrc_errors),
        counter("icrc_nonzero_id", e.icrc_nonzero_id),
        counter("parse_errors", e.parse_errors),
        counter("unknown_qp", e.unknown_qp),
        counter("truncated", e.truncated),
        counter("send_errors", e.send_errors),
        counter("rx_syscalls", e.rx_syscalls),
        counter("tx_syscalls", e.tx_syscalls),
        counter("tx_full", e.tx_full),
        counter("tx_paused", e.tx_paused),
        // The intra-device shortcut: 1 when packets between QPs of this
        // device skip the socket (0: --force-udp); what took it, counted
        // in sent/rcvd_pkts too.
        counter("loopback", u64::from(shortcut)),
        counter("loopback_sent_pkts", e.loop_sent_pkts),
        counter("loopback_rcvd_pkts", e.loop_rcvd_pkts),
        counter("timer_fires", e.timer_fires),
        counter("mrs", m.mrs),
        counter("mr_bytes", m.bytes),
        counter("mr_registrations", m.registrations),
        counter("mr_failures", m.failures),
        counter("mr_deregistrations", d.mr_deregistrations),
        counter("mr_bytes_registered_total", d.mr_bytes_registered),
        counter("mr_reg_p50_ns", m.reg_p50_ns),
        counter("mr_reg_p99_ns", m.reg_p99_ns),
        counter("pds", objects.count(|s| s.pds.len()) as u64),
        counter("cqs", objects.count(|s| s.cqs.len()) as u64),
        counter("srqs", objects.count(|s| s.srqs.len()) as u64),
        counter("qps", objects.count(|s| s.qps.len()) as u64),
        counter("port_state", u64::from(port.attr().state)),
        counter("gids", port.attr().gids.len() as u64),
        counter("port_changes", d.port_changes),
        counter("gid_changes", d.gid_changes),
        counter(
            "clients",
            objects.sessions().filter(|s| s.ready).count() as u64,
        ),
        counter("clients_accepted", d.clients_accepted),
        counter("requests", d.requests),
        counter("requests_refused", d.requests_refused),
        counter("wqes_posted", d.wqes_posted),
        counter("bad_wqes", d.bad_wqes),
        counter("cqes_delivered", d.cqes_delivered),
        counter("cqes_dropped", d.cqes_dropped),
        counter("cq_overruns", d.cq_overruns),
        counter("channel_events", d.channel_events),
        counter("async_events", d.async_events),
        counter("async_events_dropped", d.async_events_dropped),
        counter("daemon_sleeps", d.sleeps),
        counter("doorbells", d.doorbells),
        counter("heap_trims", d.heap_trims),
        counter("recv_refills", d.recv_refills),
        counter("read_ahead_hits", endpoint.memory().read_ahead_hits()),
        counter("writes_combined", endpoint.memory().combine_counts().0),
        counter(
            "combined_write_errors",
            endpoint.memory().combine_counts().1,
        ),
        // The log's rate limits and rotation (daemon/log.rs).
        counter(
            "log_lines_left_out",
            super::log::suppressed_and_rotations().0,
        ),
        counter("log_rotations", super::log::suppressed_and_rotations().1),
    ];
    // rxe's hw_counters, summed over every QP the device had.
    let t = objects.qp_totals(endpoint);
    device.extend(
        t.device_totals()
            .into_iter()
            .map(|(name, value)| counter(name, value)),
    );
    // rdma_cm: MADs by type, retries, rejects by reason, timeouts, drops.
    device.push(counter("gsi_dropped", endpoint.gsi_dropped()));
    device.push(counter("cm_events", cm.events_sent));
    device.push(counter("cm_events_dropped", cm.events_dropped));
    let (ids, conns) = cm.engine().object_counts();
    device.push(counter("cm_ids", ids as u64));
    device.push(counter("cm_connections", conns as u64));
    device.extend(
        cm.engine()
            .counters()
            .list()
            .into_iter()
            .map(|(name, value)| Counter { name, value }),
    );
    let qps = objects
        .qpns()
        .into_iter()
        .filter_map(|qpn| {
            let c = endpoint.qp(qpn)?.counters();
            let list = c.list().into_iter().map(|(n, v)| counter(n, v)).collect();
            Some((qpn, list))
        })
        .collect();
    Response::Stats { device, qps }
}

/// Refused (EBUSY, naming the client pids) while applications are
/// connected, unless forced; forced, every application gets
/// IBV_EVENT_DEVICE_FATAL first.
pub(super) fn shutdown(objects: &mut Objects, id: u32, admin: bool, force: bool) -> Handled {
    if !admin {
        return refuse(libc::EPERM, "only an admin connection may stop the daemon");
    }
    if objects.session(id).is_some_and(|s| s.other_user) {
        return refuse(
            libc::EPERM,
            "only the daemon's user (or root) may stop the daemon",
        );
    }
    let apps: Vec<u32> = objects
        .sessions()
        .filter(|s| s.ready && !s.admin && s.id != id)
        .map(|s| s.pid)
        .collect();
    if !apps.is_empty() && !force {
        let pids: Vec<String> = apps.iter().map(u32::to_string).collect();
        return refuse(
            libc::EBUSY,
            format!("clients still open: pid {}", pids.join(", ")),
        );
    }
    info!(
        "shutdown requested{}",
        if apps.is_empty() {
            String::new()
        } else {
            format!(" (forced, {} clients)", apps.len())
        }
    );
    objects.fatal_to_all();
    Ok(Reply::ok(Response::Ok))
}
