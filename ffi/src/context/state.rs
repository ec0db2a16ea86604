//! The per-context state and the way back to it from an `ibv_context`.
//! Every op that needs the client connection starts here.

use std::sync::atomic::AtomicU32;

use rxu_client::Context;

use crate::abi::{IbvContext, VerbsContext};
use crate::channel::Channels;
use crate::events::Live;
use crate::guard::OpResult;
use crate::version::Lib;

/// What `_verbs_init_and_alloc_context` allocates (zeroed) for us.
#[repr(C)]
pub struct RxuContext {
    pub vctx: VerbsContext,
    /// Set once the context is fully open; NULL before.
    pub state: *mut CtxState,
}

/// The provider's per-context state.
pub struct CtxState {
    pub client: Context,
    pub lib: &'static Lib,
    pub channels: Channels,
    pub live: Live,
    pub next_handle: AtomicU32,
}

/// The state behind an `ibv_context` this provider opened.
///
/// # Safety
/// `ctx` must be a live context created by
/// [`alloc_context`](crate::context::open::alloc_context).
pub unsafe fn state<'a>(ctx: *mut IbvContext) -> OpResult<&'a CtxState> {
    // SAFETY: a context from alloc_context (the contract) is the `context`
    // of our VerbsContext, as from_ibv requires; that VerbsContext is the
    // first field of an RxuContext, so the cast gives it.
    let rctx = unsafe { VerbsContext::from_ibv(ctx) }.cast::<RxuContext>();
    // SAFETY: rctx is that live RxuContext; `state` is set before the
    // context is handed out and lives until free_context.
    let st = unsafe { (*rctx).state };
    if st.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-NULL, from Box::into_raw in alloc_context.
    Ok(unsafe { &*st })
}
