//! Port 1 follows its netdev. On a change rtnetlink reports (see
//! `netlink`) the daemon reads the netdev's state and addresses and
//! derives the port from them:
//!
//! - A device serving one address (`--addr`): ACTIVE when the netdev is
//!   up and running (IFF_UP and IFF_RUNNING: no carrier is DOWN too) *and*
//!   the address is assigned to it; the GID table holds that address while
//!   it is assigned (the engine is bound to it alone).
//! - A device serving its netdev (`--all-addrs`, the engine on 0.0.0.0 and
//!   [::] tied to the netdev): the GID table holds every address of the
//!   netdev but IPv6 link-local ones, IPv4 first; ACTIVE while the netdev
//!   runs and has at least one. The engine accepts packets only to the
//!   current GIDs, and a QP sends from the address of its AV's source GID.
//!
//! [`Port`] applies every change to the port's attributes (query_port) and
//! to the device tree (ports/1/state, gids, ndevs, rxu/active_mtu), and
//! returns what changed; the device then announces it to every open
//! context as IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE and
//! IBV_EVENT_GID_CHANGE (a port going down says so before its GID goes; a
//! port coming up lists its GID before it says so).

use std::net::IpAddr;
use std::path::PathBuf;

use transport::qp::Mtu;

use crate::devnode::{self, DevNode, PortState};
use crate::verbs::{self, DeviceFacts};
use rxu_abi::proto::PortAttr;

use super::link::{query_link, LinkView};
use super::log::{debug, info, warning};

/// Where the device tree of this device lives (written by `rxu up`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLoc {
    /// The SYSFS_PATH root.
    pub sysfs: PathBuf,
    /// N of uverbsN.
    pub uverbs: u32,
}

/// What the port is, derived from a [`LinkView`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortView {
    pub up: bool,
    pub addrs: Vec<IpAddr>,
    pub mtu: Option<u32>,
}

/// Whether the served address is usable on `link`: assigned to it, or, for
/// a loopback address on the loopback device, covered by its loopback net
/// (127.0.0.1/8 makes every 127.x local without listing it).
pub fn served_present(served: IpAddr, link: &LinkView) -> bool {
    if link.addrs.contains(&served) {
        return true;
    }
    link.loopback
        && served.is_loopback()
        && link
            .addrs
            .iter()
            .any(|a| a.is_loopback() && a.is_ipv4() == served.is_ipv4())
}

/// The addresses a device serving all of `link` has as GIDs: every
/// address but IPv6 link-local ones (a GID carries no scope to send to
/// them with), IPv4 first, each once.
pub fn gid_addrs(link: &LinkView) -> Vec<IpAddr> {
    usable_gid_addrs(&link.addrs)
}

/// [`gid_addrs`] of a list of addresses (also `rxu up`'s rule).
pub fn usable_gid_addrs(addrs: &[IpAddr]) -> Vec<IpAddr> {
    let usable = |a: &&IpAddr| match a {
        IpAddr::V4(v4) => !v4.is_unspecified() && !v4.is_multicast(),
        IpAddr::V6(v6) => {
            v6.segments()[0] & 0xffc0 != 0xfe80 && !v6.is_unspecified() && !v6.is_multicast()
        }
    };
    let v4 = addrs.iter().filter(|a| a.is_ipv4()).filter(usable);
    let v6 = addrs.iter().filter(|a| a.is_ipv6()).filter(usable);
    let mut out: Vec<IpAddr> = Vec::new();
    for a in v4.chain(v6) {
        if !out.contains(a) {
            out.push(*a);
        }
    }
    out
}

/// The port of a device serving every address of its netdev: ACTIVE while
/// the link runs and has at least one address.
pub fn derive_all(link: Option<&LinkView>) -> PortView {
    match link {
        None => PortView {
            up: false,
            addrs: Vec::new(),
            mtu: None,
        },
        Some(l) => {
            let addrs = gid_addrs(l);
            PortView {
                up: l.running && !addrs.is_empty(),
                addrs,
                mtu: l.mtu,
            }
        }
    }
}

pub fn derive(served: IpAddr, link: Option<&LinkView>) -> PortView {
    match link {
        None => PortView {
            up: false,
            addrs: Vec::new(),
            mtu: None,
        },
        Some(l) => {
            let present = served_present(served, l);
            PortView {
                up: l.running && present,
                addrs: if present { vec![served] } else { Vec::new() },
                mtu: l.mtu,
            }
        }
    }
}

/// What a port update changed (see [`Port::apply`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortChange {
    pub went_up: bool,
    pub went_down: bool,
    /// The GID table (the port's addresses) changed.
    pub gids_changed: bool,
}

/// The device and its port 1 as the netdev makes them: the device's
/// facts, the attributes `ibv_query_port` reports, the active MTU, and
/// where the device tree is to be kept in step.
pub struct Port {
    facts: DeviceFacts,
    attr: PortAttr,
    /// Active MTU of port 1 (largest path MTU; UD payload limit).
    mtu: Mtu,
    /// The address the engine is bound to (the only GID it can serve,
    /// unless `all_addrs`).
    served: IpAddr,
    /// Serving every address of the netdev (engine on the wildcards).
    all_addrs: bool,
    /// The netdev's interface index (0 until first read).
    ifindex: u32,
    /// Where the device tree is, for port changes (None: not written).
    node: Option<NodeLoc>,
}

/// The port attributes and active MTU of the facts.
fn attr_and_mtu(facts: &DeviceFacts) -> (PortAttr, Mtu) {
    let attr = verbs::port_attr(facts);
    let mtu = Mtu::from_enum(attr.active_mtu)
        .or(Mtu::for_netdev_mtu(facts.netdev_mtu as usize))
        .unwrap_or(Mtu::M256);
    (attr, mtu)
}

impl Port {
    /// The port of a device serving `served` (not yet read from the
    /// netdev, not writing a device tree).
    pub fn new(facts: DeviceFacts, served: IpAddr) -> Port {
        let (attr, mtu) = attr_and_mtu(&facts);
        Port {
            facts,
            attr,
            mtu,
            served,
            all_addrs: false,
            ifindex: 0,
            node: None,
        }
    }

    pub fn facts(&self) -> &DeviceFacts {
        &self.facts
    }

    /// The ibdev name.
    pub fn name(&self) -> &str {
        &self.facts.name
    }

    pub fn netdev(&self) -> &str {
        &self.facts.netdev
    }

    /// The port's addresses (its GIDs).
    pub fn addrs(&self) -> &[IpAddr] {
        &self.facts.addrs
    }

    /// What `ibv_query_port` reports.
    pub fn attr(&self) -> &PortAttr {
        &self.attr
    }

    /// The active MTU.
    pub fn mtu(&self) -> Mtu {
        self.mtu
    }

    /// The address the engine is bound to.
    pub fn served(&self) -> IpAddr {
        self.served
    }

    pub fn all_addrs(&self) -> bool {
        self.all_addrs
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub(super) fn set_all_addrs(&mut self, all: bool) {
        self.all_addrs = all;
    }

    pub(super) fn set_node(&mut self, node: Option<NodeLoc>) {
        self.node = node;
    }

    /// Re-reads the netdev and applies what changed.
    pub fn refresh(&mut self) -> Option<PortChange> {
        let link = query_link(&self.facts.netdev);
        if let Some(l) = &link {
            self.ifindex = l.index;
        }
        let v = if self.all_addrs {
            derive_all(link.as_ref())
        } else {
            derive(self.served, link.as_ref())
        };
        self.apply(v)
    }

    /// Applies a derived port view (separate from the reading, for tests)
    /// to the attributes and the device tree; None if nothing changed.
    pub fn apply(&mut self, v: PortView) -> Option<PortChange> {
        let change = PortChange {
            went_up: v.up && !self.facts.port_up,
            went_down: !v.up && self.facts.port_up,
            gids_changed: v.addrs != self.facts.addrs,
        };
        let mtu = v
            .mtu
            .filter(|&m| m != self.facts.netdev_mtu && Mtu::for_netdev_mtu(m as usize).is_some());
        if change == PortChange::default() && mtu.is_none() {
            return None;
        }
        self.facts.port_up = v.up;
        self.facts.addrs = v.addrs;
        if let Some(m) = mtu {
            self.facts.netdev_mtu = m;
        }
        (self.attr, self.mtu) = attr_and_mtu(&self.facts);
        info!(
            "port 1 {} (netdev {}{}), GIDs [{}], active MTU {}",
            if v.up { "ACTIVE" } else { "DOWN" },
            self.facts.netdev,
            if self.facts.addrs.is_empty() && self.all_addrs {
                " without addresses".to_owned()
            } else if self.facts.addrs.is_empty() {
                format!(" without {}", self.served)
            } else {
                String::new()
            },
            self.facts
                .addrs
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            self.mtu.bytes()
        );
        self.sync_devnode();
        Some(change)
    }

    /// Writes the port's state, GIDs and MTU into the device tree, if the
    /// daemon knows where it is and it is there (`rxu up` publishes it
    /// after the daemon answers, and reconciles then).
    pub fn sync_devnode(&self) {
        let Some(loc) = &self.node else {
            return;
        };
        let node = match DevNode::open(&devnode::Paths::new(&loc.sysfs), loc.uverbs) {
            Ok(n) => n,
            Err(e) => {
                debug!("device tree not written: {e}");
                return;
            }
        };
        // The index may have been reused by another device since.
        if node.ibdev() != self.facts.name {
            debug!(
                "uverbs{} is {} now, not {}: tree not written",
                loc.uverbs,
                node.ibdev(),
                self.facts.name
            );
            return;
        }
        let state = if self.facts.port_up {
            PortState::Active
        } else {
            PortState::Down
        };
        let mtu = Mtu::for_netdev_mtu(self.facts.netdev_mtu as usize);
        let r = node
            .set_port_state(state)
            .and_then(|()| node.set_gids(&self.facts.addrs))
            .and_then(|()| mtu.map_or(Ok(()), |m| node.set_active_mtu(m)));
        if let Err(e) = r {
            warning!("device tree: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn link(running: bool, addrs: &[&str]) -> LinkView {
        LinkView {
            index: 5,
            running,
            loopback: false,
            addrs: addrs.iter().map(|a| ip(a)).collect(),
            mtu: Some(1500),
        }
    }

    #[test]
    fn port_follows_link_and_served_address() {
        let a = ip("10.9.0.1");
        let up = derive(a, Some(&link(true, &["10.9.0.1", "10.9.0.2"])));
        assert!(up.up);
        assert_eq!(up.addrs, vec![a], "only the served address is a GID");
        let down = derive(a, Some(&link(false, &["10.9.0.1"])));
        assert!(!down.up);
        assert_eq!(down.addrs, vec![a], "the GID stays while assigned");
        let gone = derive(a, Some(&link(true, &["10.9.0.2"])));
        assert!(!gone.up);
        assert!(gone.addrs.is_empty());
        let none = derive(a, None);
        assert!(!none.up && none.addrs.is_empty());
    }

    #[test]
    fn loopback_addresses_on_lo() {
        let mut lo = link(true, &["127.0.0.1", "::1"]);
        lo.loopback = true;
        assert!(derive(ip("127.0.5.9"), Some(&lo)).up);
        assert!(derive(ip("::1"), Some(&lo)).up);
        lo.addrs = vec![ip("::1")];
        assert!(!derive(ip("127.0.5.9"), Some(&lo)).up);
        // Not the loopback device: exact addresses only.
        let mut eth = link(true, &["127.0.0.1"]);
        eth.loopback = false;
        assert!(!derive(ip("127.0.5.9"), Some(&eth)).up);
    }

    #[test]
    fn all_addresses_of_the_netdev() {
        let l = link(
            true,
            &["fd00::5", "10.9.0.2", "fe80::1", "10.9.0.1", "10.9.0.2"],
        );
        let v = derive_all(Some(&l));
        assert!(v.up);
        assert_eq!(
            v.addrs,
            vec![ip("10.9.0.2"), ip("10.9.0.1"), ip("fd00::5")],
            "IPv4 first, no link-local, each once"
        );
        assert!(!derive_all(Some(&link(false, &["10.9.0.1"]))).up);
        let none = derive_all(Some(&link(true, &["fe80::1"])));
        assert!(!none.up && none.addrs.is_empty(), "no address left: DOWN");
        assert!(!derive_all(None).up);
    }
}
