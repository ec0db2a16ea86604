//! The poll state of an extended CQ: the completion the application reads
//! between `ibv_start_poll` and `ibv_end_poll` (callbacks in
//! `crate::ops::cq_ex`).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use rxu_client::Wc;

/// The completion between `start_poll` and `end_poll`. `busy` is held from
/// a successful `start_poll` to `end_poll`, so one poller at a time sees it.
#[derive(Default)]
pub struct PollState {
    busy: AtomicBool,
    pub cur: UnsafeCell<Wc>,
}

impl PollState {
    pub fn lock(&self) {
        let mut spins = 0u32;
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
    pub fn unlock(&self) {
        self.busy.store(false, Ordering::Release);
    }
}
