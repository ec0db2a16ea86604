//! Registration latencies: a bounded uniform sample (reservoir sampling,
//! Vitter's algorithm R), so percentiles cover the daemon's whole life in
//! fixed memory.

use std::time::Duration;

/// Samples kept.
pub(crate) const CAPACITY: usize = 1024;

#[derive(Debug)]
pub(crate) struct Reservoir {
    /// Nanoseconds.
    samples: Vec<u64>,
    seen: u64,
    rng: u64,
}

impl Default for Reservoir {
    fn default() -> Self {
        Reservoir {
            samples: Vec::new(),
            seen: 0,
            // Sampling needs uniformity, not secrecy: a fixed seed will do.
            rng: 0x853c_49e6_748f_ea9b,
        }
    }
}

impl Reservoir {
    pub(crate) fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.seen = self.seen.saturating_add(1);
        if self.samples.len() < CAPACITY {
            self.samples.push(ns);
            return;
        }
        // Keep the new sample with probability CAPACITY / seen.
        let j = self.next_rand() % self.seen;
        if let Some(slot) = usize::try_from(j)
            .ok()
            .and_then(|j| self.samples.get_mut(j))
        {
            *slot = ns;
        }
    }

    /// Number of latencies recorded (not only those kept).
    #[cfg(test)]
    pub(crate) fn seen(&self) -> u64 {
        self.seen
    }

    /// The `q`-quantile (0.0..=1.0, nearest rank) of the kept samples.
    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        if self.samples.is_empty() {
            return None;
        }
        let mut v = self.samples.clone();
        v.sort_unstable();
        let q = q.clamp(0.0, 1.0);
        let rank = (q * v.len() as f64).ceil() as usize;
        let i = rank.saturating_sub(1).min(v.len() - 1);
        Some(Duration::from_nanos(v[i]))
    }

    /// splitmix64.
    fn next_rand(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_small_sample() {
        let mut r = Reservoir::default();
        assert_eq!(r.quantile(0.5), None);
        for us in 1..=100u64 {
            r.record(Duration::from_micros(us));
        }
        assert_eq!(r.seen(), 100);
        assert_eq!(r.quantile(0.5), Some(Duration::from_micros(50)));
        assert_eq!(r.quantile(0.99), Some(Duration::from_micros(99)));
        assert_eq!(r.quantile(1.0), Some(Duration::from_micros(100)));
        assert_eq!(r.quantile(0.0), Some(Duration::from_micros(1)));
    }

    #[test]
    fn bounded_and_roughly_uniform() {
        let mut r = Reservoir::default();
        let n = 100 * CAPACITY as u64;
        for i in 0..n {
            r.record(Duration::from_nanos(i));
        }
        assert_eq!(r.samples.len(), CAPACITY);
        assert_eq!(r.seen(), n);
        // The median of a uniform sample of 0..n lies near n/2.
        let p50 = r.quantile(0.5).unwrap().as_nanos() as f64;
        assert!((p50 / n as f64 - 0.5).abs() < 0.1, "p50 {p50} of {n}");
    }
}
