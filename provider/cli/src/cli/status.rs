//! `rxu status`: every device in the runtime directory, what its daemon
//! says about itself (admin Status and QueryPort), and an ibdev2netdev
//! style line per device.

use std::fmt::Write as _;
use std::time::Duration;

use super::admin::AdminConn;
use super::devices::{self, Found};
use super::netif;
use rxu_abi::paths;
use rxu_abi::proto::cm::CmIdStatus;
use rxu_abi::proto::{ClientStatus, PortAttr, QpStatus, QuotaLimit, Request, Response, UidUse};

/// What the daemon answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Live {
    pub addrs: Vec<String>,
    pub netdev: String,
    pub clients: Vec<ClientStatus>,
    pub port: Option<PortAttr>,
    /// The daemon's quota: kinds and limits, and each uid's use.
    pub limits: Vec<QuotaLimit>,
    pub uids: Vec<UidUse>,
}

/// One device's status: what is on disk plus, if it answers, the daemon's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStatus {
    pub found: Found,
    pub live: Option<Live>,
    /// Why `live` is None.
    pub error: Option<String>,
    /// Whether the netdev is administratively up (for ibdev2netdev).
    pub netdev_up: Option<bool>,
}

/// Queries every device; an empty list when none is up.
pub fn collect() -> Vec<DeviceStatus> {
    let ifaces = netif::interfaces().unwrap_or_default();
    devices::list()
        .into_iter()
        .map(|found| {
            let (live, error) = match query(&found.name) {
                Ok(l) => (Some(l), None),
                Err(e) => (None, Some(e)),
            };
            let netdev = live
                .as_ref()
                .map(|l| l.netdev.clone())
                .or_else(|| tree_netdev(&found.name));
            let netdev_up = netdev.and_then(|n| {
                ifaces
                    .iter()
                    .find(|i| i.name == n)
                    .map(netif::Iface::is_running)
            });
            DeviceStatus {
                found,
                live,
                error,
                netdev_up,
            }
        })
        .collect()
}

fn query(name: &str) -> Result<Live, String> {
    let mut c = AdminConn::connect(&paths::socket_path(name), Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    let mut live = match c.call_ok(&Request::Status).map_err(|e| e.to_string())? {
        Response::Status {
            addrs,
            netdev,
            clients,
            limits,
            uids,
            ..
        } => Live {
            addrs,
            netdev,
            clients,
            port: None,
            limits,
            uids,
        },
        other => return Err(format!("unexpected reply to Status: {other:?}")),
    };
    live.port = c.query_port(1).ok();
    Ok(live)
}

/// The netdev the tree names (for a device whose daemon is gone).
fn tree_netdev(name: &str) -> Option<String> {
    let p = paths::sysfs_root()
        .join("class/infiniband")
        .join(name)
        .join("rxu/netdev");
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

pub fn render(d: &DeviceStatus) -> String {
    let f = &d.found;
    let mut s = String::new();
    let uverbs = f
        .uverbs
        .map(rxud::devnode::uverbs_name)
        .unwrap_or_else(|| "no device node".into());
    let pid = f
        .pid
        .map(|p| format!("daemon pid {p}"))
        .unwrap_or_else(|| "no pid file".into());
    let _ = write!(s, "{}: {uverbs}, {pid}", f.name);
    match &d.live {
        Some(l) => {
            let _ = write!(s, ", netdev {}", l.netdev);
            if let Some(p) = &l.port {
                let _ = write!(
                    s,
                    ", port {}, active_mtu {}",
                    port_state_name(p.state),
                    mtu_name(p.active_mtu)
                );
            }
            let _ = writeln!(s);
            let _ = writeln!(s, "    addresses: {}", l.addrs.join(" "));
            s.push_str(&render_clients(&l.clients));
            s.push_str(&render_quota(&l.limits, &l.uids));
        }
        None => {
            let why = d.error.as_deref().unwrap_or("no answer");
            let _ = writeln!(s, ", state DOWN (daemon not answering: {why})");
            let _ = writeln!(s, "    clean up with `rxu down --name {}`", f.name);
        }
    }
    if let Some(line) = ibdev2netdev_line(d) {
        let _ = writeln!(s, "{line}");
    }
    s
}

/// `rxu0 port 1 ==> lo (Up)`, as ibdev2netdev prints it (the netdev's
/// operational state), if the netdev is known.
pub fn ibdev2netdev_line(d: &DeviceStatus) -> Option<String> {
    let nd = d
        .live
        .as_ref()
        .map(|l| l.netdev.clone())
        .or_else(|| tree_netdev(&d.found.name))?;
    let state = match d.netdev_up {
        Some(true) => "Up",
        Some(false) => "Down",
        None => "Unknown",
    };
    Some(format!("{} port 1 ==> {nd} ({state})", d.found.name))
}

/// The non-admin clients and their objects, indented, one QP per line.
pub fn render_clients(clients: &[ClientStatus]) -> String {
    let mut s = String::new();
    let users: Vec<&ClientStatus> = clients.iter().filter(|c| !c.admin).collect();
    if users.is_empty() {
        s.push_str("    clients: none\n");
        return s;
    }
    let _ = writeln!(s, "    clients: {}", users.len());
    for c in users {
        let _ = writeln!(
            s,
            "      pid {}: {} pd, {} mr, {} cq, {} srq, {} qp",
            c.pid,
            c.pds,
            c.mrs,
            c.cqs,
            c.srqs,
            c.qps.len()
        );
        if !c.cm_ids.is_empty() {
            s.pop();
            let _ = writeln!(s, ", {} rdma_cm ids", c.cm_ids.len());
        }
        for q in &c.qps {
            let _ = writeln!(s, "        {}", qp_line(q));
        }
        for id in &c.cm_ids {
            let _ = writeln!(s, "        {}", cm_line(id));
        }
    }
    s
}

/// The quota: a line per kind with its limits per client and per uid,
/// and what each uid holds of it (uids holding none left out).
pub fn render_quota(limits: &[QuotaLimit], uids: &[UidUse]) -> String {
    let mut s = String::new();
    if limits.is_empty() {
        return s;
    }
    let n = |v: u64| {
        if v == u64::MAX {
            "max".to_owned()
        } else {
            v.to_string()
        }
    };
    let _ = writeln!(s, "    limits (per client / per uid) and use by uid:");
    for (i, l) in limits.iter().enumerate() {
        let _ = write!(
            s,
            "      {:<12} {:>8} / {:<8}",
            l.name,
            n(l.per_session),
            n(l.per_uid)
        );
        for u in uids {
            match u.used.get(i) {
                Some(&v) if v > 0 => {
                    let _ = write!(s, " uid {}: {}", u.uid, n(v));
                }
                _ => {}
            }
        }
        let _ = writeln!(s);
    }
    s
}

/// One rdma_cm id: `cm 3 TCP listen 127.0.0.1:7174`,
/// `cm 4 TCP established 127.0.0.1:7174 -> 127.0.0.2:41234 qp 17`.
pub fn cm_line(c: &CmIdStatus) -> String {
    let mut s = format!("cm {} {} {}", c.id, c.ps, c.state);
    if let Some(l) = c.local {
        let _ = write!(s, " {l}");
    }
    if let Some(r) = c.remote {
        let _ = write!(s, " -> {r}");
    }
    if c.qpn != 0 {
        let _ = write!(s, " qp {}", c.qpn);
    }
    s
}

pub fn qp_line(q: &QpStatus) -> String {
    let mut s = format!(
        "qp {} {} {}",
        q.qpn,
        qp_type_name(q.qp_type),
        qp_state_name(q.state)
    );
    if q.dest_qpn != 0 || !q.dest.is_empty() {
        let _ = write!(s, " -> qp {}", q.dest_qpn);
        if !q.dest.is_empty() {
            let _ = write!(s, " at {}", q.dest);
        }
    }
    s
}

/// `enum ibv_qp_type`, named as the shared vocabulary names it.
pub fn qp_type_name(t: u8) -> String {
    match transport::verbs::QpType::from_ibv(u32::from(t)) {
        Some(q) => q.name().into(),
        None => format!("type{t}"),
    }
}

/// `enum ibv_qp_state`.
pub fn qp_state_name(s: u8) -> String {
    match s {
        0 => "RESET".into(),
        1 => "INIT".into(),
        2 => "RTR".into(),
        3 => "RTS".into(),
        4 => "SQD".into(),
        5 => "SQE".into(),
        6 => "ERR".into(),
        n => format!("state{n}"),
    }
}

/// `enum ibv_port_state`.
pub fn port_state_name(s: u8) -> String {
    match s {
        0 => "NOP".into(),
        1 => "DOWN".into(),
        2 => "INIT".into(),
        3 => "ARMED".into(),
        4 => "ACTIVE".into(),
        5 => "ACTIVE_DEFER".into(),
        n => format!("state{n}"),
    }
}

/// `enum ibv_mtu` as bytes.
pub fn mtu_name(m: u8) -> String {
    match m {
        1..=5 => (128u32 << m).to_string(),
        n => format!("mtu{n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DeviceStatus {
        DeviceStatus {
            found: Found {
                name: "rxu0".into(),
                uverbs: Some(2),
                pid: Some(4321),
                socket: true,
            },
            live: Some(Live {
                addrs: vec!["127.0.0.1".into(), "::1".into()],
                netdev: "lo".into(),
                clients: vec![
                    ClientStatus {
                        pid: 99,
                        admin: true,
                        ..Default::default()
                    },
                    ClientStatus {
                        pid: 777,
                        admin: false,
                        pds: 1,
                        mrs: 2,
                        cqs: 2,
                        srqs: 0,
                        qps: vec![
                            QpStatus {
                                qpn: 17,
                                qp_type: 2,
                                state: 3,
                                dest_qpn: 18,
                                dest: "127.0.0.1".into(),
                            },
                            QpStatus {
                                qpn: 19,
                                qp_type: 4,
                                state: 3,
                                dest_qpn: 0,
                                dest: String::new(),
                            },
                        ],
                        ..Default::default()
                    },
                    ClientStatus {
                        pid: 778,
                        cm_ids: vec![
                            CmIdStatus {
                                id: 1,
                                ps: "TCP".into(),
                                state: "listen".into(),
                                local: Some("127.0.0.1:7174".parse().unwrap()),
                                remote: None,
                                qpn: 0,
                            },
                            CmIdStatus {
                                id: 2,
                                ps: "TCP".into(),
                                state: "connect/established".into(),
                                local: Some("127.0.0.1:7174".parse().unwrap()),
                                remote: Some("127.0.0.2:40000".parse().unwrap()),
                                qpn: 17,
                            },
                        ],
                        ..Default::default()
                    },
                ],
                port: Some(PortAttr {
                    state: 4,
                    active_mtu: 5,
                    ..Default::default()
                }),
                limits: vec![
                    QuotaLimit {
                        name: "qps".into(),
                        per_session: 4096,
                        per_uid: 8192,
                    },
                    QuotaLimit {
                        name: "mr_bytes".into(),
                        per_session: u64::MAX,
                        per_uid: u64::MAX,
                    },
                ],
                uids: vec![
                    UidUse {
                        uid: 0,
                        used: vec![0, 0],
                    },
                    UidUse {
                        uid: 1000,
                        used: vec![2, 4096],
                    },
                ],
            }),
            error: None,
            netdev_up: Some(true),
        }
    }

    #[test]
    fn renders_device_clients_qps_and_ibdev2netdev_line() {
        let out = render(&sample());
        let want = "\
rxu0: uverbs2, daemon pid 4321, netdev lo, port ACTIVE, active_mtu 4096
    addresses: 127.0.0.1 ::1
    clients: 2
      pid 777: 1 pd, 2 mr, 2 cq, 0 srq, 2 qp
        qp 17 RC RTS -> qp 18 at 127.0.0.1
        qp 19 UD RTS
      pid 778: 0 pd, 0 mr, 0 cq, 0 srq, 0 qp, 2 rdma_cm ids
        cm 1 TCP listen 127.0.0.1:7174
        cm 2 TCP connect/established 127.0.0.1:7174 -> 127.0.0.2:40000 qp 17
    limits (per client / per uid) and use by uid:
      qps              4096 / 8192     uid 1000: 2
      mr_bytes          max / max      uid 1000: 4096
rxu0 port 1 ==> lo (Up)
";
        assert_eq!(out, want);
    }

    #[test]
    fn renders_a_dead_device() {
        let mut d = sample();
        d.live = None;
        d.error = Some("no daemon listens".into());
        d.found.name = "rxu-test-none".into();
        let out = render(&d);
        assert!(out.starts_with("rxu-test-none: uverbs2, daemon pid 4321, state DOWN"));
        assert!(out.contains("rxu down --name rxu-test-none"));
    }

    #[test]
    fn names() {
        assert_eq!(qp_type_name(3), "UC");
        assert_eq!(qp_type_name(9), "XRC_SEND");
        assert_eq!(qp_type_name(10), "XRC_RECV");
        assert_eq!(qp_type_name(8), "type8");
        assert_eq!(qp_state_name(6), "ERR");
        assert_eq!(port_state_name(1), "DOWN");
        assert_eq!(mtu_name(3), "1024");
        assert_eq!(mtu_name(0), "mtu0");
    }
}
