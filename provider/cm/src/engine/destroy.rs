//! `rdma_destroy_id` and a client's death: the id goes at once (its port
//! too); its connection tells the peer as `cm_destroy_id` does and may
//! linger in TimeWait without an id.

use std::ops::RangeBounds;
use std::time::Instant;

use rxu_abi::proto::cm::event;

use super::conn::ConnState;
use super::mads::{self, RejParts, SidrRepParts};
use super::{Cm, CmError, Owner};
use crate::wire::{msg_ref, rej_reason, sidr_status};

impl Cm {
    pub fn destroy(&mut self, now: Instant, id: u32) -> Result<(), CmError> {
        let i = self.ids.remove(&id).ok_or(CmError::noent(id))?;
        self.by_owner.remove(&(i.owner, id));
        if i.holds_port {
            self.ports.remove(i.ps, i.local.port(), id);
        }
        // Queued events of the id are not delivered; new ids announced by
        // an undelivered CONNECT_REQUEST go too (ucma_cleanup_events).
        let mut orphans = Vec::new();
        self.events.retain(|(_, r)| {
            if r.id != id {
                return true;
            }
            if r.event == event::CONNECT_REQUEST {
                orphans.push(r.new_id);
            }
            false
        });
        if let Some(comm) = i.conn {
            self.detach_conn(now, comm);
        }
        for n in orphans {
            let _ = self.destroy(now, n);
        }
        Ok(())
    }

    /// Destroys every id whose owner is in `owners` (a client went away);
    /// the work is in those ids only.
    pub fn destroy_owned(&mut self, now: Instant, owners: impl RangeBounds<Owner>) {
        let doomed: Vec<u32> = self.ids_owned(owners).collect();
        for n in doomed {
            // An earlier destroy may have taken it (CONNECT_REQUEST orphans).
            let _ = self.destroy(now, n);
        }
    }

    /// The conn loses its id: what the kernel sends for each state.
    fn detach_conn(&mut self, now: Instant, comm: u32) {
        let Some(c) = self.conns.get_mut(&comm) else {
            return;
        };
        c.id = None;
        let (tid, remote, remote_qpn) = (c.tid, c.remote_comm_id, c.remote_qpn);
        let rej = |local, msg_rejected, reason, ari: &[u8]| {
            mads::rej(
                tid,
                RejParts {
                    local,
                    remote,
                    msg_rejected,
                    reason,
                    ari,
                    private_data: &[],
                },
            )
        };
        let guid = self.cfg.node_guid.to_be_bytes();
        match c.state {
            ConnState::ReqSent => {
                let m = rej(comm, msg_ref::OTHER, rej_reason::TIMEOUT, &guid);
                self.conn_send(comm, m);
                self.free_conn(comm);
            }
            ConnState::ReqRcvd => {
                // With our comm ID, as from the kernel's MRA_REQ_SENT (see
                // `Cm::reject`).
                let m = rej(comm, msg_ref::REQ, rej_reason::CONSUMER_DEFINED, &[]);
                self.conn_send(comm, m);
                self.free_conn(comm);
            }
            ConnState::RepRcvd => {
                let m = rej(comm, msg_ref::REP, rej_reason::CONSUMER_DEFINED, &[]);
                self.conn_send(comm, m);
                self.free_conn(comm);
            }
            ConnState::RepSent => {
                let m = rej(comm, msg_ref::OTHER, rej_reason::CONSUMER_DEFINED, &[]);
                self.conn_send(comm, m);
                self.enter_timewait(now, comm);
            }
            ConnState::Established => {
                // One DREQ, not retransmitted: TimeWait at once.
                let m = mads::dreq(self.new_tid(comm), comm, remote, remote_qpn);
                self.conn_send(comm, m);
                self.enter_timewait(now, comm);
            }
            ConnState::DreqSent => self.enter_timewait(now, comm),
            ConnState::DreqRcvd => self.send_drep(now, comm),
            ConnState::TimeWait => {}
            ConnState::SidrReqSent => self.free_conn(comm),
            ConnState::SidrReqRcvd => {
                let m = mads::sidr_rep(
                    tid,
                    SidrRepParts {
                        request_id: remote,
                        status: sidr_status::REJECT,
                        qpn: 0,
                        qkey: 0,
                        service_id: c.service_id,
                        vendor_id: 0,
                        private_data: &[],
                    },
                );
                self.conn_send(comm, m);
                self.free_conn(comm);
            }
        }
    }
}
