//! What a queue has outstanding, as the client sees it: every posted work
//! request until the CQ says it completed. Two uses:
//! - its length bounds posting: a QP takes at most max_send_wr sends and
//!   max_recv_wr receives outstanding, then ENOMEM (rxe's queue-full
//!   answer). As with hardware providers (mlx5 frees a slot when the poll
//!   returns its completion) a WR counts until its completion is polled;
//!   the rings alone would take up to twice as many, as the daemon moves
//!   WRs from the ring into the transport's queues before they complete.
//! - if the daemon dies, nothing will ever complete them: polling hands
//!   each one back as a WR_FLUSH_ERR completion (as a NIC flushes its
//!   queues when it enters the error state), so an application waiting for
//!   its work learns its fate instead of waiting forever.
//!
//! Completions of one queue come in posting order (sends of a QP, receives
//! of a QP; the engine keeps that order, errors and flushes included):
//! - a receive completion completes the oldest receive;
//! - a successful send completion completes the oldest signaled send and
//!   every unsignaled one before it (they completed silently);
//! - a failed send completion: after an error every WR completes with a
//!   CQE of its own, so it is the oldest one carrying its wr_id (unsignaled
//!   WRs that succeeded just before it cannot be told apart when wr_ids
//!   repeat; at worst one of them is flushed too many).
//!
//! Bounded: a queue never holds more than max_wr entries; `cap` is a
//! backstop (entries beyond it drop the oldest).

use std::collections::VecDeque;

use super::wc::Wc;
use transport::qp::{WcOpcode, WcStatus};
use transport::verbs::WrOpcode;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    wr_id: u64,
    /// The WcOpcode its completion would carry.
    opcode: WcOpcode,
    signaled: bool,
}

#[derive(Debug)]
pub(crate) struct Shadow {
    q: VecDeque<Pending>,
    cap: usize,
}

impl Shadow {
    /// A shadow for a ring of `ring_slots`.
    pub(crate) fn new(ring_slots: u32) -> Shadow {
        Shadow {
            q: VecDeque::new(),
            cap: (ring_slots as usize).saturating_mul(4).max(1024),
        }
    }

    fn push(&mut self, p: Pending) {
        if self.q.len() >= self.cap {
            self.q.pop_front();
        }
        self.q.push_back(p);
    }

    pub(crate) fn posted_send(&mut self, wr_id: u64, opcode: WrOpcode, signaled: bool) {
        self.push(Pending {
            wr_id,
            opcode: opcode.wc_opcode(),
            signaled,
        });
    }

    pub(crate) fn posted_recv(&mut self, wr_id: u64) {
        self.push(Pending {
            wr_id,
            opcode: WcOpcode::Recv,
            signaled: true,
        });
    }

    pub(crate) fn completed_recv(&mut self) {
        self.q.pop_front();
    }

    pub(crate) fn completed_send(&mut self, wc: &Wc) {
        if wc.status == WcStatus::Success as u32 {
            // Bounded by the queue's length.
            while let Some(p) = self.q.pop_front() {
                if p.signaled {
                    break;
                }
            }
        } else if !self.q.is_empty() {
            let upto = self.q.iter().position(|p| p.wr_id == wc.wr_id).unwrap_or(0);
            self.q.drain(..=upto);
        }
    }

    /// Forgets everything (the QP was reset: its work is discarded).
    pub(crate) fn clear(&mut self) {
        self.q.clear();
    }

    /// WRs outstanding: posted, and not yet seen completed by a poll.
    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }

    /// Moves the oldest outstanding WRs into `out` as WR_FLUSH_ERR
    /// completions of QP `qpn`; returns how many.
    pub(crate) fn flush_into(&mut self, qpn: u32, out: &mut [Wc]) -> usize {
        let n = out.len().min(self.q.len());
        for (w, p) in out.iter_mut().zip(self.q.drain(..n)) {
            *w = Wc {
                wr_id: p.wr_id,
                status: WcStatus::WrFlushErr as u32,
                opcode: p.opcode as u32,
                qp_num: qpn,
                ..Wc::default()
            };
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(wr_id: u64, status: WcStatus) -> Wc {
        Wc {
            wr_id,
            status: status as u32,
            ..Wc::default()
        }
    }

    fn ids(s: &mut Shadow) -> Vec<u64> {
        let mut out = vec![Wc::default(); 64];
        let n = s.flush_into(7, &mut out);
        assert!(out[..n]
            .iter()
            .all(|w| w.status == WcStatus::WrFlushErr as u32 && w.qp_num == 7));
        out[..n].iter().map(|w| w.wr_id).collect()
    }

    #[test]
    fn signaled_completions_take_the_unsignaled_before_them() {
        let mut s = Shadow::new(16);
        for i in 1..=6 {
            s.posted_send(i, WrOpcode::RDMA_WRITE, i % 3 == 0);
        }
        s.completed_send(&wc(3, WcStatus::Success));
        assert_eq!(s.len(), 3);
        let mut out = vec![Wc::default(); 1];
        assert_eq!(s.flush_into(7, &mut out), 1);
        assert_eq!(
            (out[0].wr_id, out[0].opcode),
            (4, WcOpcode::RdmaWrite as u32)
        );
        assert_eq!(ids(&mut s), vec![5, 6]);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn errors_complete_their_own_wr() {
        let mut s = Shadow::new(16);
        for i in 1..=4 {
            s.posted_send(i, WrOpcode::SEND, true);
        }
        s.completed_send(&wc(2, WcStatus::RemAccessErr));
        assert_eq!(ids(&mut s), vec![3, 4]);
        s.posted_send(9, WrOpcode::SEND, false);
        // An unknown wr_id takes the oldest; an empty shadow stays empty.
        s.completed_send(&wc(1234, WcStatus::WrFlushErr));
        s.completed_send(&wc(1234, WcStatus::WrFlushErr));
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn receives_and_reset_and_bound() {
        let mut s = Shadow::new(1);
        for i in 0..2000 {
            s.posted_recv(i);
        }
        assert_eq!(s.len(), 1024, "bounded");
        s.completed_recv();
        let first = ids(&mut s)[0];
        assert_eq!(first, 2000 - 1023);
        s.posted_recv(1);
        s.clear();
        assert_eq!(s.len(), 0);
        s.completed_recv();
    }
}
