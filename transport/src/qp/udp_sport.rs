//! UDP source port of a connection: the flow-entropy convention the kernel
//! gives every RoCEv2 driver (`rdma_get_udp_sport`), so that both ends of a
//! connection, and mlx5 and rxe peers, agree on the flow.

/// Flow label derived from the two QP numbers; symmetric in its arguments.
pub fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// Folds a 20-bit flow label into the port range 0xC000..=0xFFFF.
pub fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let low = fl & 0x3FFF;
    let high = (fl & 0xF_C000) >> 14;
    (0xC000 | (low ^ high)) as u16
}

/// The GRH flow label when it is non-zero, else the QPN-derived one.
pub fn udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = match flow_label & 0xF_FFFF {
        0 => calc_flow_label(lqpn, rqpn),
        fl => fl,
    };
    flow_label_to_udp_sport(fl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        // v = 0x11 * 0x12 = 0x132, small enough that the folds change nothing.
        assert_eq!(calc_flow_label(0x11, 0x12), 0x132);
        assert_eq!(flow_label_to_udp_sport(0x132), 0xC132);
        // High bits fold onto the low ones.
        assert_eq!(flow_label_to_udp_sport(0xF_C000), 0xC03F);
        assert_eq!(flow_label_to_udp_sport(0x4001), 0xC000);
        // A non-zero flow label wins over the QPNs.
        assert_eq!(udp_sport(0x132, 1, 2), 0xC132);
        assert_eq!(udp_sport(0, 0x11, 0x12), 0xC132);
        // Large QPNs exercise both folds.
        let v: u64 = 0xFF_FFFF * 0xFF_FFFE;
        let v = v ^ (v >> 20);
        let v = v ^ (v >> 40);
        assert_eq!(calc_flow_label(0xFF_FFFF, 0xFF_FFFE), (v & 0xF_FFFF) as u32);
    }

    proptest! {
        #[test]
        fn symmetric_and_in_range(a in 0u32..1 << 24, b in 0u32..1 << 24, fl in any::<u32>()) {
            prop_assert_eq!(udp_sport(0, a, b), udp_sport(0, b, a));
            prop_assert!(udp_sport(fl, a, b) >= 0xC000);
        }
    }
}
