//! The kernel's rtnetlink: a NETLINK_ROUTE socket subscribed to link and
//! IPv4/IPv6 address changes, in the daemon's epoll set. Messages only say
//! *that* the netdev changed; the port module then reads the netdev's
//! current state, so a lost message (ENOBUFS on overrun) costs nothing but
//! a re-read.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

// From <linux/rtnetlink.h> (the libc crate lacks some of them).
const RTMGRP_LINK: u32 = 0x1;
const RTMGRP_IPV4_IFADDR: u32 = 0x10;
const RTMGRP_IPV6_IFADDR: u32 = 0x100;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const IFLA_IFNAME: u16 = 3;

const NLMSG_HDRLEN: usize = 16;
/// `struct ifinfomsg` and `struct ifaddrmsg` are 16 and 8 bytes; both
/// carry the interface index at offset 4.
const IFINFOMSG_LEN: usize = 16;
const IFADDRMSG_LEN: usize = 8;
const RTA_HDRLEN: usize = 4;
/// Reads per wake-up (each returns one datagram of one or more messages).
const READS_PER_TURN: usize = 64;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Which interface a change concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A link appeared, changed or went: its index and, if the message
    /// named it, its name.
    Link { index: u32, name: Option<String> },
    /// An address was added to or removed from interface `index`.
    Addr { index: u32 },
}

impl Change {
    /// Whether it may concern the netdev `name` with index `index`.
    pub fn concerns(&self, index: u32, name: &str) -> bool {
        match self {
            Change::Link { index: i, name: n } => *i == index || n.as_deref() == Some(name),
            Change::Addr { index: i } => *i == index,
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// IFLA_IFNAME among a link message's attributes.
fn ifname(mut attrs: &[u8]) -> Option<String> {
    // Bounded: every step consumes at least RTA_HDRLEN bytes.
    while attrs.len() >= RTA_HDRLEN {
        let len = usize::from(u16_at(attrs, 0)?);
        let ty = u16_at(attrs, 2)? & 0x3fff;
        if len < RTA_HDRLEN || len > attrs.len() {
            return None;
        }
        if ty == IFLA_IFNAME {
            let v = &attrs[RTA_HDRLEN..len];
            let v = v.split(|&c| c == 0).next().unwrap_or(v);
            return std::str::from_utf8(v).ok().map(str::to_owned);
        }
        attrs = attrs.get(align4(len)..).unwrap_or(&[]);
    }
    None
}

/// The changes one datagram reports; malformed parts are skipped (the
/// kernel is trusted to be sane, but nothing here can panic).
pub fn parse(mut buf: &[u8]) -> Vec<Change> {
    let mut out = Vec::new();
    // Bounded: every step consumes at least NLMSG_HDRLEN bytes.
    while buf.len() >= NLMSG_HDRLEN {
        let Some(len) = u32_at(buf, 0).and_then(|l| usize::try_from(l).ok()) else {
            break;
        };
        let Some(ty) = u16_at(buf, 4) else {
            break;
        };
        if len < NLMSG_HDRLEN || len > buf.len() {
            break;
        }
        let body = &buf[NLMSG_HDRLEN..len];
        match ty {
            RTM_NEWLINK | RTM_DELLINK if body.len() >= IFINFOMSG_LEN => {
                if let Some(index) = u32_at(body, 4) {
                    out.push(Change::Link {
                        index,
                        name: ifname(&body[IFINFOMSG_LEN..]),
                    });
                }
            }
            RTM_NEWADDR | RTM_DELADDR if body.len() >= IFADDRMSG_LEN => {
                if let Some(index) = u32_at(body, 4) {
                    out.push(Change::Addr { index });
                }
            }
            _ => {}
        }
        buf = buf.get(align4(len)..).unwrap_or(&[]);
    }
    out
}

/// A non-blocking NETLINK_ROUTE socket in the link and address groups.
pub fn open() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; returns a new fd or -1.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket; we own it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain data; zero is a valid value.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
    // SAFETY: sa is a valid sockaddr_nl of the given size.
    let r = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// What a drained socket reported.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Drained {
    pub changes: Vec<Change>,
    /// Messages were lost (ENOBUFS): everything may have changed.
    pub overrun: bool,
}

/// Reads what is queued (a bounded number of datagrams).
pub fn drain(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Drained {
    let mut d = Drained::default();
    for _ in 0..READS_PER_TURN {
        // SAFETY: buf is valid for buf.len() bytes for the call.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::ENOBUFS) => {
                    d.overrun = true;
                    continue;
                }
                Some(libc::EINTR) => continue,
                _ => break,
            }
        }
        if n == 0 {
            break;
        }
        d.changes.extend(parse(&buf[..n as usize]));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ty: u16, body: &[u8]) -> Vec<u8> {
        let len = (NLMSG_HDRLEN + body.len()) as u32;
        let mut m = Vec::new();
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&[0u8; 10]);
        m.extend_from_slice(body);
        while !m.len().is_multiple_of(4) {
            m.push(0);
        }
        m
    }

    fn link_body(index: u32, name: Option<&str>) -> Vec<u8> {
        let mut b = vec![0u8; IFINFOMSG_LEN];
        b[4..8].copy_from_slice(&index.to_ne_bytes());
        // An unrelated attribute first (IFLA_MTU).
        b.extend_from_slice(&8u16.to_ne_bytes());
        b.extend_from_slice(&4u16.to_ne_bytes());
        b.extend_from_slice(&1500u32.to_ne_bytes());
        if let Some(n) = name {
            let len = (RTA_HDRLEN + n.len() + 1) as u16;
            b.extend_from_slice(&len.to_ne_bytes());
            b.extend_from_slice(&IFLA_IFNAME.to_ne_bytes());
            b.extend_from_slice(n.as_bytes());
            b.push(0);
            while !b.len().is_multiple_of(4) {
                b.push(0);
            }
        }
        b
    }

    #[test]
    fn links_and_addresses() {
        let mut dgram = msg(RTM_NEWLINK, &link_body(7, Some("veth0")));
        let mut addr = vec![0u8; IFADDRMSG_LEN];
        addr[4..8].copy_from_slice(&9u32.to_ne_bytes());
        dgram.extend(msg(RTM_DELADDR, &addr));
        dgram.extend(msg(3, &[1, 2, 3, 4])); // NLMSG_DONE: ignored
        dgram.extend(msg(RTM_DELLINK, &link_body(8, None)));
        let c = parse(&dgram);
        assert_eq!(
            c,
            vec![
                Change::Link {
                    index: 7,
                    name: Some("veth0".into())
                },
                Change::Addr { index: 9 },
                Change::Link {
                    index: 8,
                    name: None
                },
            ]
        );
        assert!(c[0].concerns(7, "x") && c[0].concerns(1, "veth0"));
        assert!(!c[0].concerns(1, "lo"));
        assert!(c[1].concerns(9, "lo") && !c[1].concerns(7, "veth0"));
    }

    #[test]
    fn garbage_never_panics() {
        let good = msg(RTM_NEWLINK, &link_body(7, Some("eth0")));
        for cut in 0..good.len() {
            let _ = parse(&good[..cut]);
        }
        let mut x: u32 = 0x1234_5678;
        for _ in 0..2000 {
            let mut b = vec![0u8; (x % 97) as usize];
            for v in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *v = x as u8;
            }
            if b.len() >= 6 {
                b[4] = (16 + x % 6) as u8;
                b[5] = 0;
            }
            let _ = parse(&b);
        }
        // A length field larger than the datagram stops the walk.
        let mut bad = good.clone();
        bad[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(parse(&bad).is_empty());
    }

    #[test]
    fn the_socket_opens_and_drains_empty() {
        let s = open().expect("NETLINK_ROUTE");
        let mut buf = vec![0u8; 8192];
        let d = drain(std::os::fd::AsFd::as_fd(&s), &mut buf);
        assert!(!d.overrun);
    }
}
