//! The device's clocks, for completion timestamps: the daemon stamps
//! completions with them, clients read them (`ibv_query_rt_values_ex`) and
//! report their rate. rxu's "HCA clock" is
//! CLOCK_MONOTONIC in nanoseconds: every process on the host reads the same
//! clock (so `ibv_query_rt_values_ex` in a client and a stamp taken here
//! compare directly), it never jumps with time-of-day changes, as a free-
//! running device counter does not, and nanoseconds make its frequency
//! exactly 1 GHz (`hca_core_clock` = 1,000,000 kHz). The wall clock is
//! CLOCK_REALTIME, stamped at the same moment.

/// `hca_core_clock` of `ibv_query_device_ex`, in kHz: one tick a ns.
pub const HCA_CLOCK_KHZ: u64 = 1_000_000;

/// The HCA clock now, in ns (ticks).
pub fn hca_clock_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds of `clock` now (0 if the clock cannot be read, which
/// Linux's monotonic and real-time clocks never fail).
fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec on our stack; clock_gettime writes it.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// The two completion timestamps of an entry made now: (HCA clock,
/// wall clock), both in ns.
pub fn completion_stamps() -> (u64, u64) {
    (hca_clock_ns(), now_ns(libc::CLOCK_REALTIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_advance_and_match_the_clocks() {
        let (m0, w0) = completion_stamps();
        let s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let (m1, w1) = completion_stamps();
        assert!(m0 > 0 && m1 >= m0, "monotonic: {m0} then {m1}");
        // The wall clock is the system's time of day (within a second).
        assert!(w0.abs_diff(s) < 1_000_000_000 && w1 >= w0);
    }
}
