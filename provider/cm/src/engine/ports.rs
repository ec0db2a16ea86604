//! Port spaces: which ids hold which (port space, port) of the device, and
//! the kernel's rules for sharing one (`cma_check_port`).

use std::collections::HashMap;
use std::net::IpAddr;

/// What the sharing rules look at of one holder of a port.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Holder {
    pub id: u32,
    pub ip: IpAddr,
    pub reuseaddr: bool,
    pub afonly: bool,
}

#[derive(Default)]
pub(crate) struct Ports {
    held: HashMap<(u16, u16), Vec<u32>>,
    last_used: u16,
}

impl Ports {
    pub fn holders(&self, ps: u16, port: u16) -> &[u32] {
        self.held.get(&(ps, port)).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn is_free(&self, ps: u16, port: u16) -> bool {
        self.holders(ps, port).is_empty()
    }

    pub fn add(&mut self, ps: u16, port: u16, id: u32) {
        self.held.entry((ps, port)).or_default().push(id);
    }

    pub fn remove(&mut self, ps: u16, port: u16, id: u32) {
        if let Some(v) = self.held.get_mut(&(ps, port)) {
            v.retain(|&i| i != id);
            if v.is_empty() {
                self.held.remove(&(ps, port));
            }
        }
    }

    /// An unused port of `range`, starting at `start` (random) and never
    /// the one handed out last (`cma_alloc_any_port`).
    pub fn ephemeral(&mut self, ps: u16, range: (u16, u16), start: u32) -> Option<u16> {
        let (lo, hi) = (range.0.min(range.1) as u32, range.0.max(range.1) as u32);
        let n = hi - lo + 1;
        for k in 0..n {
            let port = (lo + (start + k) % n) as u16;
            if port != 0 && port != self.last_used && self.is_free(ps, port) {
                self.last_used = port;
                return Some(port);
            }
        }
        None
    }
}

/// `cma_check_port`: may `me` hold the port beside `others`? Err is the
/// errno: EADDRNOTAVAIL when a wildcard is involved, EADDRINUSE for the
/// same address. `reuseaddr` is `me`'s flag for a bind, false for listen.
pub(crate) fn check(me: &Holder, others: &[Holder], reuseaddr: bool) -> Result<(), i32> {
    for cur in others.iter().filter(|c| c.id != me.id) {
        if reuseaddr && cur.reuseaddr {
            continue;
        }
        if me.afonly && cur.afonly && me.ip.is_ipv4() != cur.ip.is_ipv4() {
            continue;
        }
        if me.ip.is_unspecified() || cur.ip.is_unspecified() {
            return Err(libc::EADDRNOTAVAIL);
        }
        if me.ip == cur.ip {
            return Err(libc::EADDRINUSE);
        }
    }
    Ok(())
}
