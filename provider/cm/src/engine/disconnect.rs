//! Disconnection: `rdma_disconnect`, DREQ / DREP, and the DREQ the CM
//! sends to a connection a stale REQ/REP revealed.

use std::time::Instant;

use rxu_abi::proto::cm::event;

use super::conn::ConnState;
use super::ids::IdState;
use super::mads;
use super::{Cm, CmError, MadRx};
use crate::wire::{CmMad, Drep, Dreq};

impl Cm {
    /// `rdma_disconnect`: DREQ when established, DREP when the peer's DREQ
    /// came first, nothing in other states (as `ib_send_cm_dreq` /
    /// `ib_send_cm_drep` failing silently).
    pub fn disconnect(&mut self, now: Instant, id: u32) -> Result<(), CmError> {
        let i = self.id_ref(id)?;
        if !matches!(i.state, IdState::Connect | IdState::Disconnect) {
            return Err(CmError::inval("disconnect needs a connecting id"));
        }
        if let Some((comm, c)) = self.conn_of(id) {
            match c.state {
                ConnState::Established => self.send_dreq(now, comm),
                ConnState::DreqRcvd => self.send_drep(now, comm),
                _ => {}
            }
        }
        Ok(())
    }

    /// DREQ (retransmitted) from an established conn.
    pub(crate) fn send_dreq(&mut self, now: Instant, comm: u32) {
        let Some(c) = self.conns.get(&comm) else {
            return;
        };
        let tid = self.new_tid(comm);
        let m = mads::dreq(tid, comm, c.remote_comm_id, c.remote_qpn);
        let c = self.conns.get_mut(&comm).expect("checked");
        c.state = ConnState::DreqSent;
        c.mra_rcvd = false;
        self.conn_send_retrying(now, comm, m);
    }

    /// DREP for the DREQ received, then TimeWait.
    pub(crate) fn send_drep(&mut self, now: Instant, comm: u32) {
        let Some(c) = self.conns.get(&comm) else {
            return;
        };
        let m = mads::drep(c.tid, comm, c.remote_comm_id);
        self.conn_send(comm, m);
        self.enter_timewait(now, comm);
    }

    /// A stale REQ/REP named conn `old`: it is disconnected if established.
    pub(crate) fn dreq_stale(&mut self, now: Instant, old: u32) {
        if self
            .conns
            .get(&old)
            .is_some_and(|c| c.state == ConnState::Established)
        {
            self.send_dreq(now, old);
        }
    }

    pub(crate) fn on_dreq(&mut self, now: Instant, rx: &MadRx, mad: &CmMad, d: &Dreq) {
        let comm = d.remote_comm_id;
        let found = self
            .conns
            .get(&comm)
            .filter(|c| c.remote_comm_id == d.local_comm_id && c.peer_ip == rx.src);
        let Some(c) = found else {
            // Unknown (e.g. our TimeWait is over): answer anyway so the
            // peer stops (`cm_issue_drep`).
            self.counters.dropped_unknown += 1;
            let m = mads::drep(mad.tid, d.remote_comm_id, d.local_comm_id);
            self.push_tx(rx.dst, rx.src, m);
            return;
        };
        if d.remote_qpn != c.local_qpn {
            self.counters.dropped_unknown += 1;
            return;
        }
        match c.state {
            ConnState::Established | ConnState::RepSent | ConnState::DreqSent => {
                let id = c.id;
                let c = self.conns.get_mut(&comm).expect("found");
                c.state = ConnState::DreqRcvd;
                c.tid = mad.tid;
                c.last = None;
                self.disarm(comm);
                if id.is_none() {
                    // The id is gone: answer for it.
                    self.send_drep(now, comm);
                }
                self.conn_event_status(id, event::DISCONNECTED, 0);
            }
            ConnState::TimeWait => {
                self.counters.dropped_duplicate += 1;
                let m = mads::drep(mad.tid, comm, c.remote_comm_id);
                self.conn_send(comm, m);
            }
            ConnState::DreqRcvd => self.counters.dropped_duplicate += 1,
            _ => self.counters.dropped_stale += 1,
        }
    }

    pub(crate) fn on_drep(&mut self, now: Instant, d: &Drep) {
        let comm = d.remote_comm_id;
        let Some(c) = self.conns.get(&comm) else {
            self.counters.dropped_unknown += 1;
            return;
        };
        if c.remote_comm_id != d.local_comm_id {
            self.counters.dropped_unknown += 1;
            return;
        }
        if c.state != ConnState::DreqSent {
            self.counters.dropped_duplicate += 1;
            return;
        }
        let id = c.id;
        self.enter_timewait(now, comm);
        self.conn_event_status(id, event::DISCONNECTED, 0);
    }
}
