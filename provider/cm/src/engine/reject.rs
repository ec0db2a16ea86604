//! REJ: `rdma_reject`, and a REJ received in any state (`cm_rej_handler`).

use std::time::Instant;

use rxu_abi::proto::cm::{event, CmEventParam, CmEventRecord};
use rxu_abi::proto::QpType;

use super::conn::ConnState;
use super::mads::{self, RejParts};
use super::{Cm, CmError};
use crate::wire::{msg_ref, rej_reason, Rej, REJ_PRIVATE};

impl Cm {
    /// `rdma_reject`: reason 0 (or 28) is consumer defined, 35 is ECE.
    pub fn reject(
        &mut self,
        now: Instant,
        id: u32,
        private_data: &[u8],
        reason: u8,
    ) -> Result<(), CmError> {
        let reason = match reason as u16 {
            0 | rej_reason::CONSUMER_DEFINED => rej_reason::CONSUMER_DEFINED,
            rej_reason::VENDOR_OPTION_NOT_SUPPORTED => rej_reason::VENDOR_OPTION_NOT_SUPPORTED,
            r => return Err(CmError::inval(format!("reject reason {r}"))),
        };
        if self.id_ref(id)?.qp_type == QpType::Ud {
            return self.sidr_reject(id, private_data);
        }
        if private_data.len() > REJ_PRIVATE {
            return Err(CmError::inval(format!(
                "REJ private data is at most {REJ_PRIVATE} bytes"
            )));
        }
        let Some((comm, c)) = self.conn_of(id) else {
            return Err(CmError::inval("no connection to reject"));
        };
        // ReqRcvd is the kernel's MRA_REQ_SENT (rdma_cm arms a delayed MRA
        // as it reports the REQ), where its REJ carries the local comm ID:
        // 0 only in a REJ from plain REQ_RCVD, which rdma_cm never rejects.
        let (local, msg_rejected) = match c.state {
            ConnState::ReqRcvd => (comm, msg_ref::REQ),
            ConnState::RepRcvd => (comm, msg_ref::REP),
            ConnState::ReqSent | ConnState::RepSent => (comm, msg_ref::OTHER),
            _ => return Err(CmError::inval("nothing to reject in this state")),
        };
        let state = c.state;
        let m = mads::rej(
            c.tid,
            RejParts {
                local,
                remote: c.remote_comm_id,
                msg_rejected,
                reason,
                ari: &[],
                private_data,
            },
        );
        self.conn_send(comm, m);
        if state == ConnState::RepSent {
            self.enter_timewait(now, comm);
        } else {
            self.free_conn(comm);
        }
        Ok(())
    }

    /// Which conn a REJ is for (`cm_acquire_rejected_id`).
    fn rejected_conn(&self, rej: &Rej) -> Option<u32> {
        if rej.reason == rej_reason::TIMEOUT {
            let mut g = [0u8; 8];
            g.copy_from_slice(&rej.ari[..8]);
            let guid = u64::from_be_bytes(g);
            return self.remote_ids.get(&(guid, rej.local_comm_id)).copied();
        }
        let c = self.conns.get(&rej.remote_comm_id)?;
        (rej.msg_rejected == msg_ref::REQ || c.remote_comm_id == rej.local_comm_id)
            .then_some(rej.remote_comm_id)
    }

    pub(crate) fn on_rej(&mut self, now: Instant, rej: &Rej) {
        let Some(comm) = self.rejected_conn(rej) else {
            self.counters.dropped_unknown += 1;
            return;
        };
        let c = &self.conns[&comm];
        let (state, id) = (c.state, c.id);
        let stale = rej.reason == rej_reason::STALE_CONN;
        match state {
            ConnState::ReqSent | ConnState::ReqRcvd | ConnState::RepSent => {
                if stale {
                    self.enter_timewait(now, comm);
                } else {
                    self.free_conn(comm);
                }
            }
            ConnState::RepRcvd | ConnState::DreqSent | ConnState::Established => {
                self.enter_timewait(now, comm);
            }
            _ => {
                self.counters.dropped_stale += 1;
                return;
            }
        }
        self.conn_event(
            id,
            CmEventRecord {
                event: event::REJECTED,
                status: rej.reason as i32,
                param: CmEventParam {
                    private_data: rej.private_data.to_vec(),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
    }
}
