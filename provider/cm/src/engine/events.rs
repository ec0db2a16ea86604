//! Reporting what happened to a connection to its id's owner, with
//! rdma_cm's gate: events only while the id is connecting/connected
//! (RDMA_CM_CONNECT), TIMEWAIT_EXIT only after DISCONNECTED.

use rxu_abi::proto::cm::{event, CmEventRecord};

use super::ids::IdState;
use super::Cm;

impl Cm {
    /// Reports `rec` for the conn's id if it is still there and connecting.
    /// DISCONNECTED moves the id to the disconnect state (reported once).
    pub(crate) fn conn_event(&mut self, id: Option<u32>, rec: CmEventRecord) {
        let Some(n) = id else {
            return;
        };
        let Some(i) = self.ids.get_mut(&n) else {
            return;
        };
        let ok = match rec.event {
            event::TIMEWAIT_EXIT => i.state == IdState::Disconnect,
            _ => i.state == IdState::Connect,
        };
        if !ok {
            return;
        }
        if rec.event == event::DISCONNECTED {
            i.state = IdState::Disconnect;
        }
        self.push_event(n, rec);
    }

    /// An event with only a type and a status.
    pub(crate) fn conn_event_status(&mut self, id: Option<u32>, ev: u32, status: i32) {
        self.conn_event(
            id,
            CmEventRecord {
                event: ev,
                status,
                ..Default::default()
            },
        );
    }
}
