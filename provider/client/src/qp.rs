//! Queue pairs: SQ and RQ rings this process produces, control through the
//! daemon.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use super::context::{take_fd, unexpected, Context};
use super::cq::Cq;
use super::error::{Error, PostError, Result};
use super::pd::Pd;
use super::placement::{self, RingKind};
use super::queue::{post_recvs, post_sends, RecvQueue, RqGuard, SendQueue, SqGuard, WorkQueues};
use super::srq::Srq;
use super::wr::{RecvWr, SendWr, SqLimits};
use rxu_abi::proto::{QpAttr, QpCap, QpType, Request, Response};
use transport::qp::QpState;
use transport::verbs::qp_attr_mask as mask;

/// What `Qp::create` needs, as `struct ibv_qp_init_attr`.
#[derive(Clone, Copy)]
pub struct QpInit<'a> {
    pub qp_type: QpType,
    pub send_cq: &'a Cq,
    pub recv_cq: &'a Cq,
    pub srq: Option<&'a Srq>,
    pub cap: QpCap,
    /// Every send WR completes with a CQE, whatever its flags.
    pub sq_sig_all: bool,
    /// Comes back in async events about this QP.
    pub user_handle: u64,
}

impl<'a> QpInit<'a> {
    pub fn new(qp_type: QpType, send_cq: &'a Cq, recv_cq: &'a Cq, cap: QpCap) -> Self {
        QpInit {
            qp_type,
            send_cq,
            recv_cq,
            srq: None,
            cap,
            sq_sig_all: false,
            user_handle: 0,
        }
    }
}

/// A queue pair. Several threads may post to it at once (one lock per
/// queue). Destroyed on drop (errors ignored) or by [`Qp::destroy`].
pub struct Qp {
    ctx: Context,
    qpn: u32,
    qp_type: QpType,
    user_handle: u64,
    cap: QpCap,
    /// Last state set through `modify` or seen by `query`; gates posting
    /// as `ibv_post_send`/`ibv_post_recv` do.
    state: AtomicU8,
    /// Shared with its CQs (completion accounting, flush on device loss).
    queues: Arc<WorkQueues>,
    live: bool,
    // Held so the CQs, SRQ and PD outlive the QP in the daemon.
    _send_cq: Cq,
    _recv_cq: Cq,
    srq: Option<Srq>,
    pd: Pd,
}

impl Qp {
    pub fn create(pd: &Pd, init: &QpInit<'_>) -> Result<Qp> {
        let ctx = pd.context();
        ctx.doorbell()?;
        let req = Request::CreateQp {
            pd: pd.handle(),
            qp_type: init.qp_type,
            send_cq: init.send_cq.handle(),
            recv_cq: init.recv_cq.handle(),
            srq: init.srq.map(Srq::handle),
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            user_handle: init.user_handle,
        };
        let (resp, mut fds) = ctx.call(&req, &[])?;
        let Response::Qp { qpn, cap, .. } = resp else {
            return Err(unexpected("Qp", &resp));
        };
        let queues = Self::attach_queues(&mut fds, pd, init, &cap);
        let (mut sq, rq) = match queues {
            Ok(q) => q,
            Err(e) => {
                let _ = ctx.call_ok(&Request::DestroyQp { qp: qpn });
                return Err(e);
            }
        };
        sq.set_sig_all(init.sq_sig_all);
        let queues = Arc::new(WorkQueues {
            sq: Mutex::new(sq),
            rq: rq.map(Mutex::new),
        });
        let recvs = queues.rq.is_some();
        if init.send_cq.same(init.recv_cq) {
            init.send_cq.attach(qpn, &queues, true, recvs);
        } else {
            init.send_cq.attach(qpn, &queues, true, false);
            if recvs {
                init.recv_cq.attach(qpn, &queues, false, true);
            }
        }
        Ok(Qp {
            ctx: ctx.clone(),
            qpn,
            qp_type: init.qp_type,
            user_handle: init.user_handle,
            cap,
            state: AtomicU8::new(QpState::Reset as u8),
            queues,
            live: true,
            _send_cq: init.send_cq.clone(),
            _recv_cq: init.recv_cq.clone(),
            srq: init.srq.cloned(),
            pd: pd.clone(),
        })
    }

    fn attach_queues(
        fds: &mut Vec<std::os::fd::OwnedFd>,
        pd: &Pd,
        init: &QpInit<'_>,
        cap: &QpCap,
    ) -> Result<(SendQueue, Option<RecvQueue>)> {
        let rings = pd.ring_alloc();
        let sq_ring = placement::attach(take_fd(fds, "SQ ring")?, rings, RingKind::Sq)?;
        let lim = SqLimits {
            qp_type: init.qp_type,
            max_sge: cap.max_send_sge,
            max_inline: cap.max_inline_data,
        };
        let sq = SendQueue::new(sq_ring.into_producer(), lim, cap.max_send_wr)?;
        let rq = match init.srq {
            Some(_) => None,
            None => {
                let ring = placement::attach(take_fd(fds, "RQ ring")?, rings, RingKind::Rq)?;
                Some(RecvQueue::new(
                    ring.into_producer(),
                    cap.max_recv_sge,
                    cap.max_recv_wr,
                )?)
            }
        };
        Ok((sq, rq))
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    pub fn user_handle(&self) -> u64 {
        self.user_handle
    }
    /// The capacities granted at creation.
    pub fn cap(&self) -> QpCap {
        self.cap
    }
    pub fn pd(&self) -> &Pd {
        &self.pd
    }
    pub fn srq(&self) -> Option<&Srq> {
        self.srq.as_ref()
    }
    pub fn context(&self) -> &Context {
        &self.ctx
    }
    /// The state as last set or queried (`ibv_qp_state` numbering).
    pub fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    /// `ibv_modify_qp`: `mask` of `ibv_qp_attr_mask` bits ([`mask`]).
    pub fn modify(&self, attr: &QpAttr, mask: u32) -> Result<()> {
        self.ctx.call_ok(&Request::ModifyQp {
            qp: self.qpn,
            mask,
            attr: *attr,
        })?;
        if mask & mask::STATE != 0 {
            self.state.store(attr.qp_state, Ordering::Relaxed);
            if attr.qp_state == QpState::Reset as u8 {
                self.queues.reset();
                self._send_cq.clean(self.qpn)?;
                if !self._recv_cq.same(&self._send_cq) {
                    self._recv_cq.clean(self.qpn)?;
                }
            }
        }
        Ok(())
    }

    /// `ibv_query_qp`: the attributes and capacities the daemon reports.
    pub fn query(&self, mask: u32) -> Result<(QpAttr, QpCap)> {
        match self
            .ctx
            .call(&Request::QueryQp { qp: self.qpn, mask }, &[])?
            .0
        {
            Response::QpAttr { attr, cap } => {
                if mask & mask::STATE != 0 {
                    self.state.store(attr.qp_state, Ordering::Relaxed);
                }
                Ok((attr, cap))
            }
            other => Err(unexpected("QpAttr", &other)),
        }
    }

    /// `ibv_attach_mcast`: this (UD) QP receives the group of `gid`.
    pub fn attach_mcast(&self, gid: &[u8; 16], lid: u16) -> Result<()> {
        self.ctx.call_ok(&Request::AttachMcast {
            qp: self.qpn,
            gid: *gid,
            lid,
        })
    }

    /// `ibv_detach_mcast`.
    pub fn detach_mcast(&self, gid: &[u8; 16], lid: u16) -> Result<()> {
        self.ctx.call_ok(&Request::DetachMcast {
            qp: self.qpn,
            gid: *gid,
            lid,
        })
    }

    fn can_send(&self) -> bool {
        // As rxe: RESET, INIT and RTR refuse sends.
        self.state() >= QpState::Rts as u8
    }

    /// Locks the send queue for a batch of posts (the doorbell, if needed,
    /// rings when the guard drops).
    pub fn lock_sq(&self) -> Result<SqGuard<'_>> {
        if self.ctx.is_dead() {
            return Err(Error::DeviceFatal);
        }
        Ok(SqGuard::new(
            &self.queues.sq,
            self.ctx.doorbell()?,
            self.can_send(),
        ))
    }

    /// Locks the receive queue; EINVAL on a QP attached to an SRQ.
    pub fn lock_rq(&self) -> Result<RqGuard<'_>> {
        if self.ctx.is_dead() {
            return Err(Error::DeviceFatal);
        }
        let rq = self
            .queues
            .rq
            .as_ref()
            .ok_or(Error::Invalid("QP receives through its SRQ"))?;
        let ready = self.state() != QpState::Reset as u8;
        Ok(RqGuard::new(rq, self.ctx.doorbell()?, ready))
    }

    /// `ibv_post_send`: posts `wrs` in order; on failure, the WRs before
    /// `PostError::index` are posted, the rest are not (ENOMEM: SQ full,
    /// EINVAL: bad WR or QP state).
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let g = self
            .lock_sq()
            .map_err(|error| PostError { index: 0, error })?;
        post_sends(g, wrs)
    }

    /// `ibv_post_recv`, with the same contract as [`Qp::post_send`].
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let g = self
            .lock_rq()
            .map_err(|error| PostError { index: 0, error })?;
        post_recvs(g, wrs)
    }

    fn destroy_inner(&mut self) -> Result<()> {
        self.ctx.call_ok(&Request::DestroyQp { qp: self.qpn })?;
        self.live = false;
        self._send_cq.detach(self.qpn);
        self._recv_cq.detach(self.qpn);
        Ok(())
    }

    /// Destroys now, reporting errors; on failure the QP is handed back.
    pub fn destroy(mut self) -> Result<(), (Qp, Error)> {
        match self.destroy_inner() {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        if self.live {
            let _ = self.destroy_inner();
        }
        self._send_cq.detach(self.qpn);
        self._recv_cq.detach(self.qpn);
    }
}
