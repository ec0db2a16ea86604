//! UDP GSO datagrams in a capture. On `lo` (and wherever a capture sees a
//! packet before the kernel segments it) one frame holds a run of RoCE
//! packets that leave as separate datagrams: segments of `gso_size` bytes
//! (the last may be shorter), each with its own IP total length, UDP
//! length and IP ID (the first frame's ID + its index). The frame does not
//! say `gso_size`; it is found from the packets themselves: the next
//! segment starts with a BTH (usually of the same QP and the next PSN), and
//! the first segment's ICRC verifies with its own lengths. The caller then
//! checks every segment's ICRC.

use transport::wire::icrc;
use transport::wire::ip::{ipv4_checksum, IpHeader, IpUdp, IPPROTO_UDP};
use transport::wire::{Bth, Headers, BTH_LEN, ICRC_LEN, MAX_PACKET};

const IPV4_HDR_LEN: usize = 20;
const UDP_HDR_LEN: usize = 8;

/// Splits an IPv4 frame carrying a GSO run of RoCE packets into one IPv4
/// packet per segment, as they would leave after segmentation. None when
/// the frame is not such a run (one packet, IPv6, no consistent split).
pub fn split(ip: &[u8]) -> Option<Vec<Vec<u8>>> {
    let p = IpUdp::parse(ip).ok()?;
    let IpHeader::V4(v4) = p.ip else {
        return None;
    };
    if v4.protocol != IPPROTO_UDP || p.ip_bytes.len() != IPV4_HDR_LEN {
        return None;
    }
    let body = p.payload;
    let (first, hl) = Headers::parse(body).ok()?;
    let min = hl + ICRC_LEN;
    if body.len() < min + BTH_LEN + ICRC_LEN {
        return None;
    }
    let sizes = || min..=MAX_PACKET.min(body.len() - BTH_LEN - ICRC_LEN);
    // Most runs are one QP's packets in PSN order; a run may also cross
    // from one QP to the next, then any header at the boundary will do.
    let size = sizes()
        .filter(|&s| follows(&first.bth, &body[s..]))
        .find(|&s| segment_ok(&p, v4.id, &body[..s]))
        .or_else(|| {
            sizes()
                .filter(|&s| Headers::parse(&body[s..]).is_ok())
                .find(|&s| segment_ok(&p, v4.id, &body[..s]))
        })?;
    let chunks: Vec<&[u8]> = body.chunks(size).collect();
    if chunks.last().is_some_and(|c| c.len() < BTH_LEN + ICRC_LEN) {
        return None;
    }
    Some(
        chunks
            .iter()
            .enumerate()
            .map(|(k, c)| segment(&p, v4.id.wrapping_add(k as u16), c))
            .collect(),
    )
}

/// `next` starts with a BTH to the same QP, one PSN on.
fn follows(first: &Bth, next: &[u8]) -> bool {
    Bth::parse(next)
        .is_ok_and(|b| b.dest_qpn == first.dest_qpn && b.psn.value() == first.psn.next().value())
}

/// The first segment's ICRC verifies with its own lengths and IP ID.
fn segment_ok(p: &IpUdp<'_>, id: u16, bytes: &[u8]) -> bool {
    let pkt = segment(p, id, bytes);
    let Ok(s) = IpUdp::parse(&pkt) else {
        return false;
    };
    let wire = bytes
        .len()
        .checked_sub(ICRC_LEN)
        .map(|t| u32::from_le_bytes([bytes[t], bytes[t + 1], bytes[t + 2], bytes[t + 3]]));
    icrc::icrc_ip_packet(&s).ok() == wire
}

/// The IPv4 + UDP packet that carries `bytes` as segment with IP ID `id`.
fn segment(p: &IpUdp<'_>, id: u16, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(IPV4_HDR_LEN + UDP_HDR_LEN + bytes.len());
    out.extend_from_slice(p.ip_bytes);
    out.extend_from_slice(p.udp_bytes);
    out.extend_from_slice(bytes);
    let total = (IPV4_HDR_LEN + UDP_HDR_LEN + bytes.len()) as u16;
    out[2..4].copy_from_slice(&total.to_be_bytes());
    out[4..6].copy_from_slice(&id.to_be_bytes());
    out[10..12].fill(0);
    let sum = ipv4_checksum(&out[..IPV4_HDR_LEN]);
    out[10..12].copy_from_slice(&sum.to_be_bytes());
    let udp_len = (UDP_HDR_LEN + bytes.len()) as u16;
    out[IPV4_HDR_LEN + 4..IPV4_HDR_LEN + 6].copy_from_slice(&udp_len.to_be_bytes());
    // The checksum the segment gets is not in the frame; none is valid.
    out[IPV4_HDR_LEN + 6..IPV4_HDR_LEN + 8].fill(0);
    out
}
