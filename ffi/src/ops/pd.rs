//! Protection domains (and the dealloc of parent domains, made in
//! `ops::domain`).

use std::sync::atomic::{AtomicU32, Ordering};

use rxu_client::Pd;

use crate::abi::{IbvContext, IbvPd};
use crate::context::state::state;
use crate::guard::{self, client_err};
use crate::objects::{rxu_pd, RxuPd};
use crate::ops::domain;

pub unsafe extern "C" fn alloc_pd(ctx: *mut IbvContext) -> *mut IbvPd {
    guard::ptr_op("alloc_pd", || {
        // SAFETY: ctx is one of ours (libibverbs only calls our ops on them).
        let st = unsafe { state(ctx)? };
        let pd = Pd::alloc(&st.client).map_err(client_err("alloc_pd"))?;
        let ibv = IbvPd {
            context: ctx,
            handle: pd.handle(),
        };
        Ok(Box::into_raw(Box::new(RxuPd {
            ibv,
            pd,
            parents: AtomicU32::new(0),
            parent: None,
        }))
        .cast())
    })
}

pub unsafe extern "C" fn dealloc_pd(pd: *mut IbvPd) -> i32 {
    guard::int_op("dealloc_pd", || {
        // SAFETY: pd is one of ours (ops: whose pointers).
        let r = unsafe { rxu_pd(pd) };
        if r.parent.is_some() {
            // SAFETY: a live parent domain of ours.
            return unsafe { domain::dealloc_parent_domain(pd) };
        }
        // As mlx5: a PD with parent domains on it stays.
        if r.parents.load(Ordering::Acquire) > 0 {
            return Err(libc::EBUSY);
        }
        // Deallocating a clone marks the shared PD dead; on failure
        // (EBUSY) the object stays as it was.
        r.pd.clone()
            .dealloc()
            .map_err(|(_, e)| client_err("dealloc_pd")(e))?;
        // SAFETY: from Box::into_raw in alloc_pd; the application's last use.
        drop(unsafe { Box::from_raw(pd.cast::<RxuPd>()) });
        Ok(())
    })
}
