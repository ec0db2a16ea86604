//! What the CM counts, for `rxu stats`.

use std::collections::BTreeMap;

use crate::wire::CmMsg;

/// Message kinds, in the order of the per-kind arrays.
const KINDS: [&str; 9] = [
    "req", "rep", "rtu", "rej", "mra", "dreq", "drep", "sidr_req", "sidr_rep",
];

fn kind(m: &CmMsg) -> usize {
    match m {
        CmMsg::Req(_) => 0,
        CmMsg::Rep(_) => 1,
        CmMsg::Rtu(_) => 2,
        CmMsg::Rej(_) => 3,
        CmMsg::Mra(_) => 4,
        CmMsg::Dreq(_) => 5,
        CmMsg::Drep(_) => 6,
        CmMsg::SidrReq(_) => 7,
        CmMsg::SidrRep(_) => 8,
    }
}

/// Counters of one device's CM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// MADs sent / received per message kind (retransmissions included).
    pub sent: [u64; 9],
    pub received: [u64; 9],
    /// Retransmissions of REQ, REP, DREQ and SIDR_REQ.
    pub retransmissions: u64,
    /// REJ sent / received per IB reason.
    pub rej_sent: BTreeMap<u16, u64>,
    pub rej_received: BTreeMap<u16, u64>,
    /// Retries exhausted, per message waited on.
    pub timeouts_req: u64,
    pub timeouts_rep: u64,
    pub timeouts_dreq: u64,
    pub timeouts_sidr: u64,
    /// Dropped: not a CM MAD we can parse.
    pub dropped_malformed: u64,
    /// Dropped: no connection has that comm ID (or the QPN does not match).
    pub dropped_unknown: u64,
    /// Dropped: a duplicate of a message already handled.
    pub dropped_duplicate: u64,
    /// Dropped: valid but not expected in the connection's state.
    pub dropped_stale: u64,
    /// REQs / SIDR_REQs refused because the listener's backlog was full.
    pub dropped_backlog: u64,
}

impl CmCounters {
    pub(crate) fn count_sent(&mut self, m: &CmMsg) {
        self.sent[kind(m)] += 1;
        if let CmMsg::Rej(r) = m {
            *self.rej_sent.entry(r.reason).or_default() += 1;
        }
    }

    pub(crate) fn count_received(&mut self, m: &CmMsg) {
        self.received[kind(m)] += 1;
        if let CmMsg::Rej(r) = m {
            *self.rej_received.entry(r.reason).or_default() += 1;
        }
    }

    /// Every counter as (name, value), for `rxu stats`.
    pub fn list(&self) -> Vec<(String, u64)> {
        let mut v = Vec::new();
        for (i, k) in KINDS.iter().enumerate() {
            v.push((format!("cm_{k}_sent"), self.sent[i]));
            v.push((format!("cm_{k}_received"), self.received[i]));
        }
        v.push(("cm_retransmissions".into(), self.retransmissions));
        for (r, n) in &self.rej_sent {
            v.push((format!("cm_rej_sent_reason_{r}"), *n));
        }
        for (r, n) in &self.rej_received {
            v.push((format!("cm_rej_received_reason_{r}"), *n));
        }
        v.push(("cm_timeouts_req".into(), self.timeouts_req));
        v.push(("cm_timeouts_rep".into(), self.timeouts_rep));
        v.push(("cm_timeouts_dreq".into(), self.timeouts_dreq));
        v.push(("cm_timeouts_sidr".into(), self.timeouts_sidr));
        v.push(("cm_dropped_malformed".into(), self.dropped_malformed));
        v.push(("cm_dropped_unknown".into(), self.dropped_unknown));
        v.push(("cm_dropped_duplicate".into(), self.dropped_duplicate));
        v.push(("cm_dropped_stale".into(), self.dropped_stale));
        v.push(("cm_dropped_backlog".into(), self.dropped_backlog));
        v
    }
}
