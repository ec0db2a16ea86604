//! Which network header a RoCEv2 packet arrived in, and how a UD receive
//! completion tells it to a verbs application.
//!
//! The RoCEv2 annex (A17.4.5.1) puts it in the UD completion: the remote
//! address comprises a flag saying whether the frame was IPv4 or IPv6.
//! The kernel keeps it in `ib_wc.network_hdr_type` (rxe fills that for
//! kernel consumers); `struct ibv_wc` has no such field, and ConnectX
//! reports it in the 4-bit `sl` instead: bit 3 set for a frame with a UDP
//! header (RoCEv2), bits 0..3 the L3 header, 1 for IPv6 and 2 for IPv4.
//! UCX reads it there (`uct_ud_iface_check_grh`, 1.11 through 1.18; 1.19
//! looks at the GRH bytes of non-Mellanox devices instead) to know where
//! the destination address sits in the 40-byte GRH area: with rxe's `sl`
//! of 0 it takes an IPv4 packet for a RoCEv1 one, finds no GID of its own
//! in bytes 24..40 and drops every UD packet.

/// The L3 header of a received RoCEv2 packet (the kernel's
/// `enum rdma_network_type`, its RoCEv2 values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetworkHdr {
    Ipv4,
    Ipv6,
}

/// `sl` bit 3: the frame carried a UDP header.
const SL_UDP: u8 = 0x8;
/// `sl` bits 0..3, the L3 header type.
const SL_L3_IPV6: u8 = 0x1;
const SL_L3_IPV4: u8 = 0x2;

impl NetworkHdr {
    /// The `ibv_wc.sl` of a UD receive completion that came in this
    /// header, as ConnectX reports it.
    pub const fn wc_sl(self) -> u8 {
        match self {
            NetworkHdr::Ipv4 => SL_UDP | SL_L3_IPV4,
            NetworkHdr::Ipv6 => SL_UDP | SL_L3_IPV6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What UCX 1.13 computes from `sl`: the low 3 bits equal to 2 mean
    /// IPv4 (the address is the last 4 bytes of the GRH area), anything
    /// else 16 bytes of GID.
    fn ucx_gid_len(sl: u8) -> usize {
        if sl & 0x7 == 0x2 {
            4
        } else {
            16
        }
    }

    #[test]
    fn sl_says_ipv4_or_ipv6_over_udp() {
        assert_eq!(NetworkHdr::Ipv4.wc_sl(), 0xA);
        assert_eq!(NetworkHdr::Ipv6.wc_sl(), 0x9);
        assert_eq!(ucx_gid_len(NetworkHdr::Ipv4.wc_sl()), 4);
        assert_eq!(ucx_gid_len(NetworkHdr::Ipv6.wc_sl()), 16);
        // rxe's 0 reads as RoCEv1 (a GRH): 16 bytes, wrong for IPv4.
        assert_eq!(ucx_gid_len(0), 16);
        // Both fit the 4-bit SL.
        assert!(NetworkHdr::Ipv4.wc_sl() < 16 && NetworkHdr::Ipv6.wc_sl() < 16);
    }
}
