//! Listeners: `rdma_listen`, finding the listener of an incoming REQ or
//! SIDR_REQ (service ID, then the rdma_cm header's destination), backlog.

use rxu_abi::proto::QpType;

use super::conn::ConnState;
use super::ids::IdState;
use super::ports;
use super::{Cm, CmError};
use crate::wire::{port_of, ps_of, CmaHeader};

/// ucma's ceiling (and what a backlog <= 0 means): `max_backlog`.
const MAX_BACKLOG: usize = 1024;

/// (port space, port) of an rdma_cm IP service ID (upper 32 bits zero).
pub(crate) fn ip_service(sid: u64) -> Option<(u16, u16)> {
    (sid >> 32 == 0).then(|| (ps_of(sid), port_of(sid)))
}

/// Why no listener takes a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// Nobody listens on the service ID (REJ 8 / SIDR unsupported).
    NoService,
    /// Listeners on the port, but none for this address or QP type; the
    /// kernel's rdma_cm handler fails and the IB CM rejects (REJ 28 /
    /// SIDR reject).
    NoMatch,
}

impl Cm {
    pub fn listen(&mut self, id: u32, backlog: i32) -> Result<(), CmError> {
        let b = if backlog > 0 && (backlog as usize) < MAX_BACKLOG {
            backlog as usize
        } else {
            MAX_BACKLOG
        };
        let i = self.id_mut(id)?;
        if i.state == IdState::Listen {
            // ucma updates the backlog, rdma_listen refuses the rest.
            i.backlog = b;
            return Err(CmError::inval("already listening"));
        }
        if !matches!(i.state, IdState::Bound) || !i.holds_port {
            return Err(CmError::inval("listen needs a bound id"));
        }
        let (ps, port, me) = (i.ps, i.local.port(), i.holder(id));
        if i.reuseaddr {
            // A listener must be alone on its address (rdma_listen).
            let others: Vec<_> = self
                .ports
                .holders(ps, port)
                .iter()
                .filter_map(|&o| self.ids.get(&o).map(|x| x.holder(o)))
                .collect();
            ports::check(&me, &others, false)
                .map_err(|e| CmError::new(e, format!("port {port} is shared")))?;
        }
        let i = self.id_mut(id)?;
        i.reuseaddr = false;
        i.backlog = b;
        i.state = IdState::Listen;
        Ok(())
    }

    /// The listener for a request to service (`ps`, `port`) whose rdma_cm
    /// header is `hdr` (`cma_match_private_data`, `cma_check_req_qp_type`).
    pub(crate) fn find_listener(
        &self,
        ps: u16,
        port: u16,
        hdr: Option<&CmaHeader>,
        qp_type: QpType,
    ) -> Result<u32, Miss> {
        let listeners: Vec<u32> = self
            .ports
            .holders(ps, port)
            .iter()
            .copied()
            .filter(|n| self.ids.get(n).is_some_and(|i| i.state == IdState::Listen))
            .collect();
        if listeners.is_empty() {
            return Err(Miss::NoService);
        }
        let hdr = hdr.ok_or(Miss::NoMatch)?;
        if !self.cfg.local_addrs.contains(&hdr.dst) {
            return Err(Miss::NoMatch);
        }
        let fits = |n: &u32, specific: bool| {
            let i = &self.ids[n];
            let ip = i.local.ip();
            let addr_ok = if ip.is_unspecified() {
                !specific && (!i.afonly || ip.is_ipv4() == hdr.dst.is_ipv4())
            } else {
                specific && ip == hdr.dst
            };
            addr_ok && i.qp_type == qp_type
        };
        listeners
            .iter()
            .find(|n| fits(n, true))
            .or_else(|| listeners.iter().find(|n| fits(n, false)))
            .copied()
            .ok_or(Miss::NoMatch)
    }

    /// Whether the listener has room for one more unanswered request.
    pub(crate) fn backlog_has_room(&self, listener: u32) -> bool {
        let Some(l) = self.ids.get(&listener) else {
            return false;
        };
        let waiting = self
            .conns
            .values()
            .filter(|c| {
                c.parent == Some(listener)
                    && c.id.is_some()
                    && matches!(c.state, ConnState::ReqRcvd | ConnState::SidrReqRcvd)
            })
            .count();
        waiting < l.backlog
    }
}
