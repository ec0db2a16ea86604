//! The RoCEv2 invariant CRC (ICRC), docs/rocev2-wire.md §2.
//!
//! CRC-32 (IEEE 802.3 / zlib, via `crc32fast`) over
//! `8 x 0xFF | IP header | UDP header | BTH | ext headers | payload | pad`
//! with the variant fields replaced by ones: IPv4 TOS, TTL and header
//! checksum; IPv6 traffic class, flow label and hop limit; the UDP checksum;
//! BTH byte 4 (FECN, BECN, reserved). The CRC value is stored on the wire
//! least-significant byte first.
//!
//! # Hot path
//!
//! [`icrc`], [`fill_icrc`] and [`verify`] take the addresses and ports the
//! engine already has ([`IcrcIp`]) and the UDP payload; the IP, UDP and BTH
//! pseudo-headers are built in a 60-byte stack buffer and the rest of the
//! packet is hashed in place. Lengths are derived from the packet. No heap.
//!
//! # Unknown IPv4 identification
//!
//! The IPv4 ID is covered, but a UDP socket does not show it, and kernel rxe
//! (like ConnectX) picks it pseudo-randomly. CRC-32 is affine over GF(2): for
//! messages of one length, `crc(id) = crc(0) ^ (id(x) * x^(32 + 8k) mod P)`,
//! where `k` is the number of bytes after the ID field and `id(x)` is the
//! 16-bit ID as a polynomial. Multiplication by `x` is invertible modulo `P`
//! (its constant term is 1), so [`verify_v4_unknown_id`] computes
//! `(found ^ crc(0)) * x^-(32 + 8k) mod P` and accepts iff the result has
//! degree < 16 — that result *is* the sender's ID, which it returns. No
//! Gaussian elimination: the inverse shift `x^-(32 + 8k)` comes from a table
//! of `x^-(2^i)` and is cached per length in a static table of atomics, so
//! the solve is one 32x32 carry-less multiply mod P. No allocation.
//!
//! What the receiver gives up, stated honestly: the 16 ID bits are now
//! unknowns, so the 32-bit check keeps 16 bits of evidence.
//!
//! * Corruption of the ID field itself is not detected (it has no meaning to
//!   RoCE, and the kernel's IP header checksum guards it on the way in).
//! * Every single-bit error elsewhere is still detected in any packet up to
//!   26 766 bytes after the ID field (checked exhaustively by a test: the
//!   first `m` with `deg(x^-m mod P) < 16` is m = 214 135 bits).
//! * Any other corruption whose CRC syndrome is uniformly distributed (e.g.
//!   a multi-bit error) is accepted with probability 2^-16 instead of 2^-32.
//!   For example, of the 1 063 350 single-byte error patterns (any non-zero
//!   XOR into one of the 4 170 bytes after the ID), 21 would pass (a test
//!   counts them); with a known ID none would.
//!
//! The engine sends with ID 0 and DF (an unconnected DF UDP socket gets ID 0
//! from Linux), so [`verify_v4_unknown_id`] takes the fast path (one CRC, a
//! compare) for rxu peers and pays the solve only for rxe/ConnectX traffic.
//! Receivers that can read real IP headers (raw sockets, captures) should
//! use [`verify`] with the real ID or [`verify_ip_packet`] instead.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::ip::{IpHeader, IpUdp, IPPROTO_UDP, IPV4_DF, IPV4_HDR_LEN, IPV6_HDR_LEN, UDP_HDR_LEN};
use super::{need, WireError, BTH_LEN, ICRC_LEN};

/// CRC-32 of the eight 0xFF bytes that stand in for the absent LRH. rxe
/// seeds its unfinalised CRC with the equivalent 0xDEBB20E3 (= !this).
const LRH_STANDIN_CRC: u32 = 0x2144_DF1C;
/// Index of the masked byte in the BTH.
const BTH_MASKED_BYTE: usize = 4;
/// Pseudo-header room: IPv6 (40) + UDP (8) + BTH (12).
const PSEUDO_MAX: usize = IPV6_HDR_LEN + UDP_HDR_LEN + BTH_LEN;

/// The IP-level facts the ICRC covers that are not in the UDP payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcrcIp {
    /// IPv4; `flags_frag` is the flags + fragment offset word (0x4000 = DF).
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        id: u16,
        flags_frag: u16,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
    },
}

impl IcrcIp {
    /// IPv4 as rxu and rxe send it: ID 0, DF.
    pub const fn v4(src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        IcrcIp::V4 {
            src,
            dst,
            id: 0,
            flags_frag: IPV4_DF,
        }
    }

    pub const fn v6(src: Ipv6Addr, dst: Ipv6Addr) -> Self {
        IcrcIp::V6 { src, dst }
    }

    /// The covered facts of a parsed IP header.
    pub const fn from_header(h: &IpHeader) -> Self {
        match h {
            IpHeader::V4(h) => IcrcIp::V4 {
                src: h.src,
                dst: h.dst,
                id: h.id,
                flags_frag: h.flags_frag,
            },
            IpHeader::V6(h) => IcrcIp::V6 {
                src: h.src,
                dst: h.dst,
            },
        }
    }
}

/// Copies up to 12 BTH bytes of `ib` after `at` in `pseudo` with byte 4
/// masked; returns the end of the pseudo-header and the bytes of `ib` used.
#[inline]
fn put_bth(pseudo: &mut [u8; PSEUDO_MAX], at: usize, ib: &[u8]) -> (usize, usize) {
    let n = ib.len().min(BTH_LEN);
    pseudo[at..at + n].copy_from_slice(&ib[..n]);
    if n > BTH_MASKED_BYTE {
        pseudo[at + BTH_MASKED_BYTE] = 0xff;
    }
    (at + n, n)
}

#[inline]
fn put_udp(pseudo: &mut [u8; PSEUDO_MAX], at: usize, sport: u16, dport: u16, len: u16) {
    pseudo[at..at + 2].copy_from_slice(&sport.to_be_bytes());
    pseudo[at + 2..at + 4].copy_from_slice(&dport.to_be_bytes());
    pseudo[at + 4..at + 6].copy_from_slice(&len.to_be_bytes());
    pseudo[at + 6..at + 8].fill(0xff);
}

#[inline]
fn finish(pseudo: &[u8], rest: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(LRH_STANDIN_CRC);
    h.update(pseudo);
    h.update(rest);
    h.finalize()
}

/// The ICRC of a RoCEv2 packet. `ib` is the UDP payload from the BTH up to
/// and excluding the ICRC (headers, payload, pad). IP total length, UDP
/// length and IPv6 payload length are derived from `ib.len()` (lengths
/// beyond 16 bits wrap; [`fill_icrc`] and [`verify`] reject those).
pub fn icrc(ip: &IcrcIp, udp_src_port: u16, udp_dst_port: u16, ib: &[u8]) -> u32 {
    let udp_len = (UDP_HDR_LEN + ib.len() + ICRC_LEN) as u16;
    let mut p = [0u8; PSEUDO_MAX];
    let at = match ip {
        IcrcIp::V4 {
            src,
            dst,
            id,
            flags_frag,
        } => {
            p[0] = 0x45;
            p[1] = 0xff; // TOS
            let total = udp_len.wrapping_add(IPV4_HDR_LEN as u16);
            p[2..4].copy_from_slice(&total.to_be_bytes());
            p[4..6].copy_from_slice(&id.to_be_bytes());
            p[6..8].copy_from_slice(&flags_frag.to_be_bytes());
            p[8] = 0xff; // TTL
            p[9] = IPPROTO_UDP;
            p[10..12].fill(0xff); // header checksum
            p[12..16].copy_from_slice(&src.octets());
            p[16..20].copy_from_slice(&dst.octets());
            IPV4_HDR_LEN
        }
        IcrcIp::V6 { src, dst } => {
            p[0] = 0x6f; // version 6, traffic class and flow label all ones
            p[1..4].fill(0xff);
            p[4..6].copy_from_slice(&udp_len.to_be_bytes());
            p[6] = IPPROTO_UDP;
            p[7] = 0xff; // hop limit
            p[8..24].copy_from_slice(&src.octets());
            p[24..40].copy_from_slice(&dst.octets());
            IPV6_HDR_LEN
        }
    };
    put_udp(&mut p, at, udp_src_port, udp_dst_port, udp_len);
    let (end, used) = put_bth(&mut p, at + UDP_HDR_LEN, ib);
    finish(&p[..end], &ib[used..])
}

/// Checks `pkt` (a whole UDP payload, BTH .. ICRC) is long enough for a BTH
/// and an ICRC and short enough for the 16-bit IP/UDP length fields.
fn split(pkt: &[u8]) -> Result<(&[u8], u32), WireError> {
    need(pkt, BTH_LEN + ICRC_LEN)?;
    // IPv4 total length is the tightest of the three length fields.
    if pkt.len() > usize::from(u16::MAX) - IPV4_HDR_LEN - UDP_HDR_LEN {
        return Err(WireError::Oversized(pkt.len()));
    }
    let (ib, tail) = pkt.split_at(pkt.len() - ICRC_LEN);
    let found = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    Ok((ib, found))
}

/// Computes the ICRC of `pkt` (a whole UDP payload whose last 4 bytes are
/// room for the ICRC) and writes it there, little-endian. Returns it.
pub fn fill_icrc(
    ip: &IcrcIp,
    udp_src_port: u16,
    udp_dst_port: u16,
    pkt: &mut [u8],
) -> Result<u32, WireError> {
    let (ib, _) = split(pkt)?;
    let c = icrc(ip, udp_src_port, udp_dst_port, ib);
    let t = pkt.len() - ICRC_LEN;
    pkt[t..].copy_from_slice(&c.to_le_bytes());
    Ok(c)
}

/// Verifies the ICRC at the end of `pkt` (a whole UDP payload).
pub fn verify(
    ip: &IcrcIp,
    udp_src_port: u16,
    udp_dst_port: u16,
    pkt: &[u8],
) -> Result<(), WireError> {
    let (ib, found) = split(pkt)?;
    let computed = icrc(ip, udp_src_port, udp_dst_port, ib);
    if computed == found {
        Ok(())
    } else {
        Err(WireError::BadIcrc { computed, found })
    }
}

/// Verifies an IPv4 RoCEv2 packet whose IP identification is unknown (see
/// the module docs for what this gives up). On success returns the ID the
/// sender must have used (0 on the fast path). `BadIcrc.computed` is the
/// CRC for ID 0.
pub fn verify_v4_unknown_id(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    flags_frag: u16,
    udp_src_port: u16,
    udp_dst_port: u16,
    pkt: &[u8],
) -> Result<u16, WireError> {
    let (ib, found) = split(pkt)?;
    let ip = IcrcIp::V4 {
        src,
        dst,
        id: 0,
        flags_frag,
    };
    let computed = icrc(&ip, udp_src_port, udp_dst_port, ib);
    if computed == found {
        return Ok(0);
    }
    // Bytes after the ID field: rest of the IPv4 header (14), UDP (8), ib.
    let after_id = (IPV4_HDR_LEN - 6 + UDP_HDR_LEN + ib.len()) as u32;
    gf2::solve_id(computed ^ found, after_id).ok_or(WireError::BadIcrc { computed, found })
}

/// How the ICRC of a packet taken from a UDP socket checked out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceivedIcrc {
    /// Matches with the IPv4 ID the packet was expected to carry, given
    /// here (0 for IPv6, which has none).
    Valid(u16),
    /// IPv4: matches only with another, recovered ID (kernel rxe and
    /// hardware peers pick IDs of their own).
    ValidOtherId(u16),
    /// Matches with no ID, or the addresses are of two families.
    Invalid,
}

/// The receive policy of a UDP-socket receiver, which does not see the IP
/// header: `src` and `dst` are the datagram's addresses and ports, `seg`
/// its segment index within a GRO datagram (0 otherwise). Segment `k > 0`
/// of a GRO datagram from an rxu GSO sender carries IPv4 ID `k`: that is
/// checked first, at full 32-bit strength. Anything else (ID 0 on the fast
/// path, or a peer with IDs of its own) is checked with the ID recovered
/// from the ICRC ([`verify_v4_unknown_id`]). IPv6 has no ID.
pub fn verify_received(src: SocketAddr, dst: SocketAddr, seg: u16, pkt: &[u8]) -> ReceivedIcrc {
    let (sport, dport) = (src.port(), dst.port());
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let exact = IcrcIp::V4 {
                src: s,
                dst: d,
                id: seg,
                flags_frag: IPV4_DF,
            };
            if seg != 0 && verify(&exact, sport, dport, pkt).is_ok() {
                return ReceivedIcrc::Valid(seg);
            }
            match verify_v4_unknown_id(s, d, IPV4_DF, sport, dport, pkt) {
                Ok(0) => ReceivedIcrc::Valid(0),
                Ok(id) => ReceivedIcrc::ValidOtherId(id),
                Err(_) => ReceivedIcrc::Invalid,
            }
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => match verify(&IcrcIp::v6(s, d), sport, dport, pkt) {
            Ok(()) => ReceivedIcrc::Valid(0),
            Err(_) => ReceivedIcrc::Invalid,
        },
        _ => ReceivedIcrc::Invalid,
    }
}

/// Arithmetic modulo the CRC-32 polynomial in the reflected representation
/// crc32fast and zlib use: bit 31 holds the coefficient of x^0, bit 0 that
/// of x^31.
mod gf2 {
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Bytes after the IPv4 ID: 14 of IP header, 8 of UDP, then the packet.
    const CACHED: usize = 14 + 8 + crate::wire::MAX_PACKET + 1;

    const POLY: u32 = 0xEDB8_8320;
    const ONE: u32 = 0x8000_0000;

    /// b * x mod P: a right shift, reduced when x^31 falls off.
    const fn times_x(b: u32) -> u32 {
        (b >> 1) ^ (POLY & 0u32.wrapping_sub(b & 1))
    }

    /// Inverse of `times_x` (x is a unit because P has a constant term).
    pub(super) const fn div_x(c: u32) -> u32 {
        if c & ONE != 0 {
            ((c ^ POLY) << 1) | 1
        } else {
            c << 1
        }
    }

    /// a * b mod P. Branch-free: the solve sits on the receive path.
    pub(super) const fn mul(a: u32, mut b: u32) -> u32 {
        let mut p = 0;
        let mut i = 0;
        while i < 32 {
            p ^= b & 0u32.wrapping_sub((a >> (31 - i)) & 1);
            b = times_x(b);
            i += 1;
        }
        p
    }

    /// `XINV[i] = x^-(2^i) mod P`.
    const XINV: [u32; 32] = {
        let mut t = [0u32; 32];
        t[0] = div_x(ONE);
        let mut i = 1;
        while i < 32 {
            t[i] = mul(t[i - 1], t[i - 1]);
            i += 1;
        }
        t
    };

    /// x^-n mod P.
    pub(super) const fn x_pow_neg(n: u32) -> u32 {
        let mut r = ONE;
        let mut i = 0;
        while i < 32 {
            if n & (1 << i) != 0 {
                r = mul(r, XINV[i]);
            }
            i += 1;
        }
        r
    }

    /// `x^-(32 + 8 after)`, cached per `after` for every length a packet
    /// of at most MAX_PACKET bytes can give (0 = not yet computed: x^-n is
    /// a unit, never 0). Races only compute the same value twice.
    fn unshift(after: u32) -> Option<u32> {
        static CACHE: [AtomicU32; CACHED] = [const { AtomicU32::new(0) }; CACHED];
        let compute = || Some(x_pow_neg(after.checked_mul(8)?.checked_add(32)?));
        let Some(slot) = CACHE.get(after as usize) else {
            return compute();
        };
        match slot.load(Ordering::Relaxed) {
            0 => {
                let v = compute()?;
                slot.store(v, Ordering::Relaxed);
                Some(v)
            }
            v => Some(v),
        }
    }

    /// Given `delta = crc(id) ^ crc(0)` for a 2-byte field followed by
    /// `after` bytes, returns the field (big-endian u16) if one exists.
    pub(super) fn solve_id(delta: u32, after: u32) -> Option<u16> {
        // delta = id(x) * x^(32 + 8 after); undo the shift.
        let r = mul(delta, unshift(after)?);
        // id(x) has degree < 16: coefficients x^16..x^31 (bits 15..0) are 0.
        if r & 0xffff != 0 {
            return None;
        }
        // First wire byte holds x^15..x^8 (bits 16..23), second x^7..x^0.
        let b = r.to_le_bytes();
        Some(u16::from_be_bytes([b[2], b[3]]))
    }

    #[cfg(test)]
    pub(super) const fn one() -> u32 {
        ONE
    }
}

/// The ICRC of a captured RoCEv2 packet, over its real IP and UDP header
/// bytes (masked as §2 says), whatever its length fields say.
pub fn icrc_ip_packet(p: &IpUdp<'_>) -> Result<u32, WireError> {
    let ib_end = p
        .payload
        .len()
        .checked_sub(ICRC_LEN)
        .ok_or(WireError::Truncated {
            need: ICRC_LEN,
            have: p.payload.len(),
        })?;
    let ib = &p.payload[..ib_end];
    let mut pseudo = [0u8; PSEUDO_MAX];
    let hl = p.ip_bytes.len();
    pseudo[..hl].copy_from_slice(p.ip_bytes);
    match p.ip {
        IpHeader::V4(_) => {
            pseudo[1] = 0xff;
            pseudo[8] = 0xff;
            pseudo[10..12].fill(0xff);
        }
        IpHeader::V6(_) => mask_v6_like(&mut pseudo[..IPV6_HDR_LEN]),
    }
    pseudo[hl..hl + UDP_HDR_LEN].copy_from_slice(p.udp_bytes);
    pseudo[hl + 6..hl + 8].fill(0xff);
    let (end, used) = put_bth(&mut pseudo, hl + UDP_HDR_LEN, ib);
    Ok(finish(&pseudo[..end], &ib[used..]))
}

/// IPv6 header or IB GRH: traffic class, flow label and hop limit to ones.
fn mask_v6_like(h: &mut [u8]) {
    h[0] |= 0x0f;
    h[1..4].fill(0xff);
    h[7] = 0xff;
}

/// The ICRC found at the end of a parsed packet's UDP payload.
fn found_icrc(payload: &[u8]) -> Result<u32, WireError> {
    need(payload, ICRC_LEN)?;
    let t = payload.len() - ICRC_LEN;
    Ok(u32::from_le_bytes([
        payload[t],
        payload[t + 1],
        payload[t + 2],
        payload[t + 3],
    ]))
}

/// Parses a captured IPv4/IPv6 packet (IP header first, as on the wire) that
/// carries UDP and verifies the ICRC at the end of its UDP payload. Does not
/// check the UDP port; the caller decides what is RoCEv2.
pub fn verify_ip_packet(ip_packet: &[u8]) -> Result<IpUdp<'_>, WireError> {
    let p = IpUdp::parse(ip_packet)?;
    need(p.payload, BTH_LEN + ICRC_LEN)?;
    let computed = icrc_ip_packet(&p)?;
    let found = found_icrc(p.payload)?;
    if computed == found {
        Ok(p)
    } else {
        Err(WireError::BadIcrc { computed, found })
    }
}

/// Length of the IB global route header of RoCE v1.
pub const ROCE_V1_GRH_LEN: usize = 40;

/// The ICRC of a RoCE v1 packet (EtherType 0x8915): `frame` is the GRH
/// followed by BTH .. pad .. ICRC; the result covers all but the last 4
/// bytes, with the GRH masked like an IPv6 header.
pub fn icrc_roce_v1(frame: &[u8]) -> Result<u32, WireError> {
    need(frame, ROCE_V1_GRH_LEN + BTH_LEN + ICRC_LEN)?;
    let ib = &frame[ROCE_V1_GRH_LEN..frame.len() - ICRC_LEN];
    let mut pseudo = [0u8; PSEUDO_MAX];
    pseudo[..ROCE_V1_GRH_LEN].copy_from_slice(&frame[..ROCE_V1_GRH_LEN]);
    mask_v6_like(&mut pseudo[..ROCE_V1_GRH_LEN]);
    let (end, used) = put_bth(&mut pseudo, ROCE_V1_GRH_LEN, ib);
    Ok(finish(&pseudo[..end], &ib[used..]))
}

/// Verifies a RoCE v1 packet (GRH .. ICRC, see [`icrc_roce_v1`]).
pub fn verify_roce_v1(frame: &[u8]) -> Result<(), WireError> {
    let computed = icrc_roce_v1(frame)?;
    let found = found_icrc(frame)?;
    if computed == found {
        Ok(())
    } else {
        Err(WireError::BadIcrc { computed, found })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real ConnectX-4 Lx CNP (IP ID 0x718c), IP header onwards.
    const CNP_IP: &str = "45c2003c718c4000401191610a0011010a001201000012b7002800008100ffff40000118000000000000000000000000000000000000000082fd002a";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn sample(len: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        let mut v: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        v[1] &= 0xf0; // TVer 0
        v
    }

    const A: Ipv4Addr = Ipv4Addr::new(192, 168, 56, 129);
    const B: Ipv4Addr = Ipv4Addr::new(192, 168, 56, 131);

    #[test]
    fn received_policy_checks_gro_segment_id_then_recovers() {
        let (sa, da) = (SocketAddr::from((A, 4791)), SocketAddr::from((B, 4791)));
        let with_id = |id| {
            let mut p = sample(64, 7);
            let ip = IcrcIp::V4 {
                src: A,
                dst: B,
                id,
                flags_frag: IPV4_DF,
            };
            fill_icrc(&ip, 4791, 4791, &mut p).unwrap();
            p
        };
        // ID 0 on the fast path, a GRO segment's own index, a foreign ID.
        assert_eq!(
            verify_received(sa, da, 0, &with_id(0)),
            ReceivedIcrc::Valid(0)
        );
        assert_eq!(
            verify_received(sa, da, 3, &with_id(3)),
            ReceivedIcrc::Valid(3)
        );
        assert_eq!(
            verify_received(sa, da, 3, &with_id(0)),
            ReceivedIcrc::Valid(0)
        );
        assert_eq!(
            verify_received(sa, da, 0, &with_id(0x1234)),
            ReceivedIcrc::ValidOtherId(0x1234)
        );
        let mut bad = with_id(0);
        bad[20] ^= 1;
        assert_eq!(verify_received(sa, da, 0, &bad), ReceivedIcrc::Invalid);
        // Mixed families never match.
        let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, 4791));
        assert_eq!(
            verify_received(sa, v6, 0, &with_id(0)),
            ReceivedIcrc::Invalid
        );
        let mut p6 = sample(64, 9);
        let ip6 = IcrcIp::v6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST);
        fill_icrc(&ip6, 4791, 4791, &mut p6).unwrap();
        assert_eq!(verify_received(v6, v6, 0, &p6), ReceivedIcrc::Valid(0));
    }

    #[test]
    fn lrh_standin_constant() {
        assert_eq!(LRH_STANDIN_CRC, crc32fast::hash(&[0xff; 8]));
        assert_eq!(!LRH_STANDIN_CRC, 0xDEBB_20E3); // rxe's seed
    }

    #[test]
    fn real_cnp_verifies_three_ways() {
        let b = hex(CNP_IP);
        let p = verify_ip_packet(&b).unwrap();
        let ip = IcrcIp::from_header(&p.ip);
        verify(&ip, p.udp.src_port, p.udp.dst_port, p.payload).unwrap();
        assert_eq!(
            icrc(&ip, 0, 4791, &p.payload[..p.payload.len() - 4]),
            0x2a00_fd82
        );
        let id = verify_v4_unknown_id(
            Ipv4Addr::new(10, 0, 17, 1),
            Ipv4Addr::new(10, 0, 18, 1),
            IPV4_DF,
            0,
            4791,
            p.payload,
        )
        .unwrap();
        assert_eq!(id, 0x718c);
    }

    #[test]
    fn gf2_inverse_and_powers() {
        let one = gf2::one();
        let x = one >> 1;
        for a in [1u32, 0x8000_0000, 0xdead_beef, 0x1234_5678] {
            assert_eq!(gf2::mul(gf2::div_x(a), x), a);
        }
        for n in [0u32, 1, 2, 31, 32, 33, 1000, 33_288, 214_135] {
            let mut xn = one;
            for _ in 0..n {
                xn = gf2::mul(xn, x);
            }
            assert_eq!(gf2::mul(xn, gf2::x_pow_neg(n)), one, "n={n}");
        }
    }

    #[test]
    fn recovers_every_id() {
        let mut pkt = sample(16, 7);
        for id in 0..=u16::MAX {
            let ip = IcrcIp::V4 {
                src: A,
                dst: B,
                id,
                flags_frag: IPV4_DF,
            };
            fill_icrc(&ip, 0xc123, 4791, &mut pkt).unwrap();
            assert_eq!(
                verify_v4_unknown_id(A, B, IPV4_DF, 0xc123, 4791, &pkt),
                Ok(id)
            );
        }
    }

    #[test]
    fn recovers_ids_at_many_lengths() {
        for len in [16usize, 17, 64, 65, 300, 1024 + 16, 4096 + 44] {
            let mut pkt = sample(len, len as u32);
            for id in [1u16, 0x8000, 0x718c, 0xbe10, 0xffff] {
                let ip = IcrcIp::V4 {
                    src: A,
                    dst: B,
                    id,
                    flags_frag: IPV4_DF,
                };
                fill_icrc(&ip, 1, 4791, &mut pkt).unwrap();
                assert_eq!(verify_v4_unknown_id(A, B, IPV4_DF, 1, 4791, &pkt), Ok(id));
                // Known-ID verify agrees, ID 0 does not.
                verify(&ip, 1, 4791, &pkt).unwrap();
                assert!(verify(&IcrcIp::v4(A, B), 1, 4791, &pkt).is_err());
            }
        }
    }

    /// The claim in the module docs: no single-bit error after the ID field
    /// escapes unless it lies >= 214 135 bits after it.
    #[test]
    fn single_bit_errors_after_id_are_caught() {
        let mut v = gf2::one();
        let mut first_escape = None;
        for m in 1..=300_000u32 {
            v = gf2::div_x(v);
            if v & 0xffff == 0 {
                first_escape = Some(m);
                break;
            }
        }
        assert_eq!(first_escape, Some(214_135));
    }

    /// The count quoted in the module docs.
    #[test]
    fn single_byte_error_escapes() {
        const BYTES: usize = 4170;
        // x^-m for a bit m positions after the ID field's last bit.
        let mut v = vec![0u32; 8 * BYTES + 1];
        v[0] = gf2::one();
        for m in 1..v.len() {
            v[m] = gf2::div_x(v[m - 1]);
        }
        let mut escapes = 0;
        for j in 0..BYTES {
            let mut acc = 0u32;
            for g in 1u32..256 {
                // Gray code: one more bit of the pattern changes each step.
                acc ^= v[8 * j + 1 + g.trailing_zeros() as usize];
                escapes += usize::from(acc & 0xffff == 0);
            }
        }
        assert_eq!(escapes, 21);
    }

    #[test]
    fn single_bit_flips_end_to_end() {
        let mut pkt = sample(1024 + 16, 3);
        let ip = IcrcIp::V4 {
            src: A,
            dst: B,
            id: 0x5a5a,
            flags_frag: IPV4_DF,
        };
        fill_icrc(&ip, 0xc000, 4791, &mut pkt).unwrap();
        for i in 0..pkt.len() {
            if i == 4 {
                continue; // masked BTH byte
            }
            for bit in 0..8 {
                pkt[i] ^= 1 << bit;
                assert!(
                    verify_v4_unknown_id(A, B, IPV4_DF, 0xc000, 4791, &pkt).is_err(),
                    "byte {i} bit {bit}"
                );
                pkt[i] ^= 1 << bit;
            }
        }
        // Masked byte 4 and the ports/addresses the caller supplies.
        pkt[4] ^= 0xc0;
        assert_eq!(
            verify_v4_unknown_id(A, B, IPV4_DF, 0xc000, 4791, &pkt),
            Ok(0x5a5a)
        );
        assert!(verify_v4_unknown_id(A, B, IPV4_DF, 0xc001, 4791, &pkt).is_err());
        assert!(verify_v4_unknown_id(B, A, IPV4_DF, 0xc000, 4791, &pkt).is_err());
        assert!(verify_v4_unknown_id(A, B, 0, 0xc000, 4791, &pkt).is_err());
    }

    #[test]
    fn v6_fill_verify_and_lengths() {
        let s: Ipv6Addr = "fe80::1".parse().unwrap();
        let d: Ipv6Addr = "fe80::2".parse().unwrap();
        let ip = IcrcIp::v6(s, d);
        let mut pkt = sample(100, 9);
        let c = fill_icrc(&ip, 5, 4791, &mut pkt).unwrap();
        assert_eq!(&pkt[96..], &c.to_le_bytes());
        verify(&ip, 5, 4791, &pkt).unwrap();
        assert!(verify(&IcrcIp::v6(d, s), 5, 4791, &pkt).is_err());
        // Too short for BTH + ICRC, or too long for the length fields.
        assert!(matches!(
            verify(&ip, 5, 4791, &pkt[..15]),
            Err(WireError::Truncated { .. })
        ));
        let big = vec![0u8; 65536];
        assert!(matches!(
            verify(&ip, 5, 4791, &big),
            Err(WireError::Oversized(_))
        ));
        assert!(verify_v4_unknown_id(A, B, IPV4_DF, 5, 4791, &big).is_err());
        assert!(fill_icrc(&ip, 5, 4791, &mut [0u8; 3]).is_err());
        // icrc itself is total.
        let _ = icrc(&ip, 5, 4791, &[]);
        let _ = icrc(&IcrcIp::v4(A, B), 5, 4791, &[1, 2, 3]);
    }

    #[test]
    fn real_rocev1_vectors_verify() {
        // GRH onwards of the two ConnectX RoCE v1 frames (EtherType 0x8915).
        let write = hex("6020000000281b4000000000000000000000ffff0f00000200000000000000000000ffff0f0000020a70ffff0000010a80a788bc000055d4c0726000000047b3000000050000000001000000e3d856bb");
        let ack = hex("6020000000141b4000000000000000000000ffff0f00000200000000000000000000ffff0f0000021140ffff0000010900a788c00000000525f0c038");
        verify_roce_v1(&write).unwrap();
        verify_roce_v1(&ack).unwrap();
        let mut bad = ack.clone();
        bad[50] ^= 1;
        assert!(verify_roce_v1(&bad).is_err());
        assert!(verify_roce_v1(&ack[..40]).is_err());
    }
}
