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
//! Every change is applied to the device's attributes (query_port), to the
//! device tree (ports/1/state, gids, ndevs, rxu/active_mtu) and announced
//! to every open context as IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE and
//! IBV_EVENT_GID_CHANGE (a port going down says so before its GID goes; a
//! port coming up lists its GID before it says so).

use std::net::IpAddr;
use std::path::PathBuf;

use transport::qp::Mtu;

use crate::devnode::{self, DevNode, PortState};
use crate::verbs;

use super::device::Device;
use super::log::{debug, info, warning};
use super::session::event;

/// Where the device tree of this device lives (written by `rxu up`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLoc {
    /// The SYSFS_PATH root.
    pub sysfs: PathBuf,
    /// N of uverbsN.
    pub uverbs: u32,
}

/// The netdev as the kernel reports it now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkView {
    pub index: u32,
    /// IFF_UP and IFF_RUNNING.
    pub running: bool,
    pub loopback: bool,
    pub addrs: Vec<IpAddr>,
    pub mtu: Option<u32>,
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

/// The netdev `name` now (None if it does not exist).
pub fn query_link(name: &str) -> Option<LinkView> {
    let cname = std::ffi::CString::new(name).ok()?;
    // SAFETY: cname is a valid NUL-terminated string for the call.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return None;
    }
    let mut view = LinkView {
        index,
        mtu: mtu_of(&cname),
        ..LinkView::default()
    };
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut p = head;
    // Bounded by the kernel's interface list.
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned, alive until
        // freeifaddrs below; ifa_name is NUL-terminated; ifa_addr is null
        // or points at a sockaddr of its family.
        unsafe {
            let ifa = &*p;
            if std::ffi::CStr::from_ptr(ifa.ifa_name) == cname.as_c_str() {
                let f = ifa.ifa_flags;
                view.running = f & libc::IFF_UP as u32 != 0 && f & libc::IFF_RUNNING as u32 != 0;
                view.loopback = f & libc::IFF_LOOPBACK as u32 != 0;
                if !ifa.ifa_addr.is_null() {
                    match i32::from((*ifa.ifa_addr).sa_family) {
                        libc::AF_INET => {
                            let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                            view.addrs
                                .push(IpAddr::from(sin.sin_addr.s_addr.to_ne_bytes()));
                        }
                        libc::AF_INET6 => {
                            let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                            view.addrs.push(IpAddr::from(sin6.sin6_addr.s6_addr));
                        }
                        _ => {}
                    }
                }
            }
            p = ifa.ifa_next;
        }
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Some(view)
}

fn mtu_of(name: &std::ffi::CStr) -> Option<u32> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: ifreq is plain data; zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.to_bytes();
    if bytes.len() >= ifr.ifr_name.len() {
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        return None;
    }
    for (d, &s) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads ifr_name and writes ifr_ifru.ifru_mtu of
    // the ifreq we own; fd is open.
    let r = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut ifr) };
    // SAFETY: fd is ours, closed once.
    unsafe { libc::close(fd) };
    if r != 0 {
        return None;
    }
    // SAFETY: the ioctl succeeded, so the union holds the MTU.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).ok()
}

impl Device {
    /// Re-reads the netdev and applies what changed; with `notify`, every
    /// open context hears of it. Returns whether anything changed.
    pub fn refresh_port(&mut self, notify: bool) -> bool {
        let link = query_link(&self.facts.netdev);
        if let Some(l) = &link {
            self.ifindex = l.index;
        }
        let v = if self.all_addrs {
            derive_all(link.as_ref())
        } else {
            derive(self.served, link.as_ref())
        };
        self.apply_port(v, notify)
    }

    /// Applies a derived port view (separate from the reading, for tests).
    pub fn apply_port(&mut self, v: PortView, notify: bool) -> bool {
        let went_up = v.up && !self.facts.port_up;
        let went_down = !v.up && self.facts.port_up;
        let gids_changed = v.addrs != self.facts.addrs;
        let mtu = v
            .mtu
            .filter(|&m| m != self.facts.netdev_mtu && Mtu::for_netdev_mtu(m as usize).is_some());
        if !went_up && !went_down && !gids_changed && mtu.is_none() {
            return false;
        }
        self.facts.port_up = v.up;
        self.facts.addrs = v.addrs;
        if self.all_addrs {
            // Packets to an address that is no GID (any more) are not ours.
            self.engine.set_local_addrs(Some(&self.facts.addrs));
        }
        if let Some(m) = mtu {
            self.facts.netdev_mtu = m;
        }
        self.port_attr = verbs::port_attr(&self.facts);
        self.port_mtu = Mtu::from_enum(self.port_attr.active_mtu)
            .or(Mtu::for_netdev_mtu(self.facts.netdev_mtu as usize))
            .unwrap_or(Mtu::M256);
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
            self.port_mtu.bytes()
        );
        self.sync_devnode();
        if went_up || went_down {
            self.counters.port_changes += 1;
        }
        if gids_changed {
            self.counters.gid_changes += 1;
        }
        if notify {
            if went_down {
                self.port_event(event::PORT_ERR);
            }
            if gids_changed {
                self.port_event(event::GID_CHANGE);
            }
            if went_up {
                self.port_event(event::PORT_ACTIVE);
            }
        }
        true
    }

    /// One port event (element: port number 1) to every open context.
    fn port_event(&mut self, ty: u32) {
        for s in self.sessions.values_mut() {
            if !s.ready || s.admin {
                continue;
            }
            if s.send_event(1, ty) {
                self.counters.async_events += 1;
            } else {
                self.counters.async_events_dropped += 1;
            }
        }
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

    #[test]
    fn lo_is_readable() {
        let l = query_link("lo").expect("lo exists");
        assert!(l.loopback);
        assert!(l.index > 0);
        assert!(l.mtu.is_some());
        assert!(query_link("rxu-no-such-if").is_none());
    }
}
