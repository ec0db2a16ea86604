//! `ibv_alloc_parent_domain` (freed by `ibv_dealloc_pd`, in `ops::pd`).
//! A parent domain is a provider object only, as in mlx5: the daemon sees
//! the PD it stands for. Its allocator callbacks hold the rings (rxu's
//! queue buffers) of the QPs, CQs and SRQs created on it, asked for with
//! rxu's resource types: `rdma_driver_id` 0 (rxu has none) in the upper 32
//! bits and 1 CQ, 2 SQ, 3 RQ, 4 SRQ (`rxu_client::RingKind`) below.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rxu_client::{Alloc, RingAlloc, RingKind};

use crate::abi::consts::parent_domain as pdm;
use crate::abi::{IbvContext, IbvParentDomainInitAttr, IbvPd, PdAllocFn, PdFreeFn};
use crate::context::state::state;
use crate::guard;
use crate::objects::domain::ParentDomain;
use crate::objects::{rxu_pd, RxuPd};

/// The application's allocator of a parent domain.
struct CAllocator {
    /// The parent domain's own `ibv_pd`, passed back to the callbacks.
    domain: *mut IbvPd,
    pd_context: *mut c_void,
    alloc: PdAllocFn,
    free: PdFreeFn,
}

// SAFETY: the pointers are only handed back to the application's own
// callbacks, which it gave for use by verbs on any of its threads; the
// parent domain outlives every ring (its dealloc is EBUSY while objects
// created on it exist, and those give their rings back when destroyed).
unsafe impl Send for CAllocator {}
// SAFETY: as above; nothing here is mutated.
unsafe impl Sync for CAllocator {}

impl RingAlloc for CAllocator {
    fn alloc(&self, len: usize, align: usize, kind: RingKind) -> Alloc {
        // SAFETY: the application's callback, with the arguments its
        // contract names (ibv_alloc_parent_domain(3)).
        let p = unsafe { (self.alloc)(self.domain, self.pd_context, len, align, kind as u64) };
        if p as usize == pdm::USE_DEFAULT {
            return Alloc::Default;
        }
        match NonNull::new(p.cast::<u8>()) {
            Some(p) => Alloc::Memory(p),
            None => Alloc::Failed,
        }
    }

    fn free(&self, addr: NonNull<u8>, kind: RingKind) {
        // SAFETY: addr came from this allocator's alloc for this kind.
        unsafe {
            (self.free)(
                self.domain,
                self.pd_context,
                addr.as_ptr().cast(),
                kind as u64,
            )
        }
    }
}

/// Errnos as mlx5 and libibverbs give them: no PD, a thread domain (rxu
/// makes none, so none is valid), an unknown `comp_mask` bit, a PD of
/// another context or a parent domain for `pd`, or allocators without
/// both callbacks: EINVAL.
pub unsafe extern "C" fn alloc_parent_domain(
    ctx: *mut IbvContext,
    attr: *mut IbvParentDomainInitAttr,
) -> *mut IbvPd {
    guard::ptr_op("alloc_parent_domain", || {
        // SAFETY: ctx is ours (ops: whose pointers).
        unsafe { state(ctx)? };
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attributes (checked non-NULL).
        let a = unsafe { &*attr };
        if a.pd.is_null() || !a.td.is_null() {
            return Err(libc::EINVAL);
        }
        if a.comp_mask & !(pdm::ALLOCATORS | pdm::PD_CONTEXT) != 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: a PD of this application, so one of ours (ops: whose
        // pointers); its context is checked below.
        let base = unsafe { rxu_pd(a.pd) };
        if base.ibv.context != ctx || base.parent.is_some() {
            return Err(libc::EINVAL);
        }
        let callbacks = if a.comp_mask & pdm::ALLOCATORS != 0 {
            match (a.alloc, a.free) {
                (Some(al), Some(fr)) => Some((al, fr)),
                _ => return Err(libc::EINVAL),
            }
        } else {
            None
        };
        let pd_context = if a.comp_mask & pdm::PD_CONTEXT != 0 {
            a.pd_context
        } else {
            std::ptr::null_mut()
        };
        let mut b = Box::new(RxuPd {
            ibv: IbvPd {
                context: ctx,
                handle: base.ibv.handle,
            },
            pd: base.pd.clone(),
            parents: AtomicU32::new(0),
            parent: Some(ParentDomain {
                protection: a.pd,
                users: Arc::new(AtomicU32::new(0)),
            }),
        });
        if let Some((alloc, free)) = callbacks {
            let me: *mut IbvPd = &raw mut b.ibv;
            let c = CAllocator {
                domain: me,
                pd_context,
                alloc,
                free,
            };
            b.pd = base.pd.with_ring_alloc(Arc::new(c));
        }
        base.parents.fetch_add(1, Ordering::AcqRel);
        Ok(Box::into_raw(b).cast())
    })
}

/// Frees a parent domain: EBUSY while objects created on it exist.
///
/// # Safety
/// `pd` is a live parent domain of ours; on success it is freed.
pub unsafe fn dealloc_parent_domain(pd: *mut IbvPd) -> guard::OpResult<()> {
    // SAFETY: pd is ours and live (the contract).
    let p = unsafe { rxu_pd(pd) };
    let Some(d) = &p.parent else {
        return Err(libc::EINVAL);
    };
    if d.users.load(Ordering::Acquire) > 0 {
        return Err(libc::EBUSY);
    }
    // SAFETY: the PD it was made from is live: its dealloc is EBUSY while
    // this parent domain exists.
    unsafe { rxu_pd(d.protection) }
        .parents
        .fetch_sub(1, Ordering::AcqRel);
    // SAFETY: from Box::into_raw in alloc_parent_domain; the caller's last use.
    drop(unsafe { Box::from_raw(pd.cast::<RxuPd>()) });
    Ok(())
}
