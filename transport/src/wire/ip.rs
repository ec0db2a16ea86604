//! Minimal IPv4/IPv6/UDP header views for the ICRC, for `rxu decode` and for
//! the GRH area of UD receive buffers.
//!
//! Only what RoCEv2 needs: IPv4 without options, IPv6 without extension
//! headers (rxe and ConnectX send neither, and rxe's ICRC covers exactly 20 or
//! 40 bytes of IP header), UDP. Parsing never panics.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{be16, be32, need, WireError, ROCE_V2_PORT};

/// IPv4 header length (no options).
pub const IPV4_HDR_LEN: usize = 20;
/// IPv6 header length (no extension headers).
pub const IPV6_HDR_LEN: usize = 40;
/// UDP header length.
pub const UDP_HDR_LEN: usize = 8;
/// Bytes reserved at the start of every UD receive buffer for the network
/// header (IBA Annex A17.4.5.2, docs/rocev2-wire.md §3.8).
pub const GRH_LEN: usize = 40;
/// IP protocol / IPv6 next-header number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IPv4 flags+fragment-offset word with only Don't Fragment set.
pub const IPV4_DF: u16 = 0x4000;

/// An IPv4 header without options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Header {
    /// DSCP (6 bits) and ECN (2 bits).
    pub tos: u8,
    /// Whole IP packet length, header included.
    pub total_len: u16,
    pub id: u16,
    /// Flags (3 bits) and fragment offset (13 bits); RoCEv2 sends DF only.
    pub flags_frag: u16,
    pub ttl: u8,
    pub protocol: u8,
    /// Header checksum as found (parse) or ignored and recomputed (emit).
    pub checksum: u16,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
}

impl Ipv4Header {
    /// Header for a RoCEv2 packet whose UDP payload is `udp_payload_len`
    /// bytes (BTH .. ICRC): DF set, protocol UDP.
    pub fn roce(src: Ipv4Addr, dst: Ipv4Addr, udp_payload_len: usize, tos: u8, ttl: u8) -> Self {
        Ipv4Header {
            tos,
            total_len: (IPV4_HDR_LEN + UDP_HDR_LEN + udp_payload_len) as u16,
            id: 0,
            flags_frag: IPV4_DF,
            ttl,
            protocol: IPPROTO_UDP,
            checksum: 0,
            src,
            dst,
        }
    }

    /// Parses the first 20 bytes of `buf`. Rejects other versions and
    /// headers with options.
    pub fn parse(buf: &[u8]) -> Result<Ipv4Header, WireError> {
        need(buf, IPV4_HDR_LEN)?;
        if buf[0] >> 4 != 4 {
            return Err(WireError::NotRoce("IP version is not 4"));
        }
        if buf[0] & 0x0f != 5 {
            return Err(WireError::NotRoce("IPv4 header has options or a bad IHL"));
        }
        Ok(Ipv4Header {
            tos: buf[1],
            total_len: be16(buf, 2),
            id: be16(buf, 4),
            flags_frag: be16(buf, 6),
            ttl: buf[8],
            protocol: buf[9],
            checksum: be16(buf, 10),
            src: Ipv4Addr::from(be32(buf, 12)),
            dst: Ipv4Addr::from(be32(buf, 16)),
        })
    }

    /// Writes the 20-byte header with a freshly computed checksum.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let out = room(buf, IPV4_HDR_LEN)?;
        out[0] = 0x45;
        out[1] = self.tos;
        out[2..4].copy_from_slice(&self.total_len.to_be_bytes());
        out[4..6].copy_from_slice(&self.id.to_be_bytes());
        out[6..8].copy_from_slice(&self.flags_frag.to_be_bytes());
        out[8] = self.ttl;
        out[9] = self.protocol;
        out[10..12].fill(0);
        out[12..16].copy_from_slice(&self.src.octets());
        out[16..20].copy_from_slice(&self.dst.octets());
        let sum = ipv4_checksum(out);
        out[10..12].copy_from_slice(&sum.to_be_bytes());
        Ok(())
    }

    /// True when the checksum found by `parse` is right for these fields.
    pub fn checksum_ok(&self) -> bool {
        let mut b = [0u8; IPV4_HDR_LEN];
        let stored = self.checksum;
        // emit cannot fail on a 20-byte buffer.
        if self.emit(&mut b).is_err() {
            return false;
        }
        be16(&b, 10) == stored
    }
}

/// The first `n` bytes of `buf`, or `BufferTooSmall`.
fn room(buf: &mut [u8], n: usize) -> Result<&mut [u8], WireError> {
    let have = buf.len();
    buf.get_mut(..n)
        .ok_or(WireError::BufferTooSmall { need: n, have })
}

/// Internet checksum of an IPv4 header whose checksum field is zero.
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for w in hdr.chunks(2) {
        let hi = u32::from(w[0]) << 8;
        let lo = w.get(1).copied().map_or(0, u32::from);
        sum += hi | lo;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv6 header without extension headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Header {
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Bytes after the 40-byte header.
    pub payload_len: u16,
    pub next_header: u8,
    pub hop_limit: u8,
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
}

impl Ipv6Header {
    /// Header for a RoCEv2 packet whose UDP payload is `udp_payload_len`
    /// bytes (BTH .. ICRC).
    pub fn roce(
        src: Ipv6Addr,
        dst: Ipv6Addr,
        udp_payload_len: usize,
        traffic_class: u8,
        hop_limit: u8,
    ) -> Self {
        Ipv6Header {
            traffic_class,
            flow_label: 0,
            payload_len: (UDP_HDR_LEN + udp_payload_len) as u16,
            next_header: IPPROTO_UDP,
            hop_limit,
            src,
            dst,
        }
    }

    /// Parses the first 40 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Ipv6Header, WireError> {
        need(buf, IPV6_HDR_LEN)?;
        let w0 = be32(buf, 0);
        if w0 >> 28 != 6 {
            return Err(WireError::NotRoce("IP version is not 6"));
        }
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&buf[8..24]);
        dst.copy_from_slice(&buf[24..40]);
        Ok(Ipv6Header {
            traffic_class: (w0 >> 20) as u8,
            flow_label: w0 & 0xf_ffff,
            payload_len: be16(buf, 4),
            next_header: buf[6],
            hop_limit: buf[7],
            src: Ipv6Addr::from(src),
            dst: Ipv6Addr::from(dst),
        })
    }

    /// Writes the 40-byte header.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let out = room(buf, IPV6_HDR_LEN)?;
        let w0 =
            (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0xf_ffff);
        out[0..4].copy_from_slice(&w0.to_be_bytes());
        out[4..6].copy_from_slice(&self.payload_len.to_be_bytes());
        out[6] = self.next_header;
        out[7] = self.hop_limit;
        out[8..24].copy_from_slice(&self.src.octets());
        out[24..40].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

/// A UDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UdpHeader {
    pub src_port: u16,
    pub dst_port: u16,
    /// UDP header + payload.
    pub len: u16,
    /// RoCEv2 senders put 0 here, also over IPv6.
    pub checksum: u16,
}

impl UdpHeader {
    /// Parses the first 8 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<UdpHeader, WireError> {
        need(buf, UDP_HDR_LEN)?;
        Ok(UdpHeader {
            src_port: be16(buf, 0),
            dst_port: be16(buf, 2),
            len: be16(buf, 4),
            checksum: be16(buf, 6),
        })
    }

    /// Writes the 8-byte header as given (no checksum computation).
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let out = room(buf, UDP_HDR_LEN)?;
        out[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        out[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        out[4..6].copy_from_slice(&self.len.to_be_bytes());
        out[6..8].copy_from_slice(&self.checksum.to_be_bytes());
        Ok(())
    }
}

/// Either IP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpHeader {
    V4(Ipv4Header),
    V6(Ipv6Header),
}

impl IpHeader {
    /// Parses an IPv4 or IPv6 header, chosen by the version nibble.
    pub fn parse(buf: &[u8]) -> Result<IpHeader, WireError> {
        need(buf, 1)?;
        match buf[0] >> 4 {
            4 => Ipv4Header::parse(buf).map(IpHeader::V4),
            6 => Ipv6Header::parse(buf).map(IpHeader::V6),
            _ => Err(WireError::NotRoce("IP version is neither 4 nor 6")),
        }
    }

    /// Header length on the wire (20 or 40).
    pub const fn len(&self) -> usize {
        match self {
            IpHeader::V4(_) => IPV4_HDR_LEN,
            IpHeader::V6(_) => IPV6_HDR_LEN,
        }
    }

    /// Always false; a header has a length.
    pub const fn is_empty(&self) -> bool {
        false
    }

    pub fn src(&self) -> IpAddr {
        match self {
            IpHeader::V4(h) => IpAddr::V4(h.src),
            IpHeader::V6(h) => IpAddr::V6(h.src),
        }
    }

    pub fn dst(&self) -> IpAddr {
        match self {
            IpHeader::V4(h) => IpAddr::V4(h.dst),
            IpHeader::V6(h) => IpAddr::V6(h.dst),
        }
    }

    /// Protocol (IPv4) or next header (IPv6).
    pub fn protocol(&self) -> u8 {
        match self {
            IpHeader::V4(h) => h.protocol,
            IpHeader::V6(h) => h.next_header,
        }
    }

    /// Bytes after the IP header that belong to this packet, by its length
    /// field; `None` if an IPv4 total length is shorter than the header.
    pub fn payload_len(&self) -> Option<usize> {
        match self {
            IpHeader::V4(h) => usize::from(h.total_len).checked_sub(IPV4_HDR_LEN),
            IpHeader::V6(h) => Some(usize::from(h.payload_len)),
        }
    }

    /// Writes the header (IPv4 with a fresh checksum).
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        match self {
            IpHeader::V4(h) => h.emit(buf),
            IpHeader::V6(h) => h.emit(buf),
        }
    }

    /// Fills the 40-byte GRH area at the start of a UD receive buffer the
    /// way rxe does: an IPv6 header fills all 40 bytes; an IPv4 header goes
    /// into bytes 20..40 and bytes 0..20 are zeroed.
    pub fn write_grh(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let area = room(buf, GRH_LEN)?;
        match self {
            IpHeader::V4(h) => {
                area[..GRH_LEN - IPV4_HDR_LEN].fill(0);
                h.emit(&mut area[GRH_LEN - IPV4_HDR_LEN..])
            }
            IpHeader::V6(h) => h.emit(area),
        }
    }
}

/// The 40-byte GRH area for a UD receive buffer (see
/// [`IpHeader::write_grh`]).
pub fn grh_area(ip: &IpHeader) -> [u8; GRH_LEN] {
    let mut a = [0u8; GRH_LEN];
    // Cannot fail: the array is exactly GRH_LEN long.
    let _ = ip.write_grh(&mut a);
    a
}

/// An IP packet carrying UDP, split into its parts. Bytes after the IP
/// length (Ethernet padding, an FCS) are not part of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpUdp<'a> {
    pub ip: IpHeader,
    pub udp: UdpHeader,
    /// The IP header bytes as on the wire (20 or 40).
    pub ip_bytes: &'a [u8],
    /// The UDP header bytes as on the wire (8).
    pub udp_bytes: &'a [u8],
    /// The UDP payload, by the UDP length field. For RoCEv2: BTH .. ICRC.
    pub payload: &'a [u8],
}

impl<'a> IpUdp<'a> {
    /// Parses an IPv4 or IPv6 packet that carries UDP (any port). Checks
    /// that the IP and UDP lengths fit the captured bytes and each other.
    pub fn parse(buf: &'a [u8]) -> Result<IpUdp<'a>, WireError> {
        let ip = IpHeader::parse(buf)?;
        if ip.protocol() != IPPROTO_UDP {
            return Err(WireError::NotRoce("IP payload is not UDP"));
        }
        let hl = ip.len();
        let ip_payload = ip
            .payload_len()
            .ok_or(WireError::NotRoce("IPv4 total length shorter than header"))?;
        need(buf, hl + ip_payload)?;
        if ip_payload < UDP_HDR_LEN {
            return Err(WireError::Truncated {
                need: UDP_HDR_LEN,
                have: ip_payload,
            });
        }
        let udp_bytes = &buf[hl..hl + UDP_HDR_LEN];
        let udp = UdpHeader::parse(udp_bytes)?;
        let ulen = usize::from(udp.len);
        if ulen < UDP_HDR_LEN || ulen > ip_payload {
            return Err(WireError::NotRoce("UDP length inconsistent with IP length"));
        }
        Ok(IpUdp {
            ip,
            udp,
            ip_bytes: &buf[..hl],
            udp_bytes,
            payload: &buf[hl + UDP_HDR_LEN..hl + ulen],
        })
    }

    /// True when the UDP destination port is RoCEv2's 4791.
    pub fn is_roce_v2(&self) -> bool {
        self.udp.dst_port == ROCE_V2_PORT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real ConnectX-4 Lx CNP, IP header onwards (rocev2-vectors).
    const CNP_IP: &str = "45c2003c718c4000401191610a0011010a001201000012b7002800008100ffff40000118000000000000000000000000000000000000000082fd002a";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn parses_real_ipv4_and_udp() {
        let b = hex(CNP_IP);
        let p = IpUdp::parse(&b).unwrap();
        let IpHeader::V4(h) = p.ip else {
            panic!("not v4")
        };
        assert_eq!(h.tos, 0xc2);
        assert_eq!(h.total_len, 60);
        assert_eq!(h.id, 0x718c);
        assert_eq!(h.flags_frag, IPV4_DF);
        assert_eq!(h.src, Ipv4Addr::new(10, 0, 17, 1));
        assert!(h.checksum_ok());
        assert_eq!(p.udp.src_port, 0);
        assert!(p.is_roce_v2());
        assert_eq!(p.payload.len(), 32);
        // Emitting the parsed header reproduces the wire bytes.
        let mut out = [0u8; 20];
        h.emit(&mut out).unwrap();
        assert_eq!(&out[..], &b[..20]);
    }

    #[test]
    fn trailing_bytes_are_ignored_and_short_input_rejected() {
        let mut b = hex(CNP_IP);
        b.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]); // e.g. an FCS
        assert_eq!(IpUdp::parse(&b).unwrap().payload.len(), 32);
        for n in 0..60 {
            assert!(IpUdp::parse(&b[..n]).is_err(), "len {n}");
        }
    }

    #[test]
    fn ipv6_round_trip() {
        let h = Ipv6Header {
            traffic_class: 0xe2,
            flow_label: 0x1face,
            payload_len: 44,
            next_header: IPPROTO_UDP,
            hop_limit: 64,
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
        };
        let mut b = [0u8; 40];
        h.emit(&mut b).unwrap();
        assert_eq!(Ipv6Header::parse(&b).unwrap(), h);
        assert_eq!(IpHeader::parse(&b).unwrap(), IpHeader::V6(h));
    }

    #[test]
    fn grh_area_layout() {
        let v4 = IpHeader::V4(Ipv4Header::roce(
            Ipv4Addr::new(192, 168, 1, 1),
            Ipv4Addr::new(192, 168, 1, 2),
            100,
            0,
            64,
        ));
        let a = grh_area(&v4);
        assert_eq!(&a[..20], &[0u8; 20]);
        assert_eq!(a[20], 0x45); // UCX looks for 0x45 at byte 20
        assert_eq!(Ipv4Header::parse(&a[20..]).unwrap().total_len, 128);
        assert!(Ipv4Header::parse(&a[20..]).unwrap().checksum_ok());

        let v6 = IpHeader::V6(Ipv6Header::roce(
            Ipv6Addr::LOCALHOST,
            Ipv6Addr::LOCALHOST,
            100,
            0,
            64,
        ));
        let a = grh_area(&v6);
        assert_eq!(a[0] >> 4, 6);
        assert_eq!(Ipv6Header::parse(&a).unwrap().payload_len, 108);
        assert!(v6.write_grh(&mut [0u8; 39]).is_err());
    }

    #[test]
    fn rejects_non_udp_and_bad_lengths() {
        let mut b = hex(CNP_IP);
        b[9] = 6; // TCP
        assert!(matches!(IpUdp::parse(&b), Err(WireError::NotRoce(_))));
        let mut b = hex(CNP_IP);
        b[0] = 0x46; // options
        assert!(IpUdp::parse(&b).is_err());
        let mut b = hex(CNP_IP);
        b[24..26].copy_from_slice(&100u16.to_be_bytes()); // UDP len > IP
        assert!(IpUdp::parse(&b).is_err());
        let mut b = hex(CNP_IP);
        b[2..4].copy_from_slice(&10u16.to_be_bytes()); // total < header
        assert!(IpUdp::parse(&b).is_err());
    }
}
