//! Verbs semantics the daemon enforces: QP state transitions with their
//! attribute masks, device and port attributes, limits, GIDs.
//!
//! [`limits`] holds the numbers the device reports and the daemon
//! enforces; [`modify`] the QP state machine; [`qp_attr`] a modify's
//! attributes in the transport's form and as the QP keeps them; [`attrs`]
//! the device and port attributes.

pub mod attrs;
pub mod limits;
pub mod modify;
pub mod qp_attr;
#[cfg(test)]
mod tests;

pub use limits::*;
pub use modify::{mask_names, state, state_name};
pub use qp_attr::keep_attr;

use rxu_abi::proto::{DeviceAttr, PortAttr, QpAttr, QpType};
use std::net::IpAddr;

/// A refused verbs call: errno for the client plus a message for its log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{msg} (errno {errno})")]
pub struct VerbsError {
    pub errno: i32,
    pub msg: String,
}

/// `enum ibv_qp_attr_mask` bits (the shared vocabulary's).
pub use transport::verbs::qp_attr_mask as mask;

/// What the device is: fixed facts plus its addresses and netdev.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFacts {
    pub name: String,
    pub netdev: String,
    pub addrs: Vec<IpAddr>,
    /// The netdev's MTU (active MTU is derived from it as rxe does).
    pub netdev_mtu: u32,
    pub node_guid: u64,
    pub port_up: bool,
}

/// Checks a modify_qp call as the verbs API requires (required and
/// optional attributes per transition and QP type, value ranges) and
/// returns the transport's attributes for it: the state the QP moves to
/// (`state`, set only with IBV_QP_STATE) and the attributes of `mask`.
/// What is left to check is the device's now: the port's MTU and GID
/// table (see the daemon's `qp::modify`).
///
/// `cur` is the QP's state (`enum ibv_qp_state`); without IBV_QP_STATE in
/// `mask` the QP stays in it and only the attributes change. Every error
/// is EINVAL with a message naming the transition and the offending
/// attribute, e.g. "INIT->RTR for RC needs IBV_QP_DEST_QPN".
pub fn check_modify_qp(
    qp_type: QpType,
    cur: u8,
    mask: u32,
    attr: &QpAttr,
) -> Result<transport::qp::QpAttr, VerbsError> {
    modify::check(qp_type, cur, mask, attr)
}

/// The Q_Keys with bit 31 set are controlled (IBA 10.2.4): they belong to
/// QP1 and other privileged users, and a UD QP holding one could forge CM
/// MADs to this device's QP1 and to remote ones. Since Linux 6.4
/// (`RDMA/uverbs: Restrict usage of privileged QKEYs`) uverbs refuses to set
/// one with EPERM unless the caller has CAP_NET_RAW; `net_raw` is whether
/// the client has it.
pub fn check_qkey_privilege(mask: u32, attr: &QpAttr, net_raw: bool) -> Result<(), VerbsError> {
    if mask & mask::QKEY != 0 && attr.qkey & CONTROLLED_QKEY != 0 && !net_raw {
        return Err(VerbsError {
            errno: libc::EPERM,
            msg: format!(
                "Q_Key {:#x} is a controlled Q_Key (bit 31): setting it needs CAP_NET_RAW",
                attr.qkey
            ),
        });
    }
    Ok(())
}

/// Bit 31 of a Q_Key: a controlled Q_Key.
pub const CONTROLLED_QKEY: u32 = 0x8000_0000;

/// The device attributes rxu reports.
pub fn device_attr(facts: &DeviceFacts) -> DeviceAttr {
    attrs::device_attr(facts)
}

/// The port attributes rxu reports (port 1).
pub fn port_attr(facts: &DeviceFacts) -> PortAttr {
    attrs::port_attr(facts)
}

/// IPv4-mapped or IPv6 GID of an address.
pub fn gid_of(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// The GID table for a set of addresses: IPv4 addresses first, in the order
/// given (so index 0 is the first IPv4 address, which perftest and the
/// pingpongs pick by default), then IPv6; duplicates dropped. The daemon's
/// port attributes and the device node's sysfs files both use it.
pub fn gid_table(addrs: &[IpAddr]) -> Vec<[u8; 16]> {
    let v4 = addrs.iter().filter(|a| a.is_ipv4());
    let v6 = addrs.iter().filter(|a| a.is_ipv6());
    let mut table: Vec<[u8; 16]> = Vec::new();
    for g in v4.chain(v6).map(|a| gid_of(*a)) {
        if !table.contains(&g) {
            table.push(g);
        }
    }
    table
}

/// Address of a GID (IPv4-mapped GIDs give IPv4).
pub fn addr_of_gid(gid: &[u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Whether a GID can be a RoCE v2 destination: an IPv4-mapped unicast
/// address, or a unicast IPv6 address rxu can route without an interface
/// scope (not unspecified, multicast or link-local).
pub fn valid_roce_v2_gid(gid: &[u8; 16]) -> bool {
    match addr_of_gid(gid) {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => {
            let link_local = a.segments()[0] & 0xffc0 == 0xfe80;
            !(a.is_unspecified() || a.is_multicast() || link_local)
        }
    }
}
