//! One `rdma_join_multicast` of an rdma_cm id, as the CM service keeps it
//! (the device receives the groups its QPs attach to and its ids join).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// One `rdma_join_multicast` of an rdma_cm id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Join {
    pub id: u32,
    pub group: SocketAddr,
    pub send_only: bool,
    /// MULTICAST_JOIN (or _ERROR) was written.
    pub reported: bool,
}

impl Join {
    /// The IPv4 group, for a join that needs the device to receive it.
    pub fn received(&self) -> Option<Ipv4Addr> {
        match self.group.ip() {
            IpAddr::V4(g) if !self.send_only => Some(g),
            _ => None,
        }
    }
}
