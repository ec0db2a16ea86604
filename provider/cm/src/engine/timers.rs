//! Timers: retransmission of REQ / REP / DREQ / SIDR_REQ until the retry
//! budget is spent, and the end of TimeWait.

use std::time::Instant;

use rxu_abi::proto::cm::event;

use super::conn::ConnState;
use super::Cm;

impl Cm {
    /// When `handle_timeout` should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(at, comm)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.remove(&(at, comm));
            if let Some(c) = self.conns.get_mut(&comm) {
                c.deadline = None;
            }
            self.expire(now, comm);
        }
    }

    fn expire(&mut self, now: Instant, comm: u32) {
        let Some(c) = self.conns.get_mut(&comm) else {
            return;
        };
        let (state, id) = (c.state, c.id);
        if state == ConnState::TimeWait {
            self.free_conn(comm);
            self.conn_event_status(id, event::TIMEWAIT_EXIT, 0);
            return;
        }
        if c.retries_left > 0 {
            if let Some(m) = c.last.clone() {
                c.retries_left -= 1;
                let at = now + c.timeout;
                self.counters.retransmissions += 1;
                self.conn_send(comm, m);
                self.arm(comm, at);
                return;
            }
        }
        let timedout = -libc::ETIMEDOUT;
        match state {
            ConnState::ReqSent => {
                self.counters.timeouts_req += 1;
                self.free_conn(comm);
                self.conn_event_status(id, event::UNREACHABLE, timedout);
            }
            ConnState::RepSent => {
                self.counters.timeouts_rep += 1;
                self.free_conn(comm);
                self.conn_event_status(id, event::UNREACHABLE, timedout);
            }
            ConnState::DreqSent => {
                self.counters.timeouts_dreq += 1;
                self.enter_timewait(now, comm);
                self.conn_event_status(id, event::DISCONNECTED, timedout);
            }
            ConnState::SidrReqSent => {
                self.counters.timeouts_sidr += 1;
                self.free_conn(comm);
                self.conn_event_status(id, event::UNREACHABLE, timedout);
            }
            // No timer runs in the other states.
            _ => {}
        }
    }
}
