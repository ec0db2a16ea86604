//! The 40-byte network header area at the start of every UD receive
//! buffer. RoCEv2 puts the packet's IP header there: IPv6 fills all 40
//! bytes; IPv4 goes into the last 20 and the first 20 are zero (as rxe
//! writes them).

use super::queue_pair::RxMeta;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Size of the GRH area.
pub const GRH_LEN: usize = 40;
const UDP_HDR: usize = 8;

/// Rebuilds the IP header of a received packet whose UDP payload (BTH
/// through ICRC) was `udp_payload` bytes.
pub fn build(meta: &RxMeta, udp_payload: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    match (v4_of(meta.src), v4_of(meta.dst)) {
        (Some(src), Some(dst)) => {
            let h = &mut g[20..];
            let total = (20 + UDP_HDR + udp_payload).min(usize::from(u16::MAX)) as u16;
            h[0] = 0x45;
            h[1] = meta.tos;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            // Identification 0, flags DF.
            h[6] = 0x40;
            h[8] = meta.ttl;
            h[9] = 17;
            h[12..16].copy_from_slice(&src.octets());
            h[16..20].copy_from_slice(&dst.octets());
            let sum = checksum(h);
            h[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        _ => {
            let len = (UDP_HDR + udp_payload).min(usize::from(u16::MAX)) as u16;
            g[0] = 0x60 | (meta.tos >> 4);
            g[1] = meta.tos << 4;
            g[4..6].copy_from_slice(&len.to_be_bytes());
            g[6] = 17;
            g[7] = meta.ttl;
            g[8..24].copy_from_slice(&v6_of(meta.src).octets());
            g[24..40].copy_from_slice(&v6_of(meta.dst).octets());
        }
    }
    g
}

fn v4_of(a: IpAddr) -> Option<Ipv4Addr> {
    match a {
        IpAddr::V4(v) => Some(v),
        IpAddr::V6(v) => v.to_ipv4_mapped(),
    }
}

fn v6_of(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped(),
        IpAddr::V6(v) => v,
    }
}

/// Internet checksum of an IPv4 header whose checksum field is zero.
fn checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(src: IpAddr, dst: IpAddr) -> RxMeta {
        RxMeta {
            src,
            src_port: 0xC000,
            dst,
            tos: 0x02,
            ttl: 64,
        }
    }

    #[test]
    fn ipv4_in_last_20_bytes() {
        let m = meta("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let g = build(&m, 12 + 8 + 4);
        assert_eq!(&g[..20], &[0u8; 20]);
        let h = &g[20..];
        assert_eq!(h[0], 0x45);
        assert_eq!(h[1], 0x02);
        assert_eq!(u16::from_be_bytes([h[2], h[3]]), 20 + 8 + 24);
        assert_eq!(&h[4..8], &[0, 0, 0x40, 0]);
        assert_eq!((h[8], h[9]), (64, 17));
        assert_eq!(&h[12..16], &[10, 0, 0, 1]);
        assert_eq!(&h[16..20], &[10, 0, 0, 2]);
        // A header with its checksum in place sums to 0xFFFF.
        assert_eq!(checksum(h), 0);
    }

    #[test]
    fn ipv4_mapped_counts_as_ipv4() {
        let m = meta(
            "::ffff:10.0.0.1".parse().unwrap(),
            "::ffff:10.0.0.2".parse().unwrap(),
        );
        assert_eq!(build(&m, 100)[20], 0x45);
    }

    #[test]
    fn ipv6_fills_40_bytes() {
        let m = meta("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap());
        let g = build(&m, 100);
        assert_eq!(g[0], 0x60);
        assert_eq!(g[1], 0x20);
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 108);
        assert_eq!((g[6], g[7]), (17, 64));
        assert_eq!(g[8], 0xfe);
        assert_eq!(g[39], 2);
    }
}
