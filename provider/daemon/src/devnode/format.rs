//! File contents in the formats the kernel writes and libibverbs 44 parses
//! (see docs/libibverbs-contract.md §1.2, §1.4, §1.8). Pure functions.

use std::fmt::Write as _;
use std::net::IpAddr;

/// A 16-byte GID as stored in the table.
pub type Gid = [u8; 16];

/// `%04x:%04x:%04x:%04x` of the GUID's big-endian bytes, as the kernel
/// prints node_guid and sys_image_guid and libibverbs parses them.
pub fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    let w = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    format!("{:04x}:{:04x}:{:04x}:{:04x}", w(0), w(2), w(4), w(6))
}

/// Eight groups of four lower-case hex digits (the kernel's `%pI6`); the
/// exact 39-character form libibverbs expects in `gids/<i>`.
pub fn gid(g: &Gid) -> String {
    let mut s = String::with_capacity(39);
    for (i, pair) in g.chunks_exact(2).enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{:04x}", u16::from_be_bytes([pair[0], pair[1]]));
    }
    s
}

/// GIDs follow the daemon's rules (one definition, in `verbs`).
pub use crate::verbs::{gid_of, gid_table};

/// Node GUID from a MAC address, the way rxe derives it: the modified
/// EUI-64 (U/L bit flipped, ff:fe inserted in the middle).
pub fn node_guid_from_mac(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// Node GUID for a device known by an address rather than a MAC (loopback
/// has an all-zero MAC): the EUI-64 of the locally administered MAC
/// `02:78:a:b:c:d` built from the IPv4 address, or from the XOR-fold of an
/// IPv6 address's four 32-bit words.
pub fn node_guid_from_ip(addr: IpAddr) -> u64 {
    let word = match addr {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            let fold = o.chunks_exact(4).fold(0u32, |acc, c| {
                acc ^ u32::from_be_bytes([c[0], c[1], c[2], c[3]])
            });
            fold.to_be_bytes()
        }
    };
    node_guid_from_mac([0x02, b'x', word[0], word[1], word[2], word[3]])
}

/// IB port states as the kernel names them in `ports/<p>/state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    Down = 1,
    Init = 2,
    Armed = 3,
    Active = 4,
}

impl PortState {
    /// `ports/<p>/state`, e.g. `4: ACTIVE`.
    pub fn state_file(self) -> String {
        let name = match self {
            PortState::Down => "DOWN",
            PortState::Init => "INIT",
            PortState::Armed => "ARMED",
            PortState::Active => "ACTIVE",
        };
        format!("{}: {name}", self as u8)
    }

    /// `ports/<p>/phys_state`: a RoCE port is LinkUp unless its netdev is
    /// down, which rxe reports as Disabled.
    pub fn phys_state_file(self) -> &'static str {
        match self {
            PortState::Down => "3: Disabled",
            _ => "5: LinkUp",
        }
    }
}

/// The path MTU enum (the shared vocabulary's).
pub use transport::verbs::Mtu;

/// IB link speed per lane, as `ports/<p>/rate` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Speed {
    Sdr,
    Ddr,
    Qdr,
    Fdr10,
    Fdr,
    Edr,
    Hdr,
    Ndr,
}

impl Speed {
    /// (deci-Gb/s per lane, suffix) as the kernel's rate attribute uses.
    fn deci_gbps_and_name(self) -> (u32, &'static str) {
        match self {
            Speed::Sdr => (25, ""),
            Speed::Ddr => (50, " DDR"),
            Speed::Qdr => (100, " QDR"),
            Speed::Fdr10 => (100, " FDR10"),
            Speed::Fdr => (140, " FDR"),
            Speed::Edr => (250, " EDR"),
            Speed::Hdr => (500, " HDR"),
            Speed::Ndr => (1000, " NDR"),
        }
    }
}

/// `ports/<p>/rate`, e.g. `25 Gb/sec (1X EDR)` or `2.5 Gb/sec (1X)`.
pub fn rate(width: u8, speed: Speed) -> String {
    let (per_lane, name) = speed.deci_gbps_and_name();
    let total = per_lane * u32::from(width);
    let half = if total % 10 != 0 { ".5" } else { "" };
    format!("{}{half} Gb/sec ({width}X{name})", total / 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn gid_formats() {
        let g = gid_of(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(gid(&g), "0000:0000:0000:0000:0000:ffff:7f00:0001");
        let g6 = gid_of("fe80::1:abcd".parse().unwrap());
        assert_eq!(gid(&g6), "fe80:0000:0000:0000:0000:0000:0001:abcd");
        assert_eq!(gid(&[0; 16]).len(), 39);
    }

    #[test]
    fn guid_formats() {
        assert_eq!(guid(0x0002_c903_0000_1111), "0002:c903:0000:1111");
        assert_eq!(guid(0), "0000:0000:0000:0000");
    }

    #[test]
    fn guid_derivations() {
        // rxe: MAC 00:11:22:33:44:55 -> 0211:22ff:fe33:4455
        let g = node_guid_from_mac([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(guid(g), "0211:22ff:fe33:4455");
        let a = node_guid_from_ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        let b = node_guid_from_ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        assert_ne!(a, b);
        assert_eq!(guid(a), "0078:0aff:fe00:0001");
        assert_ne!(node_guid_from_ip(IpAddr::V6(Ipv6Addr::LOCALHOST)), 0);
    }

    #[test]
    fn gid_table_puts_ipv4_first_and_dedups() {
        let addrs: Vec<IpAddr> = vec![
            "fd00::1".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
            "::ffff:10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
        ];
        let t = gid_table(&addrs);
        assert_eq!(t.len(), 3);
        assert_eq!(gid(&t[0]), "0000:0000:0000:0000:0000:ffff:0a00:0001");
        assert_eq!(gid(&t[1]), "0000:0000:0000:0000:0000:ffff:0a00:0002");
        assert_eq!(gid(&t[2]), "fd00:0000:0000:0000:0000:0000:0000:0001");
    }

    #[test]
    fn port_files() {
        assert_eq!(PortState::Active.state_file(), "4: ACTIVE");
        assert_eq!(PortState::Down.state_file(), "1: DOWN");
        assert_eq!(PortState::Active.phys_state_file(), "5: LinkUp");
        assert_eq!(PortState::Down.phys_state_file(), "3: Disabled");
        assert_eq!(rate(1, Speed::Edr), "25 Gb/sec (1X EDR)");
        assert_eq!(rate(1, Speed::Sdr), "2.5 Gb/sec (1X)");
        assert_eq!(rate(4, Speed::Qdr), "40 Gb/sec (4X QDR)");
    }
}
