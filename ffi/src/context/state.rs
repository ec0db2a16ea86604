//! The per-context state and the way back to it from an `ibv_context`.
//! Every op that needs the client connection starts here.

use std::sync::atomic::AtomicU32;

use rxu_client::Context;

use std::mem::offset_of;

use crate::abi::{IbvContext, VerbsContext, VerbsContextTail};
use crate::channel::Channels;
use crate::events::Live;
use crate::guard::OpResult;
use crate::version::Lib;

/// Room in front of the public context for the rest of the library's
/// `verbs_context` (whose size depends on the release).
const LIB_SLOTS: usize = 64;

/// The largest `offsetof(struct verbs_context, context)` that fits.
pub const MAX_CONTEXT_OFFSET: usize =
    offset_of!(RxuContext, tail.context) - offset_of!(RxuContext, lib_slots);

/// What `_verbs_init_and_alloc_context` allocates (zeroed) for us. The
/// public `ibv_context` sits at a fixed offset whatever the release; the
/// library's `verbs_context` ends with it, so it starts
/// `layout.context_off` bytes before it, inside `lib_slots` (whose start
/// it may not reach).
#[repr(C)]
pub struct RxuContext {
    /// Set once the context is fully open; NULL before.
    pub state: *mut CtxState,
    /// The library's op slots and private pointer; only it writes them.
    lib_slots: [usize; LIB_SLOTS],
    /// `sz` and the public context, the last members of every release's
    /// `verbs_context`.
    pub tail: VerbsContextTail,
}

impl RxuContext {
    /// The offset of the library's `verbs_context` in an RxuContext, for a
    /// library whose `context` member is at `context_off` (at most
    /// [`MAX_CONTEXT_OFFSET`], checked when the library was detected).
    pub fn vctx_offset(context_off: usize) -> usize {
        offset_of!(RxuContext, tail.context) - context_off.min(MAX_CONTEXT_OFFSET)
    }

    /// The library's `verbs_context` inside `this`.
    ///
    /// # Safety
    /// `this` must point to an RxuContext allocation; `context_off` is the
    /// running library's.
    pub unsafe fn vctx(this: *mut RxuContext, context_off: usize) -> *mut VerbsContext {
        // SAFETY: the offset is inside the allocation (vctx_offset).
        unsafe { this.cast::<u8>().add(Self::vctx_offset(context_off)).cast() }
    }

    /// The RxuContext holding `ctx`.
    ///
    /// # Safety
    /// `ctx` must be the public context of a live RxuContext.
    pub unsafe fn from_ibv(ctx: *mut IbvContext) -> *mut RxuContext {
        let off = offset_of!(RxuContext, tail.context);
        // SAFETY: per the contract, `ctx` lies `off` bytes into an
        // RxuContext, so the subtraction stays inside that allocation.
        unsafe { ctx.cast::<u8>().sub(off).cast() }
    }
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
    // SAFETY: a context from alloc_context (the contract) is the public
    // context of an RxuContext, as from_ibv requires.
    let rctx = unsafe { RxuContext::from_ibv(ctx) };
    // SAFETY: rctx is that live RxuContext; `state` is set before the
    // context is handed out and lives until free_context.
    let st = unsafe { (*rctx).state };
    if st.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-NULL, from Box::into_raw in alloc_context.
    Ok(unsafe { &*st })
}
