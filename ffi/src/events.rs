//! Event bookkeeping (docs/libibverbs-contract.md §2.4, §2.5): the `cq_event` and
//! `async_event` hooks (`crate::ops::events`) count what the application
//! received per object, and destroy waits until the application
//! acknowledged as many, so the library never dereferences a freed
//! CQ/QP/SRQ for an event it handed out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cq,
    Qp,
    Srq,
}

/// The objects of a context that events may name, by address. An event for
/// an address not here (destroyed meanwhile) is passed on but not counted.
#[derive(Default)]
pub struct Live(Mutex<HashMap<usize, Kind>>);

impl Live {
    pub fn lock(&self) -> MutexGuard<'_, HashMap<usize, Kind>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub fn add(&self, addr: usize, kind: Kind) {
        self.lock().insert(addr, kind);
    }
    /// After this returns no hook counts events for `addr` any more.
    pub fn remove(&self, addr: usize) {
        self.lock().remove(&addr);
    }
}

/// Events handed to the application for one object.
#[derive(Default)]
pub struct Delivered {
    pub comp: AtomicU32,
    pub async_: AtomicU32,
}

/// Blocks until `done()` holds, re-checking whenever the library signals
/// `cond` (ibv_ack_cq_events / ibv_ack_async_event do, under `mutex`). As
/// with the kernel, this waits for as long as the application takes; after
/// a few seconds it says in the log (warning level) what it waits for.
///
/// # Safety
/// `mutex` and `cond` must be the initialised pthread objects of a live
/// verbs object (default attributes: CLOCK_REALTIME), and `done` must read
/// only fields guarded by `mutex`.
pub unsafe fn wait_acked(
    what: &str,
    mutex: *mut libc::pthread_mutex_t,
    cond: *mut libc::pthread_cond_t,
    done: impl Fn() -> bool,
) {
    let mut warned = false;
    // SAFETY: mutex and cond are initialised and live (the contract);
    // clock_gettime fills a local timespec, all-zero being a valid one.
    unsafe {
        libc::pthread_mutex_lock(mutex);
        while !done() {
            let mut ts: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts);
            ts.tv_sec += 5;
            if libc::pthread_cond_timedwait(cond, mutex, &ts) == libc::ETIMEDOUT && !warned {
                warned = true;
                crate::log_warn!(
                    "{what}: waiting for the application to acknowledge the events it got \
                     (ibv_ack_cq_events / ibv_ack_async_event)"
                );
            }
        }
        libc::pthread_mutex_unlock(mutex);
    }
}

/// Initialises the mutex and condition variable of a verbs object (the
/// library does it for CQs and for SRQs made by `ibv_create_srq`; QPs and
/// `_ex` SRQs are ours to set up).
///
/// # Safety
/// Both must be unused memory of the right type.
pub unsafe fn init_sync(mutex: *mut libc::pthread_mutex_t, cond: *mut libc::pthread_cond_t) {
    // SAFETY: both point to unused memory of their type (the contract);
    // NULL asks for default attributes.
    unsafe {
        libc::pthread_mutex_init(mutex, std::ptr::null());
        libc::pthread_cond_init(cond, std::ptr::null());
    }
}

pub fn load(a: &AtomicU32) -> u32 {
    a.load(Ordering::Relaxed)
}
