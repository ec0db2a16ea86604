//! The CM's time arithmetic (IBA times are 4.096 µs · 2^t) and the
//! constants rdma_cm uses on RoCE.

use std::time::Duration;

/// `CMA_CM_MRA_SETTING` without the delay flag: the service timeout an MRA
/// carries when a duplicate REQ/REP arrives before the application answers.
pub(crate) const MRA_SERVICE_TIMEOUT: u8 = 24;
/// Hop limit of a RoCEv2 route (`cma_resolve_iboe_route`).
pub(crate) const ROUTE_HOP_LIMIT: u8 = 64;
/// IB rate enum reported for the path (10 Gb/s).
pub(crate) const ROUTE_RATE: u8 = 3;

/// The largest IBA time exponent taken from a peer's MAD (REQ response
/// timeout and ack timeout, REP ack delay, MRA service timeout): 24, about
/// 69 s, the largest the kernel itself sends (`CMA_CM_MRA_SETTING`). Up
/// to 31 (2.4 hours) is legal on the wire, and the peer would then pin
/// our connection (and, through the ack timeout, our QP) for hours per
/// retry; our own settings are not capped.
pub(crate) const REMOTE_TIME_CAP: u8 = 24;

/// A time exponent a peer chose, capped at [`REMOTE_TIME_CAP`].
pub(crate) fn peer_time(t: u8) -> u8 {
    t.min(REMOTE_TIME_CAP)
}

/// `cm_convert_to_ms`: 2^(t-8) ms, at least 1 ms.
pub(crate) fn conv_ms(t: u8) -> u64 {
    1u64 << (t.min(31) as u32).saturating_sub(8)
}

pub(crate) fn conv(t: u8) -> Duration {
    Duration::from_millis(conv_ms(t))
}

/// `cm_ack_timeout`: the QP's local ACK timeout for an ack delay and a
/// packet life time (max of both, rounded up when the other is close).
pub(crate) fn ack_timeout(ack_delay: u8, packet_life_time: u8) -> u8 {
    let life = packet_life_time as i32 + 1;
    let delay = ack_delay as i32;
    let t = if life >= delay {
        life + i32::from(delay >= life - 1)
    } else {
        delay + i32::from(life >= delay - 1)
    };
    t.min(31) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_values() {
        assert_eq!(conv_ms(18), 1024);
        assert_eq!(conv_ms(20), 4096);
        assert_eq!(conv_ms(3), 1);
        assert_eq!(2 * conv_ms(18) + conv_ms(20), 6144);
        // rxe: ack delay 15, life time 18 -> 19 (§2.8).
        assert_eq!(ack_timeout(15, 18), 19);
        assert_eq!(ack_timeout(18, 18), 20);
        assert_eq!(ack_timeout(20, 10), 20);
        assert_eq!(ack_timeout(20, 19), 21);
        assert_eq!(ack_timeout(31, 31), 31);
    }
}
