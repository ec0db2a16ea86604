//! The engine's system calls: batched UDP receive and send (recvmmsg /
//! sendmmsg with control messages), socket options socket2 does not cover,
//! and waiting on file descriptors. Every `unsafe` block of the engine is
//! in this module. Public so that the benchmark's raw-UDP baseline uses
//! exactly the same I/O path as the engine.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::time::Duration;

/// Largest batch one system call moves.
pub const MAX_BATCH: usize = 64;

// Socket options by value (as in <linux/udp.h>), so the build does not
// depend on which of them a libc version exports.
const UDP_NO_CHECK6_TX: libc::c_int = 101;
const UDP_NO_CHECK6_RX: libc::c_int = 102;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
// <linux/in6.h>: receive each datagram's flow information; and whether
// the kernel picks a flow label for what this socket sends.
const IPV6_FLOWINFO: libc::c_int = 11;
const IPV6_AUTOFLOWLABEL: libc::c_int = 70;
/// The flow label bits of the IPV6_FLOWINFO word (traffic class above).
const FLOW_LABEL_MASK: u32 = 0xF_FFFF;

/// Control message room per datagram: pktinfo, TOS, TTL, flow info, GRO
/// size (IPv6: 40 + 24 * 4 bytes).
const CMSG_ROOM: usize = 160;

#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct CmsgBuf([u8; CMSG_ROOM]);

/// What the kernel said about one received datagram.
#[derive(Clone, Copy, Debug)]
pub struct RecvInfo {
    pub len: usize,
    /// The datagram did not fit its slot.
    pub truncated: bool,
    pub src: SocketAddr,
    /// Destination address from IP_PKTINFO / IPV6_PKTINFO.
    pub dst: Option<IpAddr>,
    pub tos: Option<u8>,
    pub ttl: Option<u8>,
    /// IPv6 flow label from IPV6_FLOWINFO.
    pub flow_label: Option<u32>,
    /// UDP GRO: the datagram holds segments of this size (the last may be
    /// shorter).
    pub gro_size: Option<u16>,
    /// Which segment of a GRO datagram this is (set by the caller that
    /// splits it; 0 otherwise).
    pub seg: u16,
}

impl Default for RecvInfo {
    fn default() -> Self {
        RecvInfo {
            len: 0,
            truncated: false,
            src: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            dst: None,
            tos: None,
            ttl: None,
            flow_label: None,
            gro_size: None,
            seg: 0,
        }
    }
}

/// One datagram to send: slots `first .. first + nseg`, each holding one
/// RoCE packet. With `nseg > 1` it goes as one UDP GSO send whose segments
/// are the slots (all `seg` bytes long but the last, which may be shorter).
#[derive(Clone, Copy, Debug)]
pub struct SendItem {
    pub first: usize,
    pub nseg: usize,
    /// Length of each segment but the last.
    pub seg: usize,
    /// Bytes in all segments.
    pub len: usize,
    pub dst: SocketAddr,
    /// Source address to use (IP_PKTINFO), for wildcard-bound sockets.
    pub src: Option<IpAddr>,
}

/// Most segments one GSO send carries (the kernel allows 64 or more).
pub const MAX_GSO_SEGS: usize = 64;
/// Most bytes one UDP datagram (or GSO send) carries.
pub const MAX_UDP_PAYLOAD: usize = 65507;
/// Most packet slots a [`SendBufs`] has.
pub const MAX_SLOTS: usize = 1024;

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `v` lives for the duration of the call and its size is passed;
    // the kernel only reads it. A bad fd or option yields an error, not UB.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// IP_MTU_DISCOVER / IPV6_MTU_DISCOVER = PMTUDISC_DO (DF set, never
/// fragment). On IPv4 an unconnected DF socket sends IP ID 0.
pub fn set_pmtudisc_do(fd: RawFd, v6: bool) -> io::Result<()> {
    if v6 {
        setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
    } else {
        setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
    }
}

/// IPv6: send flow label 0, as rxe does (`ip6_flow_hdr(.., 0)`), instead of
/// one the kernel derives from the flow hash.
pub fn set_no_auto_flowlabel(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_IPV6, IPV6_AUTOFLOWLABEL, 0)
}

/// IPv6: accept and send a zero UDP checksum, as rxe's tunnel socket does.
pub fn set_no_check6(fd: RawFd, tx: bool, rx: bool) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_UDP, UDP_NO_CHECK6_TX, libc::c_int::from(tx))?;
    setsockopt_int(fd, libc::SOL_UDP, UDP_NO_CHECK6_RX, libc::c_int::from(rx))
}

/// Ask for the destination address of each datagram.
pub fn set_recv_pktinfo(fd: RawFd, v6: bool) -> io::Result<()> {
    if v6 {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)
    }
}

/// Ask for TOS / traffic class and TTL / hop limit of each datagram, and
/// on IPv6 its flow label: the IP header fields a UD receive's GRH area
/// shows.
pub fn set_recv_tos_ttl(fd: RawFd, v6: bool) -> io::Result<()> {
    if v6 {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)?;
        setsockopt_int(fd, libc::IPPROTO_IPV6, IPV6_FLOWINFO, 1)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)
    }
}

/// `struct ip_mreqn` options (IP_ADD_MEMBERSHIP, IP_DROP_MEMBERSHIP,
/// IP_MULTICAST_IF): `group` (unspecified for IP_MULTICAST_IF), the
/// interface by its address and/or index (0: by address).
fn set_mreqn(
    fd: RawFd,
    name: libc::c_int,
    group: Ipv4Addr,
    iface: Ipv4Addr,
    ifindex: u32,
) -> io::Result<()> {
    let m = libc::ip_mreqn {
        imr_multiaddr: libc::in_addr {
            s_addr: u32::from_ne_bytes(group.octets()),
        },
        imr_address: libc::in_addr {
            s_addr: u32::from_ne_bytes(iface.octets()),
        },
        imr_ifindex: ifindex as libc::c_int,
    };
    // SAFETY: `m` lives for the duration of the call and its size is
    // passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            name,
            (&m as *const libc::ip_mreqn).cast(),
            size_of::<libc::ip_mreqn>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The interface a device's multicast goes through: its address (a
/// specific binding) or its index (a netdev binding), as `ip_mreqn` has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McastIf {
    pub addr: Ipv4Addr,
    pub ifindex: u32,
}

/// Joins (`join`) or leaves IPv4 multicast `group` on the interface.
pub fn set_membership(fd: RawFd, group: Ipv4Addr, via: McastIf, join: bool) -> io::Result<()> {
    let name = if join {
        libc::IP_ADD_MEMBERSHIP
    } else {
        libc::IP_DROP_MEMBERSHIP
    };
    set_mreqn(fd, name, group, via.addr, via.ifindex)
}

/// The sending side of IPv4 multicast: out through the interface, looped
/// back to local members (other devices and processes of this host), with
/// TTL `ttl`; and receive only the groups this socket joined (not every
/// group someone on the host joined, the default).
pub fn set_multicast_send(fd: RawFd, via: McastIf, ttl: u8) -> io::Result<()> {
    set_mreqn(
        fd,
        libc::IP_MULTICAST_IF,
        Ipv4Addr::UNSPECIFIED,
        via.addr,
        via.ifindex,
    )?;
    setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP, 1)?;
    setsockopt_int(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MULTICAST_TTL,
        libc::c_int::from(ttl),
    )?;
    set_multicast_all(fd, false)
}

/// IP_MULTICAST_ALL: whether a socket bound to the group's port receives
/// groups it did not join itself.
pub fn set_multicast_all(fd: RawFd, on: bool) -> io::Result<()> {
    setsockopt_int(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MULTICAST_ALL,
        libc::c_int::from(on),
    )
}

/// SO_REUSEADDR: several sockets of the host (devices, processes) bind
/// one group and port, each receiving a copy.
pub fn set_reuseaddr(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
}

/// The index of a network interface (0 if there is none of that name).
pub fn if_index(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// UDP GRO on receive.
pub fn set_udp_gro(fd: RawFd, on: bool) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, libc::c_int::from(on))
}

/// Probes whether the kernel accepts UDP_SEGMENT on this socket (sets a
/// socket-wide segment size of 0, i.e. none, which changes nothing).
pub fn probe_udp_segment(fd: RawFd) -> bool {
    setsockopt_int(fd, libc::SOL_UDP, UDP_SEGMENT, 0).is_ok()
}

/// Forces the socket buffers to `bytes` (needs CAP_NET_ADMIN; falls back to
/// the ordinary, capped options).
pub fn set_buffers(fd: RawFd, bytes: usize) {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if setsockopt_int(fd, libc::SOL_SOCKET, force, v).is_err() {
            let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, v);
        }
    }
}

/// Bytes queued for reading on the socket and its receive buffer size
/// (`SO_MEMINFO`: SK_MEMINFO_RMEM_ALLOC and SK_MEMINFO_RCVBUF, the figures
/// the kernel compares when it drops a datagram for lack of room).
pub fn rx_queue(fd: RawFd) -> io::Result<(u32, u32)> {
    let mut m = [0u32; 9];
    let mut len = std::mem::size_of_val(&m) as libc::socklen_t;
    // SAFETY: `m` is writable for `len` bytes and outlives the call; the
    // kernel writes at most `len` bytes and stores the length it wrote.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            m.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < 2 * std::mem::size_of::<u32>() {
        return Err(io::Error::from(io::ErrorKind::InvalidData));
    }
    Ok((m[0], m[1]))
}

/// The TTL (IPv4) or hop limit (IPv6) the socket's unicast datagrams
/// leave with (the system default unless set).
pub fn unicast_hops(fd: RawFd, v6: bool) -> io::Result<u8> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TTL)
    };
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` is writable for `len` bytes and outlives the call; the
    // kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    u8::try_from(v).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

fn to_sockaddr(addr: &SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned
            // for sockaddr_in; we write one whole sockaddr_in at its start.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6;
            // we write one whole sockaddr_in6 at its start.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

fn from_sockaddr(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, and
            // sockaddr_storage is aligned for it; read_unaligned avoids any
            // alignment assumption anyway.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read_unaligned((s as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family and length say the storage holds a whole
            // sockaddr_in6; read_unaligned makes no alignment assumption.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read_unaligned((s as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Preallocated receive state: `n` slots of `slot` bytes each and a
/// control-message buffer per slot.
pub struct RecvBufs {
    pub data: Vec<u8>,
    pub slot: usize,
    cmsg: Vec<CmsgBuf>,
    names: Vec<libc::sockaddr_storage>,
    pub info: Vec<RecvInfo>,
}

// SAFETY: RecvBufs owns plain byte buffers and C structs without pointers
// (sockaddr_storage holds no pointers); nothing in it refers to thread-local
// state.
unsafe impl Send for RecvBufs {}

impl RecvBufs {
    pub fn new(n: usize, slot: usize) -> RecvBufs {
        let n = n.clamp(1, MAX_BATCH);
        RecvBufs {
            data: vec![0; n * slot],
            slot,
            cmsg: vec![CmsgBuf([0; CMSG_ROOM]); n],
            // SAFETY: sockaddr_storage is plain data; all-zero is valid.
            names: vec![unsafe { zeroed::<libc::sockaddr_storage>() }; n],
            info: vec![RecvInfo::default(); n],
        }
    }

    pub fn capacity(&self) -> usize {
        self.info.len()
    }

    /// Receives up to `capacity()` datagrams without blocking; returns how
    /// many arrived (0 if none were waiting).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.capacity();
        // SAFETY: mmsghdr and iovec are plain C structs; zero is valid.
        let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: iovec is a plain C struct; all-zero (null, 0) is valid.
        let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
        let base = self.data.as_mut_ptr();
        for i in 0..n {
            // SAFETY: i * slot + slot <= data.len() by construction, so the
            // pointer stays inside the allocation.
            iovs[i].iov_base = unsafe { base.add(i * self.slot) }.cast();
            iovs[i].iov_len = self.slot;
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.cmsg[i].0.as_mut_ptr().cast();
            h.msg_controllen = CMSG_ROOM as _;
        }
        // SAFETY: every header points at buffers owned by `self` or by this
        // stack frame (iovs), all of which outlive the call, with their true
        // lengths; the kernel writes at most those lengths.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let got = r as usize;
        for (i, h) in hdrs.iter().enumerate().take(got) {
            let mut info = RecvInfo {
                len: h.msg_len as usize,
                truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                ..RecvInfo::default()
            };
            match from_sockaddr(&self.names[i], h.msg_hdr.msg_namelen) {
                Some(a) => info.src = a,
                None => info.truncated = true,
            }
            parse_cmsgs(&h.msg_hdr, &mut info);
            self.info[i] = info;
        }
        Ok(got)
    }
}

fn parse_cmsgs(h: &libc::msghdr, info: &mut RecvInfo) {
    if h.msg_controllen == 0 || h.msg_control.is_null() {
        return;
    }
    // SAFETY: `h` is a msghdr the kernel just filled: msg_control points at
    // our CmsgBuf and msg_controllen says how much of it is valid, which is
    // exactly what the CMSG_* macros walk.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(h) };
    while !c.is_null() {
        // SAFETY: CMSG_FIRSTHDR/NXTHDR return either null or a pointer to a
        // complete cmsghdr inside the control buffer.
        let cm = unsafe { &*c };
        // SAFETY: CMSG_DATA points just past the header, inside the buffer;
        // each read below checks cmsg_len covers the value's size first.
        let data = unsafe { libc::CMSG_DATA(c) };
        let have = (cm.cmsg_len as usize).saturating_sub(data as usize - c as usize);
        let rd_int = |d: *const u8| -> Option<i32> {
            if have >= 4 {
                // SAFETY: `have` bytes are valid at `d`.
                Some(unsafe { std::ptr::read_unaligned(d.cast::<i32>()) })
            } else if have >= 1 {
                // SAFETY: at least one byte is valid at `d`.
                Some(i32::from(unsafe { *d }))
            } else {
                None
            }
        };
        match (cm.cmsg_level, cm.cmsg_type) {
            (libc::IPPROTO_IP, libc::IP_PKTINFO) if have >= size_of::<libc::in_pktinfo>() => {
                // SAFETY: the length check above guarantees a whole in_pktinfo.
                let p: libc::in_pktinfo = unsafe { std::ptr::read_unaligned(data.cast()) };
                info.dst = Some(IpAddr::V4(Ipv4Addr::from(p.ipi_addr.s_addr.to_ne_bytes())));
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) if have >= size_of::<libc::in6_pktinfo>() => {
                // SAFETY: the length check above guarantees a whole in6_pktinfo.
                let p: libc::in6_pktinfo = unsafe { std::ptr::read_unaligned(data.cast()) };
                info.dst = Some(IpAddr::V6(Ipv6Addr::from(p.ipi6_addr.s6_addr)));
            }
            // IP_RECVTOS delivers IP_TOS with one byte.
            (libc::IPPROTO_IP, libc::IP_TOS) if have >= 1 => {
                // SAFETY: at least one byte is valid.
                info.tos = Some(unsafe { *data });
            }
            (libc::IPPROTO_IP, libc::IP_TTL) => {
                info.ttl = rd_int(data).map(|v| v as u8);
            }
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                info.tos = rd_int(data).map(|v| v as u8);
            }
            (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                info.ttl = rd_int(data).map(|v| v as u8);
            }
            // A __be32: traffic class and flow label, version masked off.
            (libc::IPPROTO_IPV6, IPV6_FLOWINFO) if have >= 4 => {
                // SAFETY: the length check above guarantees four bytes.
                let w: [u8; 4] = unsafe { std::ptr::read_unaligned(data.cast()) };
                info.flow_label = Some(u32::from_be_bytes(w) & FLOW_LABEL_MASK);
            }
            (libc::SOL_UDP, UDP_GRO) => {
                info.gro_size = rd_int(data)
                    .and_then(|v| u16::try_from(v).ok())
                    .filter(|&v| v > 0);
            }
            _ => {}
        }
        // SAFETY: `h` is the msghdr the kernel filled and `c` a header inside
        // its control buffer (from CMSG_FIRSTHDR / CMSG_NXTHDR), as the macro needs.
        c = unsafe { libc::CMSG_NXTHDR(h, c) };
    }
}

/// Preallocated send state: packet slots of `slot` bytes and up to
/// `max_items` datagrams per sendmmsg.
pub struct SendBufs {
    pub data: Vec<u8>,
    pub slot: usize,
    /// Length of the packet in each slot.
    lens: Vec<usize>,
    /// Slots in use.
    used: usize,
    pub items: Vec<SendItem>,
    max_items: usize,
    cmsg: Vec<CmsgBuf>,
    /// Items `[sent, items.len())` are still to go.
    pub sent: usize,
}

impl SendBufs {
    /// `slots` packet slots (at most [`MAX_SLOTS`]), `max_items` datagrams
    /// per system call (at most [`MAX_BATCH`]).
    pub fn new(slots: usize, slot: usize, max_items: usize) -> SendBufs {
        let slots = slots.clamp(1, MAX_SLOTS);
        let max_items = max_items.clamp(1, MAX_BATCH);
        SendBufs {
            data: vec![0; slots * slot],
            slot,
            lens: vec![0; slots],
            used: 0,
            items: Vec::with_capacity(max_items),
            max_items,
            cmsg: vec![CmsgBuf([0; CMSG_ROOM]); max_items],
            sent: 0,
        }
    }

    /// Packet slots.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// The slot the next packet goes to, if there is room for it (as a
    /// datagram of its own, the worst case).
    pub fn free_slot(&self) -> Option<usize> {
        (self.used < self.lens.len() && self.items.len() < self.max_items).then_some(self.used)
    }

    pub fn is_full(&self) -> bool {
        self.free_slot().is_none()
    }

    /// Items not yet sent.
    pub fn pending(&self) -> usize {
        self.items.len() - self.sent
    }

    /// Slots in use.
    pub fn used(&self) -> usize {
        self.used
    }

    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.data[i * self.slot..(i + 1) * self.slot]
    }

    /// Two different slots at once.
    pub fn two_slots_mut(&mut self, a: usize, b: usize) -> (&mut [u8], &mut [u8]) {
        assert!(a != b && a < self.capacity() && b < self.capacity());
        let s = self.slot;
        if a < b {
            let (x, y) = self.data.split_at_mut(b * s);
            (&mut x[a * s..(a + 1) * s], &mut y[..s])
        } else {
            let (x, y) = self.data.split_at_mut(a * s);
            let (bb, aa) = (&mut x[b * s..(b + 1) * s], &mut y[..s]);
            (aa, bb)
        }
    }

    /// Records the packet of `len` bytes just written to slot
    /// [`SendBufs::free_slot`]. With `gso` it joins the previous datagram
    /// as one more segment when it can (same destination and source, the
    /// previous segments all full-sized and this one no longer, within the
    /// segment and size limits). Returns its segment index within its
    /// datagram: on IPv4 the kernel gives segment `i` of a GSO send the IP
    /// ID `i`, and its ICRC must be computed with that ID.
    pub fn place(&mut self, len: usize, dst: SocketAddr, src: Option<IpAddr>, gso: bool) -> usize {
        let s = self.used;
        debug_assert!(self.free_slot() == Some(s));
        self.lens[s] = len;
        self.used += 1;
        if gso && self.items.len() > self.sent {
            if let Some(last) = self.items.last_mut() {
                let last_len = self.lens[last.first + last.nseg - 1];
                let joinable = last.first + last.nseg == s
                    && last.dst == dst
                    && last.src == src
                    && last_len == last.seg
                    && len <= last.seg
                    && len > 0
                    && last.nseg < MAX_GSO_SEGS
                    && last.len + len <= MAX_UDP_PAYLOAD;
                if joinable {
                    last.nseg += 1;
                    last.len += len;
                    return last.nseg - 1;
                }
            }
        }
        self.items.push(SendItem {
            first: s,
            nseg: 1,
            seg: len,
            len,
            dst,
            src,
        });
        0
    }

    /// Sends pending items; returns how many datagrams went. Stops early
    /// (Ok) when the socket buffer is full. An item the kernel refuses
    /// outright is skipped and reported as `Err((skipped_index, error))`.
    pub fn send(&mut self, fd: RawFd) -> Result<usize, (usize, io::Error)> {
        let start = self.sent;
        let n = self.items.len() - start;
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: plain C structs; zero is valid.
        let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: iovec is a plain C struct; all-zero (null, 0) is valid.
        let mut iovs: [libc::iovec; MAX_SLOTS] = unsafe { zeroed() };
        // SAFETY: sockaddr_storage is a plain C struct; all-zero is valid.
        let mut names: [libc::sockaddr_storage; MAX_BATCH] = unsafe { zeroed() };
        let base = self.data.as_mut_ptr();
        for k in 0..n {
            let it = self.items[start + k];
            for (j, iov) in iovs.iter_mut().enumerate().skip(it.first).take(it.nseg) {
                // SAFETY: slot j < used <= capacity lies inside `data`.
                iov.iov_base = unsafe { base.add(j * self.slot) }.cast();
                iov.iov_len = self.lens[j].min(self.slot);
            }
            let nl = to_sockaddr(&it.dst, &mut names[k]);
            let h = &mut hdrs[k].msg_hdr;
            h.msg_name = (&mut names[k] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = nl;
            h.msg_iov = &mut iovs[it.first];
            h.msg_iovlen = it.nseg as _;
            let gso = if it.nseg > 1 { it.seg as u16 } else { 0 };
            let clen = build_send_cmsgs(&mut self.cmsg[start + k], gso, it.src);
            if clen > 0 {
                h.msg_control = self.cmsg[start + k].0.as_mut_ptr().cast();
                h.msg_controllen = clen as _;
            }
        }
        // SAFETY: headers point at buffers (data, cmsg, the stack arrays)
        // that outlive the call, with their true lengths; the kernel only
        // reads them.
        let r =
            unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => {
                    // The first pending item failed: skip it.
                    self.sent += 1;
                    Err((start, e))
                }
            };
        }
        self.sent += r as usize;
        Ok(r as usize)
    }

    /// Forgets all items once everything went.
    pub fn reset_if_done(&mut self) {
        if self.sent >= self.items.len() {
            self.items.clear();
            self.sent = 0;
            self.used = 0;
        }
    }
}

/// Writes the control messages an item needs; returns their total length.
fn build_send_cmsgs(buf: &mut CmsgBuf, gso_size: u16, src: Option<IpAddr>) -> usize {
    if gso_size == 0 && src.is_none() {
        return 0;
    }
    // SAFETY: a zeroed msghdr whose control pointer/length describe `buf`
    // is what CMSG_FIRSTHDR/NXTHDR need; every header and value written
    // below was sized with CMSG_SPACE and fits CMSG_ROOM.
    unsafe {
        let mut h: libc::msghdr = zeroed();
        h.msg_control = buf.0.as_mut_ptr().cast();
        h.msg_controllen = CMSG_ROOM as _;
        buf.0.fill(0);
        let mut total = 0usize;
        let mut c = libc::CMSG_FIRSTHDR(&h);
        if gso_size != 0 && !c.is_null() {
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), gso_size);
            total += libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
            c = libc::CMSG_NXTHDR(&h, c);
        }
        if let Some(src) = src {
            if !c.is_null() {
                match src {
                    IpAddr::V4(a) => {
                        (*c).cmsg_level = libc::IPPROTO_IP;
                        (*c).cmsg_type = libc::IP_PKTINFO;
                        (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as _;
                        let p = libc::in_pktinfo {
                            ipi_ifindex: 0,
                            ipi_spec_dst: libc::in_addr {
                                s_addr: u32::from_ne_bytes(a.octets()),
                            },
                            ipi_addr: libc::in_addr { s_addr: 0 },
                        };
                        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast(), p);
                        total += libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as usize;
                    }
                    IpAddr::V6(a) => {
                        (*c).cmsg_level = libc::IPPROTO_IPV6;
                        (*c).cmsg_type = libc::IPV6_PKTINFO;
                        (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as _;
                        let p = libc::in6_pktinfo {
                            ipi6_addr: libc::in6_addr {
                                s6_addr: a.octets(),
                            },
                            ipi6_ifindex: 0,
                        };
                        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast(), p);
                        total += libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) as usize;
                    }
                }
            }
        }
        total
    }
}

/// Waits until `fds[i].0` is readable (or writable where `fds[i].1`), or
/// `timeout` passes (`None` = no limit). Returns whether any fd is ready.
pub fn wait(fds: &[(RawFd, bool)], timeout: Option<Duration>) -> io::Result<bool> {
    // The driver's sockets (2 + one per multicast group) and the extra
    // descriptors of its caller.
    const MAX_FDS: usize = 2 + 64 + 14;
    // SAFETY: pollfd is a plain C struct; zero is valid.
    let mut p: [libc::pollfd; MAX_FDS] = unsafe { zeroed() };
    let n = fds.len().min(MAX_FDS);
    for (i, &(fd, out)) in fds.iter().take(n).enumerate() {
        p[i].fd = fd;
        p[i].events = libc::POLLIN | if out { libc::POLLOUT } else { 0 };
    }
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `p` holds `n` initialised pollfds; `tsp` is null or points at
    // a timespec on this stack frame; no signal mask is passed.
    let r = unsafe { libc::ppoll(p.as_mut_ptr(), n as libc::nfds_t, tsp, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0)
}

/// The local address the kernel would use to reach `dst` (a route lookup
/// through a connected, never-used UDP socket; no packet is sent).
pub fn route_source(dst: IpAddr) -> io::Result<IpAddr> {
    let bind: SocketAddr = match dst {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = std::net::UdpSocket::bind(bind)?;
    s.connect((dst, 9))?;
    Ok(s.local_addr()?.ip())
}
