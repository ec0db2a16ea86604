//! The producing side of SQ, RQ and SRQ rings: encode a work request into
//! the next slot, publish it, and ring the doorbell only if the daemon said
//! it sleeps. Guards let one lock cover a whole list of work requests (the
//! C provider walks `ibv_send_wr` lists with one).

use std::sync::{Mutex, MutexGuard};

use super::error::{Error, PostError, Result};
use super::shadow::Shadow;
use super::wc::Wc;
use super::wr::{
    check_send, gather, is_inline, recv_header, send_header, send_slot_bytes, sg_len, RecvWr,
    SendWr, SqLimits,
};
use rxu_abi::proto::abi::{emit_sge, RECV_HDR, SEND_HDR, SGE_SIZE};
use rxu_abi::ring::{Doorbell, Producer};
use transport::qp::{send_flags, WcOpcode};

/// A send queue ring and what it accepts.
pub(crate) struct SendQueue {
    producer: Producer,
    lim: SqLimits,
    /// WRs outstanding at most: the QP's max_send_wr (see [`Shadow`]).
    max_wr: u32,
    /// Inline bytes gathered from SGEs (C callers), reused across posts.
    gathered: Vec<u8>,
    /// Every WR completes with a CQE (the QP's sq_sig_all).
    sig_all: bool,
    /// What is outstanding, for a flush if the daemon dies.
    shadow: Shadow,
}

impl SendQueue {
    pub(crate) fn new(producer: Producer, lim: SqLimits, max_wr: u32) -> Result<SendQueue> {
        if producer.slot_size() < SEND_HDR {
            return Err(Error::Protocol(format!(
                "send ring slots of {} bytes",
                producer.slot_size()
            )));
        }
        let shadow = Shadow::new(producer.capacity());
        Ok(SendQueue {
            producer,
            lim,
            max_wr,
            gathered: Vec::new(),
            sig_all: false,
            shadow,
        })
    }

    pub(crate) fn set_sig_all(&mut self, sig_all: bool) {
        self.sig_all = sig_all;
    }

    /// Encodes and publishes one WR.
    ///
    /// # Safety
    /// With `may_gather`, an inline WR without `inline_data` has its bytes
    /// read from its SGEs: each must describe readable memory.
    unsafe fn push(&mut self, wr: &SendWr<'_>, may_gather: bool) -> Result<()> {
        let SendQueue {
            producer,
            lim,
            max_wr,
            gathered,
            sig_all,
            shadow,
        } = self;
        let inline: Option<&[u8]> = if is_inline(wr) {
            match wr.inline_data {
                Some(d) => Some(d),
                None if may_gather => {
                    let total = sg_len(wr.sg_list).unwrap_or(u32::MAX);
                    if total > lim.max_inline {
                        return Err(Error::Invalid("inline data above max_inline_data"));
                    }
                    // SAFETY: with may_gather our caller vouches that the
                    // SGEs describe readable memory (the contract), which
                    // is what gather reads.
                    unsafe { gather(wr.sg_list, gathered) };
                    Some(gathered.as_slice())
                }
                None => {
                    return Err(Error::Invalid(
                        "IBV_SEND_INLINE without inline_data needs the unsafe gather path",
                    ))
                }
            }
        } else {
            None
        };
        let inline_len = inline.map(<[u8]>::len);
        check_send(wr, lim, inline_len)?;
        if send_slot_bytes(wr, inline_len) > producer.slot_size() {
            return Err(Error::Invalid("work request does not fit the send slot"));
        }
        if shadow.len() >= *max_wr as usize {
            return Err(Error::QueueFull);
        }
        let Some(mut slot) = producer.reserve()? else {
            return Err(Error::QueueFull);
        };
        slot.write(0, &send_header(wr, inline_len))?;
        match inline {
            Some(d) => slot.write(SEND_HDR, d)?,
            None => {
                for (i, s) in wr.sg_list.iter().enumerate() {
                    slot.write(SEND_HDR + i * SGE_SIZE, &emit_sge(s))?;
                }
            }
        }
        slot.commit();
        let signaled = *sig_all || wr.send_flags & send_flags::SIGNALED != 0;
        shadow.posted_send(wr.wr_id, wr.opcode, signaled);
        Ok(())
    }

    /// WRs that may be posted now.
    fn room(&self) -> Result<u32> {
        let left = self.max_wr.saturating_sub(self.shadow.len() as u32);
        Ok(self.producer.free_slots()?.min(left))
    }
}

/// A receive ring (RQ or SRQ).
pub(crate) struct RecvQueue {
    producer: Producer,
    max_sge: u32,
    /// Receives outstanding at most (RQ: the QP's max_recv_wr; SRQ: its
    /// max_wr).
    max_wr: u32,
    /// None for an SRQ (its completions cannot be told apart per WR): the
    /// daemon keeps an SRQ receive's slot until a message takes it, so
    /// the ring's fill is what is outstanding.
    shadow: Option<Shadow>,
}

impl RecvQueue {
    pub(crate) fn new(producer: Producer, max_sge: u32, max_wr: u32) -> Result<RecvQueue> {
        if producer.slot_size() < RECV_HDR {
            return Err(Error::Protocol(format!(
                "receive ring slots of {} bytes",
                producer.slot_size()
            )));
        }
        let shadow = Some(Shadow::new(producer.capacity()));
        Ok(RecvQueue {
            producer,
            max_sge,
            max_wr,
            shadow,
        })
    }

    /// Posts go to `producer` from now on, up to `max_wr` outstanding: the
    /// SRQ's ring after a resize (the daemon carried the posted receives
    /// over).
    pub(crate) fn replace_ring(&mut self, producer: Producer, max_wr: u32) -> Result<()> {
        if producer.slot_size() < self.producer.slot_size() {
            return Err(Error::Protocol(format!(
                "resized receive ring slots of {} bytes, were {}",
                producer.slot_size(),
                self.producer.slot_size()
            )));
        }
        self.producer = producer;
        self.max_wr = max_wr;
        Ok(())
    }

    /// Keeps no record of what is outstanding (SRQs): the ring's fill
    /// (posted, not yet taken by a message) bounds what is posted.
    pub(crate) fn untracked(mut self) -> RecvQueue {
        self.shadow = None;
        self
    }

    fn push(&mut self, wr: &RecvWr<'_>) -> Result<()> {
        let n = wr.sg_list.len();
        if n > self.max_sge as usize || RECV_HDR + n * SGE_SIZE > self.producer.slot_size() {
            return Err(Error::Invalid("more SGEs than max_recv_sge"));
        }
        if self.outstanding()? >= self.max_wr {
            return Err(Error::QueueFull);
        }
        let Some(mut slot) = self.producer.reserve()? else {
            return Err(Error::QueueFull);
        };
        slot.write(0, &recv_header(wr))?;
        for (i, s) in wr.sg_list.iter().enumerate() {
            slot.write(RECV_HDR + i * SGE_SIZE, &emit_sge(s))?;
        }
        slot.commit();
        if let Some(sh) = &mut self.shadow {
            sh.posted_recv(wr.wr_id);
        }
        Ok(())
    }

    fn outstanding(&self) -> Result<u32> {
        Ok(match &self.shadow {
            Some(sh) => sh.len() as u32,
            None => self.producer.len()?,
        })
    }

    fn room(&self) -> Result<u32> {
        let free = self.producer.free_slots()?;
        Ok(free.min(self.max_wr.saturating_sub(self.outstanding()?)))
    }
}

/// A QP's queues: its send queue and, without an SRQ, its receive queue.
/// Its CQs hold it too, to account completions and, if the daemon dies,
/// flush what is outstanding.
pub(crate) struct WorkQueues {
    pub(crate) sq: Mutex<SendQueue>,
    pub(crate) rq: Option<Mutex<RecvQueue>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl WorkQueues {
    /// A completion of this QP was polled.
    pub(crate) fn completed(&self, wc: &Wc) {
        if wc.opcode & WcOpcode::Recv as u32 != 0 {
            if let Some(rq) = &self.rq {
                if let Some(sh) = &mut lock(rq).shadow {
                    sh.completed_recv();
                }
            }
        } else {
            lock(&self.sq).shadow.completed_send(wc);
        }
    }

    /// WR_FLUSH_ERR completions for what is outstanding on the queues
    /// named (sends, receives) into `out`; returns how many.
    pub(crate) fn flush_into(&self, qpn: u32, sends: bool, recvs: bool, out: &mut [Wc]) -> usize {
        let mut n = 0;
        if sends {
            n += lock(&self.sq).shadow.flush_into(qpn, out);
        }
        if recvs && n < out.len() {
            if let Some(rq) = &self.rq {
                if let Some(sh) = &mut lock(rq).shadow {
                    n += sh.flush_into(qpn, &mut out[n..]);
                }
            }
        }
        n
    }

    /// The QP was reset: the daemon discarded its work without completions.
    pub(crate) fn reset(&self) {
        lock(&self.sq).shadow.clear();
        if let Some(rq) = &self.rq {
            if let Some(sh) = &mut lock(rq).shadow {
                sh.clear();
            }
        }
    }
}

/// Rings the doorbell if the daemon sleeps on this ring. A failed ring is
/// not reported: the WRs are posted and the daemon's timer finds them.
fn wake(producer: &Producer, bell: &Doorbell) {
    let _ = producer.notify(bell);
}

/// The send queue, locked for a batch of posts. Dropping it rings the
/// doorbell if anything was posted and the daemon sleeps.
pub struct SqGuard<'a> {
    q: MutexGuard<'a, SendQueue>,
    bell: &'a Doorbell,
    /// Posting is refused (EINVAL) in RESET, INIT and RTR.
    ready: bool,
    posted: bool,
}

impl<'a> SqGuard<'a> {
    pub(crate) fn new(q: &'a Mutex<SendQueue>, bell: &'a Doorbell, ready: bool) -> Self {
        SqGuard {
            q: q.lock().unwrap_or_else(|p| p.into_inner()),
            bell,
            ready,
            posted: false,
        }
    }

    /// Posts one WR. Inline WRs must carry `inline_data`.
    pub fn push(&mut self, wr: &SendWr<'_>) -> Result<()> {
        // SAFETY: may_gather is false, so no SGE memory is read.
        unsafe { self.push_inner(wr, false) }
    }

    /// Posts one WR, reading the bytes of an inline WR without
    /// `inline_data` from its SGEs, as `ibv_post_send` does.
    ///
    /// # Safety
    /// For such a WR every SGE must describe `length` readable bytes at
    /// `addr` in this process.
    pub unsafe fn push_gather(&mut self, wr: &SendWr<'_>) -> Result<()> {
        // SAFETY: our caller vouches for the SGEs of an inline WR (the
        // contract), which is what may_gather asks.
        unsafe { self.push_inner(wr, true) }
    }

    /// # Safety
    /// As `SendQueue::push`: with `may_gather`, the SGEs of an inline WR
    /// without `inline_data` must describe readable memory.
    unsafe fn push_inner(&mut self, wr: &SendWr<'_>, may_gather: bool) -> Result<()> {
        if !self.ready {
            return Err(Error::Invalid("QP not ready to send (state below RTS)"));
        }
        // SAFETY: this function's contract is SendQueue::push's.
        unsafe { self.q.push(wr, may_gather)? };
        self.posted = true;
        Ok(())
    }

    /// WRs that may be posted right now (ENOMEM beyond).
    pub fn free_slots(&self) -> Result<u32> {
        self.q.room()
    }
}

impl Drop for SqGuard<'_> {
    fn drop(&mut self) {
        if self.posted {
            wake(&self.q.producer, self.bell);
        }
    }
}

/// A receive queue (RQ or SRQ), locked for a batch of posts.
pub struct RqGuard<'a> {
    q: MutexGuard<'a, RecvQueue>,
    bell: &'a Doorbell,
    ready: bool,
    posted: bool,
}

impl<'a> RqGuard<'a> {
    pub(crate) fn new(q: &'a Mutex<RecvQueue>, bell: &'a Doorbell, ready: bool) -> Self {
        RqGuard {
            q: q.lock().unwrap_or_else(|p| p.into_inner()),
            bell,
            ready,
            posted: false,
        }
    }

    pub fn push(&mut self, wr: &RecvWr<'_>) -> Result<()> {
        if !self.ready {
            return Err(Error::Invalid("QP in RESET cannot receive"));
        }
        self.q.push(wr)?;
        self.posted = true;
        Ok(())
    }

    /// Receives that may be posted right now (ENOMEM beyond).
    pub fn free_slots(&self) -> Result<u32> {
        self.q.room()
    }
}

impl Drop for RqGuard<'_> {
    fn drop(&mut self) {
        if self.posted {
            wake(&self.q.producer, self.bell);
        }
    }
}

/// Posts a list of send WRs, stopping at the first failure.
pub(crate) fn post_sends(mut g: SqGuard<'_>, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
    for (index, wr) in wrs.iter().enumerate() {
        g.push(wr).map_err(|error| PostError { index, error })?;
    }
    Ok(())
}

/// Posts a list of receive WRs, stopping at the first failure.
pub(crate) fn post_recvs(mut g: RqGuard<'_>, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
    for (index, wr) in wrs.iter().enumerate() {
        g.push(wr).map_err(|error| PostError { index, error })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxu_abi::proto::abi::{self, RecvSlot, SendSlot};
    use rxu_abi::proto::QpType;
    use rxu_abi::ring::{Consumer, Ring};
    use transport::verbs::Sge;

    fn sq(slots: u32) -> (Mutex<SendQueue>, Consumer) {
        let slot = abi::send_slot_size(2, 32);
        let (ring, fd) = Ring::create("rxu-client-test", slot, slots).unwrap();
        let lim = SqLimits {
            qp_type: QpType::Rc,
            max_sge: 2,
            max_inline: 32,
        };
        let q = SendQueue::new(Ring::attach(&fd).unwrap().into_producer(), lim, slots).unwrap();
        (Mutex::new(q), ring.into_consumer())
    }

    fn pop_send(c: &mut Consumer) -> Option<SendSlot<Vec<u8>>> {
        let mut b = vec![0u8; c.slot_size()];
        c.try_pop(&mut b)
            .unwrap()
            .then(|| SendSlot::new_checked(b).unwrap())
    }

    #[test]
    fn posts_land_in_the_ring_and_full_is_enomem() {
        let (q, mut c) = sq(2);
        let bell = Doorbell::new().unwrap();
        let sge = [Sge {
            addr: 1,
            length: 2,
            lkey: 3,
        }];
        let wrs = [
            SendWr::send(1, &sge),
            SendWr::send(2, &[]).inline(b"abc"),
            SendWr::send(3, &sge),
        ];
        let e = post_sends(SqGuard::new(&q, &bell, true), &wrs).unwrap_err();
        assert_eq!((e.index, e.errno()), (2, libc::ENOMEM));
        assert_eq!(pop_send(&mut c).unwrap().sges().len(), 1);
        let second = pop_send(&mut c).unwrap();
        assert_eq!((second.wr_id(), second.inline_data()), (2, &b"abc"[..]));
        assert!(pop_send(&mut c).is_none());
        assert_eq!(bell.drain().unwrap(), 0, "daemon awake: no doorbell");
    }

    #[test]
    fn doorbell_only_when_the_consumer_sleeps() {
        let (q, mut c) = sq(4);
        let bell = Doorbell::new().unwrap();
        assert!(c.prepare_sleep().unwrap());
        post_sends(SqGuard::new(&q, &bell, true), &[SendWr::send(9, &[])]).unwrap();
        assert_eq!(bell.drain().unwrap(), 1);
        c.end_sleep();
        assert_eq!(pop_send(&mut c).unwrap().wr_id(), 9);
    }

    #[test]
    fn not_ready_and_bad_inline_are_einval() {
        let (q, mut c) = sq(4);
        let bell = Doorbell::new().unwrap();
        let e = post_sends(SqGuard::new(&q, &bell, false), &[SendWr::send(1, &[])]).unwrap_err();
        assert_eq!((e.index, e.errno()), (0, libc::EINVAL));
        let mut wr = SendWr::send(1, &[]);
        wr.send_flags |= transport::qp::send_flags::INLINE;
        let e = post_sends(SqGuard::new(&q, &bell, true), &[wr]).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "safe path cannot gather");
        let data = [7u8; 5];
        let sge = [Sge {
            addr: data.as_ptr() as u64,
            length: 5,
            lkey: 0,
        }];
        wr.sg_list = &sge;
        let mut g = SqGuard::new(&q, &bell, true);
        // SAFETY: the SGE points at `data`, alive for the call.
        unsafe { g.push_gather(&wr).unwrap() };
        drop(g);
        assert_eq!(pop_send(&mut c).unwrap().inline_data(), [7u8; 5]);
        let big = [0u8; 33];
        let e = post_sends(
            SqGuard::new(&q, &bell, true),
            &[SendWr::send(1, &[]).inline(&big)],
        )
        .unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(pop_send(&mut c).is_none());
    }

    /// Every opcode on every QP type at post time (no daemon): accepted
    /// ones land in the ring, refused ones are EINVAL at their index and
    /// leave the ring as it was after the WR before them.
    #[test]
    fn every_opcode_on_every_qp_type() {
        use crate::ah::Ah;
        use rxu_abi::proto::AhAttr;
        use transport::verbs::WrOpcode;
        let ah = Ah::for_tests(AhAttr {
            dgid: [1; 16],
            is_global: true,
            ..Default::default()
        });
        let accepted: [(QpType, &[u32]); 3] = [
            (QpType::Rc, &[0, 1, 2, 3, 4, 5, 6, 9, 14, 15]),
            (QpType::Uc, &[0, 1, 2, 3]),
            (QpType::Ud, &[2, 3]),
        ];
        let bell = Doorbell::new().unwrap();
        let sge = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 1,
        }];
        for (t, ok) in accepted {
            for v in 0..=17u32 {
                let (ring, fd) =
                    Ring::create("rxu-client-test", abi::send_slot_size(2, 32), 8).unwrap();
                let lim = SqLimits {
                    qp_type: t,
                    max_sge: 2,
                    max_inline: 32,
                };
                let q = SendQueue::new(Ring::attach(&fd).unwrap().into_producer(), lim, 8).unwrap();
                let q = Mutex::new(q);
                let mut c = ring.into_consumer();
                let mut wr = SendWr {
                    wr_id: 2,
                    opcode: WrOpcode(v),
                    sg_list: &sge,
                    remote_addr: 0x2000,
                    rkey: 5,
                    ..Default::default()
                };
                let mut good = SendWr::send(1, &sge);
                if t == QpType::Ud {
                    wr = wr.ud(&ah, 3, 4);
                    good = good.ud(&ah, 3, 4);
                }
                let r = post_sends(SqGuard::new(&q, &bell, true), &[good, wr]);
                assert_eq!(pop_send(&mut c).unwrap().wr_id(), 1);
                if ok.contains(&v) {
                    assert!(r.is_ok(), "{t:?} {v}: {r:?}");
                    let s = pop_send(&mut c).unwrap();
                    assert_eq!((s.wr_id(), s.opcode()), (2, WrOpcode(v)));
                } else {
                    let e = r.expect_err(&format!("{t:?} {v} accepted"));
                    assert_eq!((e.index, e.errno()), (1, libc::EINVAL), "{t:?} {v}");
                    assert!(pop_send(&mut c).is_none(), "{t:?} {v}");
                }
            }
        }
    }

    /// The review's bug: SEND_WITH_INV on UC was accepted here and failed
    /// the QP in the daemon.
    #[test]
    fn send_with_inv_on_uc_is_einval() {
        let (ring, fd) = Ring::create("rxu-client-test", abi::send_slot_size(2, 32), 4).unwrap();
        let lim = SqLimits {
            qp_type: QpType::Uc,
            max_sge: 2,
            max_inline: 32,
        };
        let q =
            Mutex::new(SendQueue::new(Ring::attach(&fd).unwrap().into_producer(), lim, 4).unwrap());
        let mut c = ring.into_consumer();
        let bell = Doorbell::new().unwrap();
        let wr = SendWr {
            opcode: transport::verbs::WrOpcode::SEND_WITH_INV,
            imm_data: 0x1234,
            ..SendWr::send(5, &[])
        };
        let e = post_sends(SqGuard::new(&q, &bell, true), &[wr]).unwrap_err();
        assert_eq!((e.index, e.errno()), (0, libc::EINVAL));
        assert!(pop_send(&mut c).is_none());
    }

    /// SRQ resize: after the swap posts land in the new ring only, and a
    /// ring with smaller slots is refused.
    #[test]
    fn replaced_ring_takes_the_posts() {
        let (old, fd) = Ring::create("rxu-client-test", 128, 2).unwrap();
        let rq = RecvQueue::new(Ring::attach(&fd).unwrap().into_producer(), 2, 2).unwrap();
        let q = Mutex::new(rq.untracked());
        let bell = Doorbell::new().unwrap();
        post_recvs(RqGuard::new(&q, &bell, true), &[RecvWr::new(1, &[])]).unwrap();
        let (small, sfd) = Ring::create("rxu-client-test", 64, 8).unwrap();
        let p = Ring::attach(&sfd).unwrap().into_producer();
        assert!(q.lock().unwrap().replace_ring(p, 8).is_err());
        drop(small);
        let (new, nfd) = Ring::create("rxu-client-test", 128, 8).unwrap();
        let p = Ring::attach(&nfd).unwrap().into_producer();
        q.lock().unwrap().replace_ring(p, 8).unwrap();
        let wrs: Vec<_> = (2..6).map(|id| RecvWr::new(id, &[])).collect();
        post_recvs(RqGuard::new(&q, &bell, true), &wrs).unwrap();
        let (mut old, mut new) = (old.into_consumer(), new.into_consumer());
        let mut b = vec![0u8; new.slot_size()];
        let mut ids = Vec::new();
        while new.try_pop(&mut b).unwrap() {
            ids.push(RecvSlot::new_checked(&b[..]).unwrap().wr_id());
        }
        assert_eq!(ids, [2, 3, 4, 5]);
        assert_eq!(old.len().unwrap(), 1, "only the post before the swap");
        assert!(old.try_pop(&mut b).unwrap());
    }

    #[test]
    fn receives_land_in_the_ring() {
        let (ring, fd) = Ring::create("rxu-client-test", abi::recv_slot_size(2), 4).unwrap();
        let q =
            Mutex::new(RecvQueue::new(Ring::attach(&fd).unwrap().into_producer(), 2, 4).unwrap());
        let mut c = ring.into_consumer();
        let bell = Doorbell::new().unwrap();
        let sge = [Sge {
            addr: 4,
            length: 5,
            lkey: 6,
        }; 3];
        let wrs = [RecvWr::new(1, &sge[..2]), RecvWr::new(2, &sge)];
        let e = post_recvs(RqGuard::new(&q, &bell, true), &wrs).unwrap_err();
        assert_eq!((e.index, e.errno()), (1, libc::EINVAL));
        let mut b = vec![0u8; c.slot_size()];
        assert!(c.try_pop(&mut b).unwrap());
        let r = RecvSlot::new_checked(&b[..]).unwrap();
        assert_eq!((r.wr_id(), r.sges().len()), (1, 2));
        assert!(!c.try_pop(&mut b).unwrap());
    }

    fn wc(wr_id: u64, opcode: WcOpcode) -> Wc {
        Wc {
            wr_id,
            opcode: opcode as u32,
            ..Wc::default()
        }
    }

    /// rdma-core's test_full_rq_bad_flow: max_recv_wr receives, then
    /// ENOMEM, though the ring (a power of two) has room and the daemon
    /// has taken the first ones out of it. A polled completion frees one.
    #[test]
    fn receives_beyond_max_recv_wr_are_enomem_until_one_is_polled() {
        let (ring, fd) = Ring::create("rxu-client-test", abi::recv_slot_size(1), 8).unwrap();
        let rq = RecvQueue::new(Ring::attach(&fd).unwrap().into_producer(), 1, 5).unwrap();
        let (sq, _sq_ring) = sq(4);
        let wq = WorkQueues {
            sq,
            rq: Some(Mutex::new(rq)),
        };
        let mut c = ring.into_consumer();
        let bell = Doorbell::new().unwrap();
        let post = |id| {
            post_recvs(
                RqGuard::new(wq.rq.as_ref().unwrap(), &bell, true),
                &[RecvWr::new(id, &[])],
            )
        };
        for id in 0..5 {
            post(id).unwrap();
        }
        // The daemon moved them all on: the ring is empty, the QP full.
        let mut b = vec![0u8; c.slot_size()];
        while c.try_pop(&mut b).unwrap() {}
        let g = RqGuard::new(wq.rq.as_ref().unwrap(), &bell, true);
        assert_eq!(g.free_slots().unwrap(), 0);
        drop(g);
        assert_eq!(post(5).unwrap_err().errno(), libc::ENOMEM);
        wq.completed(&wc(0, WcOpcode::Recv));
        post(5).unwrap();
        assert_eq!(post(6).unwrap_err().errno(), libc::ENOMEM);
    }

    /// An SRQ's receives count until a message uses them: the daemon
    /// reads them ahead into the transport but gives their slots back only
    /// then, so max_wr are taken, then ENOMEM, though the ring (a power of
    /// two) has room.
    #[test]
    fn srq_receives_beyond_max_wr_are_enomem_until_one_is_used() {
        let (ring, fd) = Ring::create("rxu-client-test", abi::recv_slot_size(1), 8).unwrap();
        let rq = RecvQueue::new(Ring::attach(&fd).unwrap().into_producer(), 1, 5)
            .unwrap()
            .untracked();
        let rq = Mutex::new(rq);
        let mut c = ring.into_consumer();
        let bell = Doorbell::new().unwrap();
        let post = |id| post_recvs(RqGuard::new(&rq, &bell, true), &[RecvWr::new(id, &[])]);
        for id in 0..5 {
            post(id).unwrap();
        }
        // The daemon took them all into the transport.
        while let Some(slot) = c.peek().unwrap() {
            slot.keep();
        }
        assert_eq!(c.read_ahead(), 5);
        assert_eq!(post(5).unwrap_err().errno(), libc::ENOMEM);
        // A message used one.
        c.release_read(1);
        post(5).unwrap();
        assert_eq!(post(6).unwrap_err().errno(), libc::ENOMEM);
    }

    /// Sends count until a polled completion covers them: a signaled one
    /// frees itself and the unsignaled ones before it.
    #[test]
    fn sends_beyond_max_send_wr_are_enomem_until_polled() {
        let (ring, fd) = Ring::create("rxu-client-test", abi::send_slot_size(2, 32), 8).unwrap();
        let lim = SqLimits {
            qp_type: QpType::Rc,
            max_sge: 2,
            max_inline: 32,
        };
        let sq = SendQueue::new(Ring::attach(&fd).unwrap().into_producer(), lim, 3).unwrap();
        let wq = WorkQueues {
            sq: Mutex::new(sq),
            rq: None,
        };
        let mut c = ring.into_consumer();
        let bell = Doorbell::new().unwrap();
        let post = |wr: SendWr<'_>| post_sends(SqGuard::new(&wq.sq, &bell, true), &[wr]);
        post(SendWr::send(1, &[])).unwrap();
        post(SendWr::send(2, &[]).signaled()).unwrap();
        post(SendWr::send(3, &[])).unwrap();
        let mut b = vec![0u8; c.slot_size()];
        while c.try_pop(&mut b).unwrap() {}
        assert_eq!(SqGuard::new(&wq.sq, &bell, true).free_slots().unwrap(), 0);
        assert_eq!(
            post(SendWr::send(4, &[])).unwrap_err().errno(),
            libc::ENOMEM
        );
        wq.completed(&wc(2, WcOpcode::Send));
        assert_eq!(SqGuard::new(&wq.sq, &bell, true).free_slots().unwrap(), 2);
        post(SendWr::send(4, &[])).unwrap();
        post(SendWr::send(5, &[])).unwrap();
        assert_eq!(
            post(SendWr::send(6, &[])).unwrap_err().errno(),
            libc::ENOMEM
        );
    }
}
