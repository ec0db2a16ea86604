//! The 40-byte network header area at the start of every UD receive
//! buffer. RoCEv2 puts the packet's IP header there, as it was on the
//! wire: IPv6 fills all 40 bytes; IPv4 goes into the last 20 and the first
//! 20 are zero (rxe's `execute()` writes exactly this). A UDP socket does
//! not show the header, so it is rebuilt from what the socket and the ICRC
//! check told: addresses, TOS / traffic class, TTL / hop limit, the IPv4
//! ID the ICRC was computed with, the IPv6 flow label. Its bytes are
//! written by `wire::ip`, the one encoder of IP headers. The same header
//! decides what the completion reports as the packet's network header.

use super::queue_pair::RxMeta;
use crate::verbs::NetworkHdr;
use crate::wire::ip::{grh_area, IpHeader, Ipv4Header, Ipv6Header};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use crate::wire::ip::GRH_LEN;

/// The IP header of a received packet whose UDP payload (BTH through
/// ICRC) was `udp_payload` bytes.
pub fn ip_header(meta: &RxMeta, udp_payload: usize) -> IpHeader {
    match (v4_of(meta.src), v4_of(meta.dst)) {
        (Some(src), Some(dst)) => {
            let mut h = Ipv4Header::roce(src, dst, udp_payload, meta.tos, meta.ttl);
            h.id = meta.ip_id;
            IpHeader::V4(h)
        }
        _ => {
            let mut h = Ipv6Header::roce(
                v6_of(meta.src),
                v6_of(meta.dst),
                udp_payload,
                meta.tos,
                meta.ttl,
            );
            h.flow_label = meta.flow_label & 0xF_FFFF;
            IpHeader::V6(h)
        }
    }
}

/// The GRH area for a packet with that IP header.
pub fn area(ip: &IpHeader) -> [u8; GRH_LEN] {
    grh_area(ip)
}

/// The network header the completion reports for it.
pub fn network_hdr(ip: &IpHeader) -> NetworkHdr {
    match ip {
        IpHeader::V4(_) => NetworkHdr::Ipv4,
        IpHeader::V6(_) => NetworkHdr::Ipv6,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ip::ipv4_checksum;

    fn build(meta: &RxMeta, udp_payload: usize) -> [u8; GRH_LEN] {
        area(&ip_header(meta, udp_payload))
    }

    fn meta(src: IpAddr, dst: IpAddr) -> RxMeta {
        RxMeta {
            src,
            src_port: 0xC000,
            dst,
            tos: 0x02,
            ttl: 64,
            ip_id: 0x1234,
            flow_label: 0xF_ABCDE,
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
        assert_eq!(&h[4..8], &[0x12, 0x34, 0x40, 0], "the ID, DF");
        assert_eq!((h[8], h[9]), (64, 17));
        assert_eq!(&h[12..16], &[10, 0, 0, 1]);
        assert_eq!(&h[16..20], &[10, 0, 0, 2]);
        // A header with its checksum in place sums to 0xFFFF.
        assert_eq!(ipv4_checksum(h), 0);
    }

    #[test]
    fn ipv4_mapped_counts_as_ipv4() {
        let m = meta(
            "::ffff:10.0.0.1".parse().unwrap(),
            "::ffff:10.0.0.2".parse().unwrap(),
        );
        assert_eq!(build(&m, 100)[20], 0x45);
        assert_eq!(network_hdr(&ip_header(&m, 100)), NetworkHdr::Ipv4);
    }

    #[test]
    fn ipv6_fills_40_bytes() {
        let m = meta("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap());
        let g = build(&m, 100);
        // Version 6, traffic class 0x02, the low 20 bits of the flow label.
        assert_eq!(&g[..4], &[0x60, 0x2A, 0xBC, 0xDE]);
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 108);
        assert_eq!((g[6], g[7]), (17, 64));
        assert_eq!(g[8], 0xfe);
        assert_eq!(g[39], 2);
        assert_eq!(network_hdr(&ip_header(&m, 100)), NetworkHdr::Ipv6);
    }
}
