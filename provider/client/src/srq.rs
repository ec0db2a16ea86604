//! Shared receive queues: a ring this process produces, the daemon consumes.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::context::{take_fd, unexpected, Context};
use super::cq::Cq;
use super::error::{Error, PostError, Result};
use super::pd::Pd;
use super::placement::{self, RingKind};
use super::queue::{post_recvs, RecvQueue, RqGuard};
use super::wr::RecvWr;
use super::xrcd::Xrcd;
use rxu_abi::proto::{Request, Response};

/// `ibv_srq_attr_mask` bits for [`Srq::modify`].
pub use transport::verbs::srq_attr_mask;

/// SRQ attributes, as `struct ibv_srq_attr`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// A shared receive queue. Clones share it; QPs using it hold a clone.
#[derive(Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

struct SrqInner {
    pd: Pd,
    handle: u32,
    /// An XRC SRQ: the number initiators name it by.
    srqn: Option<u32>,
    user_handle: u64,
    attr: SrqAttr,
    /// max_wr now (a resize changes it).
    max_wr: AtomicU32,
    rq: Mutex<RecvQueue>,
    live: AtomicBool,
}

impl Srq {
    /// Creates an SRQ; `user_handle` comes back in its async events
    /// (SRQ_LIMIT_REACHED once fewer than `srq_limit` WRs remain, if non-zero).
    pub fn create(
        pd: &Pd,
        max_wr: u32,
        max_sge: u32,
        srq_limit: u32,
        user_handle: u64,
    ) -> Result<Srq> {
        let req = Request::CreateSrq {
            pd: pd.handle(),
            max_wr,
            max_sge,
            srq_limit,
            user_handle,
        };
        Self::make(pd, &req, user_handle)
    }

    /// `ibv_create_srq_ex` with IBV_SRQT_XRC: an SRQ of XRC domain `xrcd`
    /// whose receives complete on `cq`; [`Srq::srq_num`] is its number.
    pub fn create_xrc(
        pd: &Pd,
        xrcd: &Xrcd,
        cq: &Cq,
        attr: SrqAttr,
        user_handle: u64,
    ) -> Result<Srq> {
        let req = Request::CreateXrcSrq {
            pd: pd.handle(),
            xrcd: xrcd.handle(),
            cq: cq.handle(),
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
            user_handle,
        };
        Self::make(pd, &req, user_handle)
    }

    fn make(pd: &Pd, req: &Request, user_handle: u64) -> Result<Srq> {
        let ctx = pd.context();
        ctx.doorbell()?;
        let (resp, mut fds) = ctx.call(req, &[])?;
        let (srq, srqn, max_wr, max_sge, srq_limit) = match resp {
            Response::Srq {
                srq,
                max_wr,
                max_sge,
                srq_limit,
            } => (srq, None, max_wr, max_sge, srq_limit),
            Response::XrcSrq {
                srq,
                srqn,
                max_wr,
                max_sge,
                srq_limit,
            } => (srq, Some(srqn), max_wr, max_sge, srq_limit),
            other => return Err(unexpected("Srq", &other)),
        };
        let attached = take_fd(&mut fds, "SRQ ring")
            .and_then(|fd| placement::attach(fd, pd.ring_alloc(), RingKind::Srq))
            .and_then(|ring| RecvQueue::new(ring.into_producer(), max_sge, max_wr))
            .map(RecvQueue::untracked);
        let rq = match attached {
            Ok(rq) => rq,
            Err(e) => {
                let _ = ctx.call_ok(&Request::DestroySrq { srq });
                return Err(e);
            }
        };
        Ok(Srq {
            inner: Arc::new(SrqInner {
                pd: pd.clone(),
                handle: srq,
                srqn,
                user_handle,
                attr: SrqAttr {
                    max_wr,
                    max_sge,
                    srq_limit,
                },
                max_wr: AtomicU32::new(max_wr),
                rq: Mutex::new(rq),
                live: AtomicBool::new(true),
            }),
        })
    }

    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// `ibv_get_srq_num`: the XRC SRQ number (None for a basic SRQ).
    pub fn srq_num(&self) -> Option<u32> {
        self.inner.srqn
    }

    pub fn user_handle(&self) -> u64 {
        self.inner.user_handle
    }

    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// The attributes granted at creation, with max_wr as resized since.
    pub fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.inner.max_wr.load(Ordering::Relaxed),
            ..self.inner.attr
        }
    }

    fn ctx(&self) -> &Context {
        self.inner.pd.context()
    }

    /// `ibv_modify_srq`: `mask` of [`srq_attr_mask`] bits. Arming the limit
    /// (LIMIT) is what SRQ_LIMIT_REACHED events need. MAX_WR resizes: the
    /// daemon moves the posted receives to a new ring, which replaces the
    /// old one once the reply is in (posting waits meanwhile, as with
    /// rxe's queue lock).
    pub fn modify(&self, mask: u32, max_wr: u32, srq_limit: u32) -> Result<()> {
        let req = Request::ModifySrq {
            srq: self.inner.handle,
            mask,
            max_wr,
            srq_limit,
        };
        if mask & srq_attr_mask::MAX_WR == 0 {
            return self.ctx().call_ok(&req);
        }
        let mut rq = self.inner.rq.lock().unwrap_or_else(|p| p.into_inner());
        let (resp, mut fds) = self.ctx().call(&req, &[])?;
        let Response::Srq { max_wr, .. } = resp else {
            return Err(unexpected("Srq", &resp));
        };
        // The new ring lives where the old one did: in the parent domain's
        // allocator memory when the SRQ was made on one.
        let fd = take_fd(&mut fds, "SRQ ring")?;
        let ring = placement::attach(fd, self.inner.pd.ring_alloc(), RingKind::Srq)?;
        rq.replace_ring(ring.into_producer(), max_wr)?;
        self.inner.max_wr.store(max_wr, Ordering::Relaxed);
        Ok(())
    }

    /// `ibv_query_srq`: the daemon's current view.
    pub fn query(&self) -> Result<SrqAttr> {
        match self
            .ctx()
            .call(
                &Request::QuerySrq {
                    srq: self.inner.handle,
                },
                &[],
            )?
            .0
        {
            Response::Srq {
                max_wr,
                max_sge,
                srq_limit,
                ..
            } => Ok(SrqAttr {
                max_wr,
                max_sge,
                srq_limit,
            }),
            other => Err(unexpected("Srq", &other)),
        }
    }

    /// Locks the ring for a batch of posts.
    pub fn lock(&self) -> Result<RqGuard<'_>> {
        Ok(RqGuard::new(&self.inner.rq, self.ctx().doorbell()?, true))
    }

    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let g = self.lock().map_err(|error| PostError { index: 0, error })?;
        post_recvs(g, wrs)
    }

    /// Destroys now, reporting errors (EBUSY while a QP uses it); on
    /// failure the SRQ is handed back.
    pub fn destroy(self) -> Result<(), (Srq, Error)> {
        match self.inner.destroy() {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }
}

impl SrqInner {
    fn destroy(&self) -> Result<()> {
        self.pd
            .context()
            .call_ok(&Request::DestroySrq { srq: self.handle })?;
        self.live.store(false, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if self.live.load(Ordering::Relaxed) {
            let _ = self.destroy();
        }
    }
}
