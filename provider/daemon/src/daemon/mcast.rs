//! Multicast on the device: `ibv_attach_mcast` / `ibv_detach_mcast` of a
//! client's QP, the rdma_cm joins (`rdma_join_multicast`), and keeping the
//! driver's IP groups equal to what both want (a group is received while
//! some QP is attached to it or some rdma_cm id joined it, send-only
//! joins aside). The endpoint owns the attachments, the CM service the
//! joins, the driver the sockets; this file only reconciles them.

use rxu_abi::proto::Response;
use transport::engine::mcast::ipv4_groups;
use transport::engine::EngineError;

use super::device::Device;
use super::log::debug;
use super::reply::{refuse, Handled, Reply};
use crate::verbs;

/// The errno a client sees for an engine refusal.
pub fn errno_of(e: &EngineError) -> i32 {
    match e {
        EngineError::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        EngineError::TooManyGroups(_) => libc::ENOMEM,
        EngineError::Config(_) => libc::EOPNOTSUPP,
        _ => libc::EINVAL,
    }
}

impl Device {
    /// `ibv_attach_mcast` (`attach`) or `ibv_detach_mcast` of session
    /// `id`'s QP `qpn` to the group of `gid`.
    pub(super) fn mcast(&mut self, id: u32, qpn: u32, gid: [u8; 16], attach: bool) -> Handled {
        if !self.objects.session_mut(id)?.qps.contains_key(&qpn) {
            return refuse(libc::EINVAL, format!("no QP {qpn:#x}"));
        }
        let group = verbs::addr_of_gid(&gid);
        let fail = |e: EngineError| refuse(errno_of(&e), e.to_string());
        if !attach {
            if let Err(e) = self.endpoint.detach_mcast(qpn, group) {
                return fail(e);
            }
            // Leaving a group can only fail to close a socket: not the
            // client's concern.
            let _ = self.sync_groups();
            return Ok(Reply::ok(Response::Ok));
        }
        let was = self.endpoint.mcast_members(group).contains(&qpn);
        if let Err(e) = self.endpoint.attach_mcast(qpn, group) {
            return fail(e);
        }
        if let Err(e) = self.sync_groups() {
            if !was {
                let _ = self.endpoint.detach_mcast(qpn, group);
                let _ = self.sync_groups();
            }
            return fail(e);
        }
        debug!("client {id}: QP {qpn:#x} attached to {group}");
        Ok(Reply::ok(Response::Ok))
    }

    /// The driver receives exactly the groups some QP is attached to or
    /// some rdma_cm id joined.
    pub(super) fn sync_groups(&mut self) -> Result<(), EngineError> {
        let mut want = ipv4_groups(self.endpoint.mcast_groups());
        for g in self.cm.mcast_groups() {
            if !want.contains(&g) {
                want.push(g);
            }
        }
        self.driver.sync_groups(&want)
    }

    /// After an rdma_cm request: the IP groups follow the joins, and the
    /// new joins hear MULTICAST_JOIN, or MULTICAST_ERROR when the device
    /// could not join.
    pub(super) fn settle_cm_joins(&mut self) {
        if !self.cm.has_mcast() && self.driver.groups().next().is_none() {
            return;
        }
        let r = self.sync_groups();
        self.cm.settle_joins(r.as_ref().err().map(errno_of));
        if r.is_err() {
            // The failed joins are gone: so are the groups only they wanted.
            let _ = self.sync_groups();
        }
    }
}
