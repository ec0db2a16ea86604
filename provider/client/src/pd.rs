//! Protection domains.

use std::sync::atomic::{AtomicBool, Ordering};
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
}

impl Pd {
    pub fn alloc(ctx: &Context) -> Result<Pd> {
        match ctx.call(&Request::AllocPd, &[])?.0 {
            Response::Pd { pd } => Ok(Pd {
                inner: Arc::new(PdInner {
                    ctx: ctx.clone(),
                    handle: pd,
                    live: AtomicBool::new(true),
                }),
            }),
            other => Err(unexpected("Pd", &other)),
        }
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

    /// Deallocates now, reporting errors (EBUSY while objects use it). On
    /// failure the PD is handed back unchanged.
    pub fn dealloc(self) -> Result<(), (Pd, Error)> {
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

impl Drop for PdInner {
    fn drop(&mut self) {
        if self.live.load(Ordering::Relaxed) {
            let _ = self.ctx.call_ok(&Request::DeallocPd { pd: self.handle });
        }
    }
}
