//! rdma_cm ids: creation by bind, address/route resolution, options,
//! ownership, and what follows a local address that disappears.

use std::net::{IpAddr, SocketAddr};

use rxu_abi::proto::cm::{event, port_space, CmEventRecord, CmOption, RouteInfo};
use rxu_abi::proto::QpType;

use super::ports::{self, Holder};
use super::route::Path;
use super::{Cm, CmError, Owner};

/// The rdma_cm state of an id (`enum rdma_cm_state`, the part rxud sees).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IdState {
    Bound,
    Resolved,
    Listen,
    /// Connecting or connected (the kernel's RDMA_CM_CONNECT).
    Connect,
    /// DISCONNECTED was reported.
    Disconnect,
}

impl IdState {
    pub fn name(self) -> &'static str {
        match self {
            IdState::Bound => "bound",
            IdState::Resolved => "resolved",
            IdState::Listen => "listen",
            IdState::Connect => "connect",
            IdState::Disconnect => "disconnect",
        }
    }
}

pub(crate) struct Id {
    pub owner: Owner,
    pub ps: u16,
    pub qp_type: QpType,
    pub local: SocketAddr,
    pub remote: Option<SocketAddr>,
    /// Bound ids hold their port; ids made by a listener do not.
    pub holds_port: bool,
    pub reuseaddr: bool,
    pub afonly: bool,
    pub tos: Option<u8>,
    pub ack_timeout: Option<u8>,
    pub state: IdState,
    /// Listeners: CONNECT_REQUESTs that may wait for an answer.
    pub backlog: usize,
    /// The IB CM connection (local comm ID), while there is one.
    pub conn: Option<u32>,
    /// Own starting PSN (REQ/REP Starting PSN, RTR rq_psn).
    pub seq_num: u32,
    /// UD: the Q_Key once fixed.
    pub qkey: Option<u32>,
    /// The route (after resolve, or from the REQ for a passive id).
    pub path: Option<Path>,
    /// ADDR_CHANGE was reported.
    pub addr_gone: bool,
}

impl Id {
    pub fn holder(&self, id: u32) -> Holder {
        Holder {
            id,
            ip: self.local.ip(),
            reuseaddr: self.reuseaddr,
            afonly: self.afonly,
        }
    }

    pub fn tos(&self) -> u8 {
        self.tos.unwrap_or(0)
    }
}

/// Port spaces rdma_cm serves and the QP types each allows (ucma's rules:
/// RDMA_PS_IPOIB ids are UD, as RDMA_PS_UDP's, with ports of their own).
fn ps_allows(ps: u16, qp_type: QpType) -> bool {
    match ps {
        port_space::TCP => qp_type == QpType::Rc,
        port_space::UDP | port_space::IPOIB => qp_type == QpType::Ud,
        port_space::IB => true,
        _ => false,
    }
}

impl Cm {
    pub(crate) fn id_ref(&self, id: u32) -> Result<&Id, CmError> {
        self.ids.get(&id).ok_or(CmError::noent(id))
    }

    pub(crate) fn id_mut(&mut self, id: u32) -> Result<&mut Id, CmError> {
        self.ids.get_mut(&id).ok_or(CmError::noent(id))
    }

    fn alloc_id_number(&mut self) -> u32 {
        loop {
            let n = self.next_id;
            self.next_id = self.next_id.checked_add(1).unwrap_or(1);
            if n != 0 && !self.ids.contains_key(&n) {
                return n;
            }
        }
    }

    pub(crate) fn new_id(&mut self, id: Id) -> u32 {
        let n = self.alloc_id_number();
        self.by_owner.insert((id.owner, n));
        self.ids.insert(n, id);
        n
    }

    pub(crate) fn packet_life_time(&self, ack_timeout: Option<u8>) -> u8 {
        match ack_timeout {
            Some(t) if t > 0 => t - 1,
            _ => self.cfg.timing.packet_life_time,
        }
    }

    fn holders(&self, ps: u16, port: u16) -> Vec<Holder> {
        self.ports
            .holders(ps, port)
            .iter()
            .filter_map(|&i| self.ids.get(&i).map(|x| x.holder(i)))
            .collect()
    }

    /// Creates an id bound to `addr` (`rdma_bind_addr`; port 0: ephemeral).
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        &mut self,
        owner: Owner,
        ps: u16,
        qp_type: QpType,
        addr: SocketAddr,
        reuseaddr: bool,
        afonly: bool,
        tos: Option<u8>,
    ) -> Result<(u32, SocketAddr), CmError> {
        if !ps_allows(ps, qp_type) {
            return Err(CmError::inval(format!(
                "port space {ps:#x} does not serve {qp_type:?}"
            )));
        }
        let ip = addr.ip();
        // ENODEV, as the kernel's answer for an address no RDMA device
        // serves: EADDRNOTAVAIL stays the port-sharing conflict's errno,
        // so the emulator can tell "another device" from "port taken".
        if !ip.is_unspecified() && !self.cfg.local_addrs.contains(&ip) {
            return Err(CmError::new(
                libc::ENODEV,
                format!("{ip} is not an address of this device"),
            ));
        }
        // AF_INET ids are always af-only (cma_bind_addr).
        let afonly = afonly || ip.is_ipv4();
        let mut me = Holder {
            id: 0,
            ip,
            reuseaddr,
            afonly,
        };
        let port = if addr.port() == 0 {
            let start = self.rng.next_u32();
            self.ports
                .ephemeral(ps, self.cfg.port_range, start)
                .ok_or_else(|| CmError::new(libc::EADDRNOTAVAIL, "no ephemeral port left"))?
        } else {
            me.id = u32::MAX;
            ports::check(&me, &self.holders(ps, addr.port()), reuseaddr)
                .map_err(|e| CmError::new(e, format!("port {} is taken", addr.port())))?;
            addr.port()
        };
        let local = SocketAddr::new(ip, port);
        let seq_num = self.rng.next_u32() & 0xFF_FFFF;
        let id = self.new_id(Id {
            owner,
            ps,
            qp_type,
            local,
            remote: None,
            holds_port: true,
            reuseaddr,
            afonly,
            tos,
            ack_timeout: None,
            state: IdState::Bound,
            backlog: 0,
            conn: None,
            seq_num,
            qkey: None,
            path: None,
            addr_gone: false,
        });
        self.ports.add(ps, port, id);
        Ok((id, local))
    }

    /// What QUERY_ROUTE reports for the id.
    pub fn route(&self, id: u32) -> Result<RouteInfo, CmError> {
        let i = self.id_ref(id)?;
        let guid = self.cfg.node_guid;
        Ok(match &i.path {
            Some(p) => p.route_info(guid, true),
            None => Path::synth(
                i.local,
                None,
                self.cfg.mtu,
                i.tos(),
                self.packet_life_time(i.ack_timeout),
            )
            .route_info(guid, false),
        })
    }

    /// `rdma_resolve_addr` + route: the id's peer is `dst`.
    pub fn resolve(&mut self, id: u32, dst: SocketAddr) -> Result<RouteInfo, CmError> {
        let (mtu, local_addrs) = (self.cfg.mtu, self.cfg.local_addrs.clone());
        let life_default = self.cfg.timing.packet_life_time;
        let i = self.id_mut(id)?;
        if !matches!(i.state, IdState::Bound | IdState::Resolved) {
            return Err(CmError::inval("resolve: the id is listening or connected"));
        }
        if dst.ip().is_unspecified() || dst.is_ipv4() != i.local.is_ipv4() && i.afonly {
            return Err(CmError::inval(format!(
                "cannot reach {dst} from {}",
                i.local
            )));
        }
        if i.local.ip().is_unspecified() {
            // The source: the destination itself when it is ours, else
            // the first address of the same family.
            let src = if local_addrs.contains(&dst.ip()) {
                Some(dst.ip())
            } else {
                local_addrs
                    .iter()
                    .copied()
                    .find(|a| a.is_ipv4() == dst.is_ipv4())
            };
            let src = src.ok_or_else(|| {
                CmError::new(libc::ENETUNREACH, format!("no source address for {dst}"))
            })?;
            i.local.set_ip(src);
        }
        let life = match i.ack_timeout {
            Some(t) if t > 0 => t - 1,
            _ => life_default,
        };
        let path = Path::synth(i.local, Some(dst), mtu, i.tos(), life);
        let guid = self.cfg.node_guid;
        let i = self.id_mut(id)?;
        i.remote = Some(dst);
        i.state = IdState::Resolved;
        let info = path.route_info(guid, true);
        i.path = Some(path);
        Ok(info)
    }

    /// `rdma_set_option` (the kernel's state rules for each option).
    pub fn set_option(&mut self, id: u32, opt: CmOption) -> Result<(), CmError> {
        let i = self.id_mut(id)?;
        let early = matches!(i.state, IdState::Bound | IdState::Resolved);
        match opt {
            CmOption::Tos(t) => {
                i.tos = Some(t);
                if let (true, Some(p)) = (early, i.path.as_mut()) {
                    p.traffic_class = t;
                }
            }
            CmOption::ReuseAddr(r) => {
                if !r || i.state == IdState::Listen {
                    return Err(CmError::inval("reuseaddr can only be set before listen"));
                }
                i.reuseaddr = true;
            }
            CmOption::AfOnly(a) => {
                if !early {
                    return Err(CmError::inval(
                        "afonly can only be set before listen/connect",
                    ));
                }
                i.afonly = a || i.local.is_ipv4();
            }
            CmOption::AckTimeout(t) => {
                if i.qp_type != QpType::Rc {
                    return Err(CmError::inval("ack timeout is for RC ids"));
                }
                i.ack_timeout = Some(t);
                if let (true, Some(p), true) = (early, i.path.as_mut(), t > 0) {
                    p.packet_life_time = t - 1;
                }
            }
        }
        Ok(())
    }

    /// `rdma_migrate_id`: further events go to `owner`.
    pub fn set_owner(&mut self, id: u32, owner: Owner) -> Result<(), CmError> {
        let i = self.id_mut(id)?;
        let old = std::mem::replace(&mut i.owner, owner);
        self.by_owner.remove(&(old, id));
        self.by_owner.insert((owner, id));
        Ok(())
    }

    /// The device's addresses changed: ids bound to an address it lost get
    /// ADDR_CHANGE (once).
    pub fn set_local_addrs(&mut self, addrs: &[IpAddr]) {
        self.cfg.local_addrs = addrs.to_vec();
        let gone: Vec<u32> = self
            .ids
            .iter()
            .filter(|(_, i)| {
                let ip = i.local.ip();
                !i.addr_gone && !ip.is_unspecified() && !addrs.contains(&ip)
            })
            .map(|(&n, _)| n)
            .collect();
        for n in gone {
            if let Some(i) = self.ids.get_mut(&n) {
                i.addr_gone = true;
            }
            self.push_event(
                n,
                CmEventRecord {
                    event: event::ADDR_CHANGE,
                    ..Default::default()
                },
            );
        }
    }
}
