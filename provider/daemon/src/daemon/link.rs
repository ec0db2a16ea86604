//! The netdev as the kernel reports it now: index, running, loopback,
//! addresses and MTU (getifaddrs and SIOCGIFMTU). `port` derives the
//! port from it; `netlink` says when to read it again.

use std::net::IpAddr;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lo_is_readable() {
        let l = query_link("lo").expect("lo exists");
        assert!(l.loopback);
        assert!(l.index > 0);
        assert!(l.mtu.is_some());
        assert!(query_link("rxu-no-such-if").is_none());
    }
}
