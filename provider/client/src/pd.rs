//! Protection domains.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use super::context::{unexpected, Context};
use super::error::{Error, Result};
use rxu_abi::proto::{Request, Response};

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
                }),
            }),
            other => Err(unexpected("Pd", &other)),
        }
    }

    /// The daemon's PD number.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Deallocates now, reporting errors (EBUSY while objects use it,
    /// address handles included, as the kernel counts them). On failure
    /// the PD is handed back unchanged.
    pub fn dealloc(self) -> Result<(), (Pd, Error)> {
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
    pub(crate) fn new(pd: &Pd) -> AhUse {
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
