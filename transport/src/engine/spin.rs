//! When an idle polling loop stops spinning and sleeps.
//!
//! The loop spins for a budget before it sleeps; the budget doubles when
//! work turned up while spinning (spinning paid) and halves when the loop
//! had to sleep anyway, within `[min, max]`. On a machine whose cores are
//! shared with the peer the loop waits for, a long fixed spin only takes
//! the CPU from that peer. The daemon's loop and the convenience loop
//! ([`super::Engine::run_once`]) each own one.

use std::time::{Duration, Instant};

/// An adaptive spin budget. See the module documentation.
#[derive(Clone, Debug)]
pub struct Spin {
    min: Duration,
    max: Duration,
    cur: Duration,
    /// Since when the loop has found nothing to do.
    idle_since: Option<Instant>,
}

impl Spin {
    /// A budget within `[min, max]` starting at `start` (clamped).
    pub fn new(min: Duration, max: Duration, start: Duration) -> Spin {
        let min = min.min(max);
        Spin {
            min,
            max,
            cur: start.clamp(min, max),
            idle_since: None,
        }
    }

    /// The current budget.
    pub fn budget(&self) -> Duration {
        self.cur
    }

    /// The loop did work: if it had been spinning, spin longer next time.
    pub fn busy(&mut self) {
        if self.idle_since.take().is_some() {
            self.cur = (self.cur * 2).min(self.max);
        }
    }

    /// The loop found nothing to do at `now`: true while it should keep
    /// spinning, false once the budget is spent (then it may sleep).
    pub fn keep_spinning(&mut self, now: Instant) -> bool {
        let since = *self.idle_since.get_or_insert(now);
        now.saturating_duration_since(since) < self.cur
    }

    /// The loop goes to sleep: it spun for nothing, spin less next time.
    pub fn sleeping(&mut self) {
        self.idle_since = None;
        self.cur = (self.cur / 2).max(self.min);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_after_a_useful_spin_and_halves_after_a_sleep() {
        let us = Duration::from_micros;
        let mut s = Spin::new(us(2), us(64), us(20));
        let t0 = Instant::now();
        assert!(s.keep_spinning(t0));
        assert!(s.keep_spinning(t0 + us(19)));
        assert!(!s.keep_spinning(t0 + us(20)));
        s.sleeping();
        assert_eq!(s.budget(), us(10));
        // Work without a spin before it changes nothing.
        s.busy();
        assert_eq!(s.budget(), us(10));
        assert!(s.keep_spinning(t0));
        s.busy();
        assert_eq!(s.budget(), us(20));
        for _ in 0..10 {
            assert!(s.keep_spinning(t0));
            s.busy();
        }
        assert_eq!(s.budget(), us(64));
        for _ in 0..10 {
            s.sleeping();
        }
        assert_eq!(s.budget(), us(2));
        // A zero maximum never spins.
        let mut z = Spin::new(us(1), Duration::ZERO, us(50));
        assert!(!z.keep_spinning(t0));
    }
}
