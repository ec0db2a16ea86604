//! The `async_event` and `cq_event` ops: libibverbs calls them for each
//! event it hands the application, and they count it on the object it
//! names (bookkeeping in `crate::events`).

use std::sync::atomic::Ordering;

use rxu_client::event_type as ev;

use crate::abi::{IbvAsyncEvent, IbvContext, IbvCq};
use crate::context::state::state;
use crate::events::Kind;
use crate::guard;
use crate::objects::{RxuCq, RxuQp, RxuSrq};

fn kind_of(event_type: u32) -> Option<Kind> {
    match event_type {
        ev::CQ_ERR => Some(Kind::Cq),
        ev::QP_FATAL..=ev::PATH_MIG_ERR | ev::QP_LAST_WQE_REACHED => Some(Kind::Qp),
        ev::SRQ_ERR | ev::SRQ_LIMIT_REACHED => Some(Kind::Srq),
        _ => None,
    }
}

pub unsafe extern "C" fn async_event(ctx: *mut IbvContext, event: *mut IbvAsyncEvent) {
    guard::void_op("async_event", || {
        // SAFETY: ctx is ours; event is the library's filled-in event.
        let (st, e) = match unsafe { (state(ctx), &*event) } {
            (Ok(st), e) => (st, e),
            _ => return,
        };
        let Some(kind) = kind_of(e.event_type as u32) else {
            return;
        };
        let live = st.live.lock();
        if live.get(&e.element) != Some(&kind) {
            return;
        }
        // SAFETY: the address is live (in the map, which destroy leaves
        // before freeing) and of this kind.
        let d = unsafe {
            match kind {
                Kind::Cq => &(*(e.element as *const RxuCq)).delivered,
                Kind::Qp => &(*(e.element as *const RxuQp)).delivered,
                Kind::Srq => &(*(e.element as *const RxuSrq)).delivered,
            }
        };
        d.async_.fetch_add(1, Ordering::Relaxed);
    })
}

pub unsafe extern "C" fn cq_event(cq: *mut IbvCq) {
    guard::void_op("cq_event", || {
        // SAFETY: the library read this pointer from our channel socket;
        // records of destroyed CQs are purged at destroy, so it is live.
        let cq = unsafe { &*(cq as *const RxuCq) };
        cq.delivered.comp.fetch_add(1, Ordering::Relaxed);
    })
}
