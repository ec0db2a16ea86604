//! `free_context`, and the release `alloc_context` also uses when opening
//! fails.

use crate::abi::IbvContext;
use crate::context::state::RxuContext;
use crate::guard;
use crate::version::{self, Lib};

/// Releases the provider state, then the library's part, then the block.
///
/// # Safety
/// `rctx` must be a live RxuContext from `_verbs_init_and_alloc_context`
/// that nothing uses any more; it is freed.
pub unsafe fn teardown(rctx: *mut RxuContext, lib: &Lib) {
    // SAFETY: rctx is a live RxuContext from _verbs_init_and_alloc_context
    // that nothing else uses (the contract); `state` is NULL or from
    // Box::into_raw.
    unsafe {
        let st = std::mem::replace(&mut (*rctx).state, std::ptr::null_mut());
        if !st.is_null() {
            drop(Box::from_raw(st));
        }
        // Closes cmd_fd and async_fd, drops the device reference.
        (lib.uninit_context)(RxuContext::vctx(rctx, lib.layout.context_off));
        libc::free(rctx.cast());
    }
}

pub unsafe extern "C" fn free_context(ctx: *mut IbvContext) {
    guard::void_op("free_context", || {
        let Some(lib) = version::lib() else { return };
        // SAFETY: ctx is one of ours (the library calls this once per
        // context, possibly half-opened: state may be NULL).
        unsafe { teardown(RxuContext::from_ibv(ctx), lib) };
    })
}
