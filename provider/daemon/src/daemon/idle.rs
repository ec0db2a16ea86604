//! Whether a QP's or SRQ's rings are parked (`ready.rs`), kept in the
//! session's objects: its own file so the session need not know the
//! ready sets.

use std::time::{Duration, Instant};

/// How long a ring stays watched after it last had work.
pub const PARK_AFTER: Duration = Duration::from_millis(50);

/// Whether one ring is parked, and since when its owner last had work.
#[derive(Clone, Copy, Debug)]
pub struct Idle {
    pub sq: bool,
    pub rq: bool,
    pub busy_at: Instant,
}

impl Idle {
    /// Watched (nothing parked), busy now.
    pub fn new() -> Idle {
        Idle {
            sq: false,
            rq: false,
            busy_at: Instant::now(),
        }
    }

    /// Idle long enough at `now` to be parked.
    pub fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.busy_at) >= PARK_AFTER
    }
}

impl Default for Idle {
    fn default() -> Idle {
        Idle::new()
    }
}
