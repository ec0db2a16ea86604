//! Network interfaces as `rxu up` needs them: each netdev's addresses
//! (getifaddrs), its MTU, MAC and up/down state (/sys/class/net), and
//! whether a UDP port is free on an address. Nothing here sends a packet.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::path::PathBuf;

/// One netdev and its IP addresses, in the order the kernel lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub index: u32,
    /// IFF_* flags.
    pub flags: u32,
    pub addrs: Vec<IpAddr>,
}

impl Iface {
    pub fn is_loopback(&self) -> bool {
        self.flags & libc::IFF_LOOPBACK as u32 != 0
    }

    pub fn is_up(&self) -> bool {
        self.flags & libc::IFF_UP as u32 != 0
    }

    /// Up and operational (carrier on): what ibdev2netdev calls "Up", and
    /// what rxud requires for an ACTIVE port.
    pub fn is_running(&self) -> bool {
        self.is_up() && self.flags & libc::IFF_RUNNING as u32 != 0
    }

    /// The address that becomes GID 0 (and that rxud is started on): the
    /// first IPv4 address, else the first IPv6 one that is not link-local.
    pub fn primary_addr(&self) -> Option<IpAddr> {
        let v4 = self.addrs.iter().find(|a| a.is_ipv4());
        let v6 = self.addrs.iter().find(|a| match a {
            IpAddr::V6(v6) => !is_link_local(v6),
            IpAddr::V4(_) => false,
        });
        v4.or(v6).or(self.addrs.first()).copied()
    }
}

pub fn is_link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// Every interface with its addresses (interfaces without any are listed
/// too, from their AF_PACKET entry).
pub fn interfaces() -> io::Result<Vec<Iface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out: Vec<Iface> = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive
        // until freeifaddrs; its name is a NUL-terminated string and
        // ifa_addr, when not null, points at a sockaddr of the family it
        // names (sockaddr_in for AF_INET, sockaddr_in6 for AF_INET6).
        let (name, flags, addr, next) = unsafe {
            let ifa = &*cur;
            let name = std::ffi::CStr::from_ptr(ifa.ifa_name)
                .to_string_lossy()
                .into_owned();
            let addr = if ifa.ifa_addr.is_null() {
                None
            } else {
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))))
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
                    }
                    _ => None,
                }
            };
            (name, ifa.ifa_flags, addr, ifa.ifa_next)
        };
        let i = match out.iter().position(|i| i.name == name) {
            Some(i) => i,
            None => {
                out.push(Iface {
                    index: if_index(&name),
                    name,
                    flags,
                    addrs: Vec::new(),
                });
                out.len() - 1
            }
        };
        if let Some(a) = addr {
            if !out[i].addrs.contains(&a) {
                out[i].addrs.push(a);
            }
        }
        cur = next;
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

fn if_index(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: `c` is a valid NUL-terminated string for the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// The interface an address belongs to: the one it is assigned to, or for
/// any 127.0.0.0/8 address (all local on Linux, though only 127.0.0.1 is
/// listed) the loopback interface. None: the address is not on this host.
pub fn iface_of(ifaces: &[Iface], addr: IpAddr) -> Option<&Iface> {
    let addr = canonical(addr);
    ifaces
        .iter()
        .find(|i| i.addrs.contains(&addr))
        .or_else(|| match addr {
            IpAddr::V4(v4) if v4.is_loopback() => ifaces.iter().find(|i| i.is_loopback()),
            _ => None,
        })
}

/// `::ffff:a.b.c.d` is the IPv4 address a.b.c.d.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

fn sys_class_net(name: &str, file: &str) -> PathBuf {
    // The real sysfs: SYSFS_PATH is libibverbs' business, not ours.
    PathBuf::from("/sys/class/net").join(name).join(file)
}

/// The netdev's MTU in bytes.
pub fn mtu(name: &str) -> io::Result<u32> {
    let s = std::fs::read_to_string(sys_class_net(name, "mtu"))?;
    s.trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("mtu {s:?}")))
}

/// The netdev's operstate ("up", "down", "unknown" for lo, ...).
pub fn operstate(name: &str) -> Option<String> {
    let s = std::fs::read_to_string(sys_class_net(name, "operstate")).ok()?;
    Some(s.trim().to_owned())
}

/// The netdev's MAC address; None when it has none or it is all zero
/// (loopback).
pub fn mac(name: &str) -> Option<[u8; 6]> {
    let s = std::fs::read_to_string(sys_class_net(name, "address")).ok()?;
    parse_mac(s.trim()).filter(|m| *m != [0; 6])
}

pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Binds (and at once releases) a UDP socket on `addr:port`, the way rxud
/// will. EADDRINUSE means someone owns the port; EADDRNOTAVAIL that the
/// address is not local. `scope` is the interface index link-local IPv6
/// addresses need.
pub fn test_bind_udp(addr: IpAddr, port: u16, scope: u32) -> io::Result<()> {
    let sa = match addr {
        IpAddr::V6(v6) if is_link_local(&v6) => {
            SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope))
        }
        a => SocketAddr::new(a, port),
    };
    UdpSocket::bind(sa).map(drop)
}

/// Whether a device serving every address of `netdev` could bind: UDP
/// `port` on 0.0.0.0 and [::] (IPv6 only), each tied to the netdev, as
/// rxud's engine binds them. A specific address on the same netdev taken
/// without the netdev conflicts; a wildcard tied to another netdev not.
pub fn test_bind_udp_dev(v6: bool, port: u16, netdev: &str) -> io::Result<()> {
    use socket2::{Domain, Protocol, Socket, Type};
    let (domain, any) = if v6 {
        (Domain::IPV6, IpAddr::V6(Ipv6Addr::UNSPECIFIED))
    } else {
        (Domain::IPV4, IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if v6 {
        s.set_only_v6(true)?;
    }
    s.bind_device(Some(netdev.as_bytes()))?;
    s.bind(&SocketAddr::new(any, port).into())
}

/// Whether the kernel's Soft-RoCE module is loaded (it binds UDP 4791 on
/// every address).
pub fn rdma_rxe_loaded() -> bool {
    std::path::Path::new("/sys/module/rdma_rxe").exists()
        || std::fs::read_to_string("/proc/modules")
            .map(|m| m.lines().any(|l| l.starts_with("rdma_rxe ")))
            .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed_with_its_address() {
        let ifs = interfaces().unwrap();
        let lo = ifs
            .iter()
            .find(|i| i.is_loopback())
            .expect("a loopback netdev");
        assert!(lo.addrs.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert!(lo.index > 0);
        assert_eq!(lo.primary_addr(), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert!(mtu(&lo.name).unwrap() >= 1280);
        assert_eq!(mac(&lo.name), None);
    }

    #[test]
    fn any_127_address_is_on_loopback_and_documentation_addresses_are_not() {
        let ifs = interfaces().unwrap();
        let a: IpAddr = "127.0.3.9".parse().unwrap();
        assert!(iface_of(&ifs, a).unwrap().is_loopback());
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert!(iface_of(&ifs, mapped).unwrap().is_loopback());
        assert!(iface_of(&ifs, "192.0.2.123".parse().unwrap()).is_none());
        assert!(iface_of(&ifs, "2001:db8::77".parse().unwrap()).is_none());
    }

    #[test]
    fn primary_address_prefers_ipv4_then_global_ipv6() {
        let mut i = Iface {
            name: "x".into(),
            index: 1,
            flags: 0,
            addrs: vec!["fe80::1".parse().unwrap(), "fd00::2".parse().unwrap()],
        };
        assert_eq!(i.primary_addr(), Some("fd00::2".parse().unwrap()));
        i.addrs.push("10.1.2.3".parse().unwrap());
        assert_eq!(i.primary_addr(), Some("10.1.2.3".parse().unwrap()));
        i.addrs.clear();
        assert_eq!(i.primary_addr(), None);
    }

    #[test]
    fn macs_parse() {
        assert_eq!(
            parse_mac("00:11:22:aa:bb:cc"),
            Some([0, 0x11, 0x22, 0xaa, 0xbb, 0xcc])
        );
        assert_eq!(parse_mac("00:11:22:aa:bb"), None);
        assert_eq!(parse_mac("00:11:22:aa:bb:cc:dd"), None);
        assert_eq!(parse_mac("zz:11:22:aa:bb:cc"), None);
    }

    #[test]
    fn a_bound_port_is_seen_taken() {
        let held = UdpSocket::bind("127.0.3.250:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let e = test_bind_udp("127.0.3.250".parse().unwrap(), port, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        drop(held);
        test_bind_udp("127.0.3.250".parse().unwrap(), port, 0).unwrap();
    }

    /// What a `--netdev lo` device (wildcards tied to lo) and an `--addr`
    /// device on 127.0.0.x mean to each other: they conflict on one port
    /// (Linux UDP binding without SO_REUSEADDR: a wildcard tied to a device
    /// overlaps an address bound without one), whichever comes first, and
    /// `rxu up` says so before starting rxud. Wildcards tied to different
    /// netdevs do not conflict.
    #[test]
    fn netdev_wildcards_and_specific_addresses() {
        let held = UdpSocket::bind("127.0.3.251:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let e = test_bind_udp_dev(false, port, "lo").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        drop(held);
        // A wildcard tied to lo, held as rxud would.
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        if s.bind_device(Some(b"lo")).is_err() {
            eprintln!("skipped: SO_BINDTODEVICE not permitted");
            return;
        }
        s.bind(&SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port).into())
            .unwrap();
        let e = test_bind_udp("127.0.3.251".parse().unwrap(), port, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        // Another netdev's wildcard binds beside it.
        let other = interfaces()
            .unwrap()
            .into_iter()
            .find(|i| !i.is_loopback())
            .map(|i| i.name);
        if let Some(other) = other {
            test_bind_udp_dev(false, port, &other).unwrap();
        }
    }
}
