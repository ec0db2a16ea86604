//! Memory windows. Binding is a work request ([`crate::SendWr::bind_mw`];
//! `ibv_bind_mw` for type 1 is one underneath); the window's current rkey
//! is the caller's to track, as in verbs.

use super::context::unexpected;
use super::error::{Error, Result};
use super::pd::Pd;
use rxu_abi::proto::{Request, Response};

pub use transport::qp::{MwBind, MwType};

/// A memory window. Deallocated on drop (errors ignored) or by
/// [`Mw::dealloc`].
pub struct Mw {
    pd: Pd,
    handle: u32,
    rkey: u32,
    ty: MwType,
    live: bool,
}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mw")
            .field("handle", &self.handle)
            .field("rkey", &self.rkey)
            .field("type", &self.ty)
            .finish()
    }
}

impl Mw {
    /// `ibv_alloc_mw`.
    pub fn alloc(pd: &Pd, ty: MwType) -> Result<Mw> {
        Self::alloc_raw(pd, ty as u32)
    }

    /// `ibv_alloc_mw` with the C enum's value (anything but 1 and 2 is
    /// refused by the daemon with EINVAL).
    pub fn alloc_raw(pd: &Pd, ty: u32) -> Result<Mw> {
        let req = Request::AllocMw {
            pd: pd.handle(),
            mw_type: ty,
        };
        match pd.context().call(&req, &[])?.0 {
            Response::Mw { mw, rkey } => Ok(Mw {
                pd: pd.clone(),
                handle: mw,
                rkey,
                ty: MwType::from_ibv(ty).unwrap_or(MwType::One),
                live: true,
            }),
            other => Err(unexpected("Mw", &other)),
        }
    }

    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// The rkey the window was allocated with.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    pub fn mw_type(&self) -> MwType {
        self.ty
    }
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    fn dealloc_inner(&mut self) -> Result<()> {
        self.pd
            .context()
            .call_ok(&Request::DeallocMw { mw: self.handle })?;
        self.live = false;
        Ok(())
    }

    /// Deallocates now, reporting errors; on failure the MW is handed back.
    pub fn dealloc(mut self) -> Result<(), (Mw, Error)> {
        match self.dealloc_inner() {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        if self.live {
            let _ = self.dealloc_inner();
        }
    }
}
