//! Addresses as RoCEv2 sees them: GIDs of IP addresses and the route
//! rdma_cm synthesises for an id (`cma_resolve_iboe_route`).

use std::net::{IpAddr, SocketAddr};

use rxu_abi::proto::cm::RouteInfo;
use rxu_abi::proto::AhAttr;

use super::timing::{ROUTE_HOP_LIMIT, ROUTE_RATE};

/// The GID of an address: IPv4-mapped `::ffff:a.b.c.d`, or the IPv6 address.
pub(crate) fn gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The index of GID `sgid` in the GID table of a device serving `addrs`,
/// in the daemon's order (`rxud::verbs::gid_table`: IPv4 addresses first
/// as given, then IPv6, duplicates dropped); 0 when it is not there. The
/// kernel's `ib_init_ah_attr_from_path` likewise names the GID entry of
/// the path's source.
pub fn sgid_index(addrs: &[IpAddr], sgid: &[u8; 16]) -> u8 {
    let v4 = addrs.iter().filter(|a| a.is_ipv4());
    let v6 = addrs.iter().filter(|a| a.is_ipv6());
    let mut table: Vec<[u8; 16]> = Vec::new();
    for g in v4.chain(v6).map(|a| gid(*a)) {
        if !table.contains(&g) {
            table.push(g);
        }
    }
    table
        .iter()
        .position(|g| g == sgid)
        .and_then(|i| u8::try_from(i).ok())
        .unwrap_or(0)
}

/// RoCEv2 flow label of a connection (`cma_get_roce_udp_flow_label`).
pub(crate) fn flow_label(src: SocketAddr, dst: SocketAddr) -> u32 {
    (src.port() as u32 * 31 + dst.port() as u32) & 0xF_FFFF
}

/// What an id's route says: the path to `dst` (or only the source side).
pub(crate) struct Path {
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub mtu: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub packet_life_time: u8,
}

impl Path {
    pub fn route_info(&self, node_guid: u64, resolved: bool) -> RouteInfo {
        RouteInfo {
            node_guid,
            port_num: 1,
            sgid: self.sgid,
            dgid: self.dgid,
            pkey: 0xFFFF,
            mtu: self.mtu,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            flow_label: self.flow_label,
            sl: 0,
            packet_life_time: self.packet_life_time,
            rate: ROUTE_RATE,
            num_paths: u32::from(resolved),
        }
    }

    /// The address vector to the peer (port 1; `sgid_index`: the entry of
    /// this path's source GID, [`sgid_index`]).
    pub fn ah(&self, sgid_index: u8) -> AhAttr {
        AhAttr {
            dgid: self.dgid,
            flow_label: self.flow_label,
            sgid_index,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            sl: 0,
            is_global: true,
            port_num: 1,
        }
    }

    /// The synthesised path from `src` to `dst` on a RoCE device.
    pub fn synth(src: SocketAddr, dst: Option<SocketAddr>, mtu: u8, tos: u8, life: u8) -> Path {
        Path {
            sgid: gid(src.ip()),
            dgid: dst.map(|d| gid(d.ip())).unwrap_or([0; 16]),
            mtu,
            hop_limit: ROUTE_HOP_LIMIT,
            traffic_class: tos,
            flow_label: dst.map(|d| flow_label(src, d)).unwrap_or(0),
            packet_life_time: life,
        }
    }
}
