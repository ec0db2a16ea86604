//! `ibv_import_pd` / `ibv_import_mr` and their `unimport_*`: the PDs and
//! MRs of the context this one imported (`crate::context::import`), named
//! by handle. Unimporting frees only this side's object; deallocating an
//! imported PD or deregistering an imported MR destroys the shared object,
//! as on a kernel. An unknown handle fails with ENOENT (the kernel's
//! object lookup). Like rdma-core's providers, the imported MR's address
//! is NULL: the importer never learns it.

use std::sync::atomic::{AtomicU32, Ordering};

use rxu_client::{Mr, Pd};

use crate::abi::{IbvContext, IbvMr, IbvPd, VerbsMr};
use crate::context::state::state;
use crate::guard::{self, client_err};
use crate::log_info;
use crate::objects::{pd_of, rxu_pd, RxuMr, RxuPd};

/// `enum ibv_mr_type` IBV_MR_TYPE_IMPORTED_MR.
const MR_TYPE_IMPORTED: i32 = 2;

pub unsafe extern "C" fn import_pd(ctx: *mut IbvContext, handle: u32) -> *mut IbvPd {
    guard::ptr_op("import_pd", || {
        // SAFETY: ctx is one of ours (ops: whose pointers).
        let st = unsafe { state(ctx)? };
        let pd = Pd::import(&st.client, handle).map_err(client_err("import_pd"))?;
        let ibv = IbvPd {
            context: ctx,
            handle,
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

pub unsafe extern "C" fn unimport_pd(pd: *mut IbvPd) {
    guard::void_op("unimport_pd", || {
        // SAFETY: pd is one of ours (ops: whose pointers).
        let r = unsafe { rxu_pd(pd) };
        // As mlx5 (EINVAL / EBUSY there; this verb returns nothing): a
        // parent domain, or a PD parent domains still use, stays.
        if r.parent.is_some() || r.parents.load(Ordering::Acquire) > 0 {
            log_info!("unimport_pd: a parent domain, or a PD with parent domains: kept");
            return;
        }
        // SAFETY: from import_pd; the application's last use. Its client
        // PD releases nothing.
        drop(unsafe { Box::from_raw(pd.cast::<RxuPd>()) });
    })
}

pub unsafe extern "C" fn import_mr(pd: *mut IbvPd, handle: u32) -> *mut IbvMr {
    guard::ptr_op("import_mr", || {
        // SAFETY: pd is one of ours (ops: whose pointers).
        let p = unsafe { pd_of(pd) };
        let mr = Mr::import(p, handle).map_err(client_err("import_mr"))?;
        let vmr = VerbsMr {
            ibv_mr: IbvMr {
                // SAFETY: pd is live.
                context: unsafe { (*pd).context },
                pd,
                addr: std::ptr::null_mut(),
                length: usize::try_from(mr.len()).unwrap_or(usize::MAX),
                handle,
                lkey: mr.lkey(),
                rkey: mr.rkey(),
            },
            mr_type: MR_TYPE_IMPORTED,
            access: 0,
        };
        let b = Box::new(RxuMr { vmr, mr: Some(mr) });
        Ok(Box::into_raw(b).cast())
    })
}

pub unsafe extern "C" fn unimport_mr(mr: *mut IbvMr) {
    guard::void_op("unimport_mr", || {
        // SAFETY: mr is one of ours (an ibv_mr is the start of our
        // verbs_mr); the application's last use. Its client MR releases
        // nothing.
        drop(unsafe { Box::from_raw(mr.cast::<RxuMr>()) });
    })
}
