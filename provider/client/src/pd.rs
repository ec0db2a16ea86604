//! Protection domains.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use super::context::{unexpected, Context};
use super::error::{Error, Result};
use super::placement::RingAlloc;
use rxu_abi::proto::{MrRange, Request, Response, MAX_ADVISE_RANGES};
use transport::verbs::Sge;

/// A protection domain. Clones share it; MRs, QPs and SRQs hold a clone, so
/// the daemon object goes away only after everything created in it.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

struct PdInner {
    ctx: Context,
    handle: u32,
    /// Cleared by an explicit successful dealloc, so Drop sends nothing.
    live: AtomicBool,
    /// Address handles in it: client-side only, so the daemon cannot
    /// refuse the dealloc for them; [`Pd::dealloc`] does.
    ahs: AtomicUsize,
    /// Where the rings of QPs and SRQs created through this handle are
    /// mapped (a parent domain's allocator); `None`: mappings of their own.
    rings: Option<Arc<dyn RingAlloc>>,
    /// For a handle made by [`Pd::with_ring_alloc`]: the PD it stands for
    /// (kept alive by it; this handle never deallocates it).
    base: Option<Pd>,
}

impl Pd {
    pub fn alloc(ctx: &Context) -> Result<Pd> {
        match ctx.call(&Request::AllocPd, &[])?.0 {
            Response::Pd { pd } => Ok(Pd {
                inner: Arc::new(PdInner {
                    ctx: ctx.clone(),
                    handle: pd,
                    live: AtomicBool::new(true),
                    ahs: AtomicUsize::new(0),
                    rings: None,
                    base: None,
                }),
            }),
            other => Err(unexpected("Pd", &other)),
        }
    }

    /// The same PD, with the rings of the QPs and SRQs created through
    /// the returned handle placed in memory from `rings` (a parent domain
    /// with custom allocators).
    pub fn with_ring_alloc(&self, rings: Arc<dyn RingAlloc>) -> Pd {
        let base = self.inner.base.clone().unwrap_or_else(|| self.clone());
        Pd {
            inner: Arc::new(PdInner {
                ctx: self.inner.ctx.clone(),
                handle: self.inner.handle,
                live: AtomicBool::new(false),
                ahs: AtomicUsize::new(0),
                rings: Some(rings),
                base: Some(base),
            }),
        }
    }

    /// The ring allocator of this handle, if any.
    pub fn ring_alloc(&self) -> Option<&Arc<dyn RingAlloc>> {
        self.inner.rings.as_ref()
    }

    /// `ibv_import_pd`: PD `handle` of the context `ctx` imported. Dropping
    /// it releases nothing (`ibv_unimport_pd`); [`Pd::dealloc`] destroys
    /// the shared PD, as on a kernel.
    pub fn import(ctx: &Context, handle: u32) -> Result<Pd> {
        ctx.call_ok(&Request::ImportPd { pd: handle })?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: ctx.clone(),
                handle,
                live: AtomicBool::new(false),
                ahs: AtomicUsize::new(0),
                rings: None,
                base: None,
            }),
        })
    }

    /// The daemon's PD number.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// `ibv_advise_mr`: advice (`enum ibv_advise_mr_advice`) about ranges
    /// of on-demand regions of this PD; `flags` `IBV_ADVISE_MR_FLAG_FLUSH`
    /// makes it synchronous. rxud checks it (synchronous: mlx5's errnos;
    /// asynchronous: rxe's, 0 for any region of the PD with local write).
    pub fn advise_mr(&self, advice: u32, flags: u32, sges: &[Sge]) -> Result<()> {
        if sges.is_empty() || sges.len() > MAX_ADVISE_RANGES {
            return Err(Error::Invalid("advise_mr: 1 to 256 ranges"));
        }
        let ranges = sges
            .iter()
            .map(|s| MrRange {
                addr: s.addr,
                len: s.length,
                lkey: s.lkey,
            })
            .collect();
        self.inner.ctx.call_ok(&Request::AdviseMr {
            pd: self.inner.handle,
            advice,
            flags,
            ranges,
        })
    }

    /// Deallocates now, reporting errors (EBUSY while objects use it,
    /// address handles included, as the kernel counts them). On failure
    /// the PD is handed back unchanged.
    pub fn dealloc(self) -> Result<(), (Pd, Error)> {
        if self.inner.base.is_some() {
            let e = Error::Invalid("deallocate the PD a ring-allocator handle stands for");
            return Err((self, e));
        }
        if self.inner.ahs.load(Ordering::Acquire) > 0 {
            return Err((self, Error::Busy("address handles use the PD")));
        }
        match self.inner.ctx.call_ok(&Request::DeallocPd {
            pd: self.inner.handle,
        }) {
            Ok(()) => {
                self.inner.live.store(false, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

/// An address handle's hold on its PD: counted while it lives.
pub(crate) struct AhUse(Pd);

impl AhUse {
    /// Counted in the PD itself, also when made through a parent
    /// domain's handle.
    pub(crate) fn new(pd: &Pd) -> AhUse {
        let pd = pd.inner.base.as_ref().unwrap_or(pd);
        pd.inner.ahs.fetch_add(1, Ordering::AcqRel);
        AhUse(pd.clone())
    }
}

impl Clone for AhUse {
    fn clone(&self) -> AhUse {
        AhUse::new(&self.0)
    }
}

impl Drop for AhUse {
    fn drop(&mut self) {
        self.0.inner.ahs.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        if self.live.load(Ordering::Relaxed) {
            let _ = self.ctx.call_ok(&Request::DeallocPd { pd: self.handle });
        }
    }
}
