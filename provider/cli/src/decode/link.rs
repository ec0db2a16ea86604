//! Link layers of captures: find the network-layer bytes of a frame.

/// Link types (tcpdump.org LINKTYPE_* values) `rxu decode` understands.
pub mod linktype {
    /// BSD loopback: 4-byte address family in the capturing host's order.
    pub const NULL: u32 = 0;
    pub const ETHERNET: u32 = 1;
    /// DLT_RAW as some platforms write it (12 on most, 14 on OpenBSD).
    pub const RAW_12: u32 = 12;
    pub const RAW_14: u32 = 14;
    pub const RAW: u32 = 101;
    /// OpenBSD loopback: 4-byte address family, network order.
    pub const LOOP: u32 = 108;
    pub const LINUX_SLL: u32 = 113;
    pub const IPV4: u32 = 228;
    pub const IPV6: u32 = 229;
    pub const LINUX_SLL2: u32 = 276;
}

/// EtherTypes that matter here.
const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
/// RoCE v1: a GRH straight after the Ethernet header.
const ETH_ROCE_V1: u16 = 0x8915;
/// 802.1Q, 802.1ad, and the pre-standard QinQ tag.
const VLAN_TAGS: [u16; 3] = [0x8100, 0x88a8, 0x9100];

/// What a frame carries, as far as `rxu decode` cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network<'a> {
    /// An IPv4 or IPv6 packet (IP header first).
    Ip(&'a [u8]),
    /// A RoCE v1 packet (GRH first).
    RoceV1(&'a [u8]),
    /// Anything else.
    Other,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Dispatches on EtherType `t` whose payload starts at `p`, through any
/// VLAN tags (each: 2 bytes TCI, then the inner EtherType).
fn by_ethertype(frame: &[u8], mut t: u16, mut p: usize) -> Network<'_> {
    loop {
        let rest = frame.get(p..).unwrap_or_default();
        match t {
            ETH_IPV4 | ETH_IPV6 => return Network::Ip(rest),
            ETH_ROCE_V1 => return Network::RoceV1(rest),
            v if VLAN_TAGS.contains(&v) => match be16(frame, p + 2) {
                Some(inner) => {
                    t = inner;
                    p += 4;
                }
                None => return Network::Other,
            },
            _ => return Network::Other,
        }
    }
}

/// EtherType at `at`, payload right after it.
fn ethertype_at(frame: &[u8], at: usize) -> Network<'_> {
    match be16(frame, at) {
        Some(t) => by_ethertype(frame, t, at + 2),
        None => Network::Other,
    }
}

/// Bytes that start with an IP version nibble of 4 or 6.
fn ip_by_version(b: &[u8]) -> Network<'_> {
    match b.first().map(|v| v >> 4) {
        Some(4) | Some(6) => Network::Ip(b),
        _ => Network::Other,
    }
}

/// The network-layer content of one captured frame.
pub fn network(linktype: u32, frame: &[u8]) -> Network<'_> {
    use linktype::*;
    match linktype {
        ETHERNET => ethertype_at(frame, 12),
        // SLL: packet type, ARPHRD, address length, 8-byte address, protocol.
        LINUX_SLL => ethertype_at(frame, 14),
        // SLL2: protocol, reserved, ifindex, ARPHRD, type, addr len, address.
        LINUX_SLL2 => match be16(frame, 0) {
            Some(t) => by_ethertype(frame, t, 20),
            None => Network::Other,
        },
        RAW | RAW_12 | RAW_14 | IPV4 | IPV6 => ip_by_version(frame),
        // The address family's byte order varies; the IP version nibble
        // after it does not.
        NULL | LOOP => ip_by_version(frame.get(4..).unwrap_or_default()),
        _ => Network::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: [u8; 4] = [0x45, 0, 0, 20];

    fn eth(types: &[u16], payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        for (i, t) in types.iter().enumerate() {
            f.extend_from_slice(&t.to_be_bytes());
            if i + 1 < types.len() {
                f.extend_from_slice(&[0x60, 0x00]); // TCI: PCP 3, VID 0
            }
        }
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn ethernet_with_and_without_tags() {
        use linktype::ETHERNET;
        assert_eq!(network(ETHERNET, &eth(&[0x0800], &IP)), Network::Ip(&IP));
        let f = eth(&[0x8100, 0x86dd], &IP);
        assert_eq!(network(ETHERNET, &f), Network::Ip(&IP));
        let f = eth(&[0x88a8, 0x8100, 0x0800], &IP);
        assert_eq!(network(ETHERNET, &f), Network::Ip(&IP));
        let f = eth(&[0x9100, 0x8915], &IP);
        assert_eq!(network(ETHERNET, &f), Network::RoceV1(&IP));
        assert_eq!(network(ETHERNET, &eth(&[0x0806], &IP)), Network::Other);
        // Cut inside a tag or the EtherType.
        let f = eth(&[0x8100, 0x0800], &IP);
        for n in 0..17 {
            assert_eq!(network(ETHERNET, &f[..n]), Network::Other, "{n}");
        }
        assert_eq!(network(ETHERNET, &f[..18]), Network::Ip(&[]));
    }

    #[test]
    fn cooked_raw_and_loopback() {
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&0x0800u16.to_be_bytes());
        sll.extend_from_slice(&IP);
        assert_eq!(network(linktype::LINUX_SLL, &sll), Network::Ip(&IP));

        let mut sll2 = 0x86ddu16.to_be_bytes().to_vec();
        sll2.resize(20, 0);
        sll2.extend_from_slice(&IP);
        assert_eq!(network(linktype::LINUX_SLL2, &sll2), Network::Ip(&IP));
        // SLL2 with a VLAN tag left in the payload.
        let mut sll2v = 0x8100u16.to_be_bytes().to_vec();
        sll2v.resize(20, 0);
        sll2v.extend_from_slice(&[0, 5, 0x08, 0x00]);
        sll2v.extend_from_slice(&IP);
        assert_eq!(network(linktype::LINUX_SLL2, &sll2v), Network::Ip(&IP));

        for lt in [linktype::RAW, linktype::IPV4, linktype::RAW_12] {
            assert_eq!(network(lt, &IP), Network::Ip(&IP));
        }
        assert_eq!(network(linktype::RAW, &[0x10]), Network::Other);
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&IP);
        assert_eq!(network(linktype::NULL, &null), Network::Ip(&IP));
        assert_eq!(network(linktype::LOOP, &null[..3]), Network::Other);
        assert_eq!(network(12345, &IP), Network::Other);
        assert_eq!(network(linktype::LINUX_SLL2, &[]), Network::Other);
    }
}
