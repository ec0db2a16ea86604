//! The send side between a QP's `poll_transmit` and sendmmsg: destination
//! and source addresses (with the route cache of a wildcard-bound
//! socket), GSO grouping, and the ICRC over the IP facts chosen here.

use super::config::EngineCounters;
use super::sys::{self, SendBufs};
use crate::qp::Transmit;
use crate::wire::icrc::{self, IcrcIp};
use crate::wire::ip::IPV4_DF;
use crate::wire::{BTH_LEN, ICRC_LEN};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

pub(crate) struct Out {
    pub local: SocketAddr,
    /// The bound IP unless it is a wildcard.
    pub local_ip: Option<IpAddr>,
    /// Wildcard binding: source address per destination.
    routes: HashMap<IpAddr, IpAddr>,
    pub peer_port: u16,
    pub gso: bool,
}

impl Out {
    pub fn new(local: SocketAddr, local_ip: Option<IpAddr>, peer_port: u16, gso: bool) -> Out {
        Out {
            local,
            local_ip,
            routes: HashMap::new(),
            peer_port,
            gso,
        }
    }

    /// Destination in our address family and the source address (and
    /// whether it must be pinned with IP_PKTINFO).
    fn addresses(
        &mut self,
        dst: IpAddr,
        hint: Option<IpAddr>,
    ) -> Option<(IpAddr, IpAddr, Option<IpAddr>)> {
        let dst_ip = match (self.local.ip(), dst) {
            (IpAddr::V4(_), IpAddr::V4(a)) => IpAddr::V4(a),
            (IpAddr::V6(_), IpAddr::V6(a)) => IpAddr::V6(a),
            (IpAddr::V4(_), IpAddr::V6(a)) => IpAddr::V4(a.to_ipv4_mapped()?),
            (IpAddr::V6(_), IpAddr::V4(a)) => IpAddr::V6(a.to_ipv6_mapped()),
        };
        match (self.local_ip, hint) {
            (Some(ip), _) => Some((dst_ip, ip, None)),
            (None, Some(ip)) if ip.is_ipv4() == dst_ip.is_ipv4() => Some((dst_ip, ip, Some(ip))),
            (None, _) => {
                let ip = match self.routes.get(&dst_ip) {
                    Some(&ip) => ip,
                    None => {
                        let ip = sys::route_source(dst_ip).ok()?;
                        self.routes.insert(dst_ip, ip);
                        ip
                    }
                };
                Some((dst_ip, ip, Some(ip)))
            }
        }
    }

    /// Fills in the ICRC of a packet that is segment `id` of its datagram
    /// (the IPv4 ID the kernel gives it).
    fn seal(&self, pkt: &mut [u8], src: IpAddr, dst: IpAddr, id: usize) -> bool {
        let ip = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IcrcIp::V4 {
                src: s,
                dst: d,
                id: id as u16,
                flags_frag: IPV4_DF,
            },
            (IpAddr::V6(s), IpAddr::V6(d)) => IcrcIp::v6(s, d),
            _ => return false,
        };
        icrc::fill_icrc(&ip, self.local.port(), self.peer_port, pkt).is_ok()
    }

    /// Whether a packet to `dst` comes back to this very socket: the port
    /// it sends to is its own and the destination is one of `own` (the
    /// local addresses the device serves). Then the source and
    /// destination addresses it would carry, else None.
    pub fn own_dst(
        &mut self,
        dst: IpAddr,
        hint: Option<IpAddr>,
        own: &[IpAddr],
    ) -> Option<(IpAddr, IpAddr)> {
        if self.peer_port != self.local.port() || own.is_empty() {
            return None;
        }
        let (dst_ip, src_ip, _) = self.addresses(dst, hint)?;
        own.contains(&dst_ip).then_some((src_ip, dst_ip))
    }

    /// Fills in the ICRC of a packet from this socket to itself, as the
    /// UDP path would for a lone datagram (IPv4 ID 0).
    pub fn seal_own(&self, pkt: &mut [u8], src: IpAddr, dst: IpAddr) -> bool {
        self.seal(pkt, src, dst, 0)
    }

    /// Turns what `poll_transmit` wrote into slot `i` (the free slot) into
    /// a datagram or a segment of one; returns whether it was placed.
    /// `src_hint`: the source address for a wildcard-bound socket (the
    /// address the QP's peer reaches it at), if known.
    pub fn finish(
        &mut self,
        tx: &mut SendBufs,
        i: usize,
        t: Transmit,
        src_hint: Option<IpAddr>,
        counters: &mut EngineCounters,
    ) -> bool {
        let len = t.len;
        if !(BTH_LEN + ICRC_LEN..=tx.slot).contains(&len) {
            counters.send_errors += 1;
            return false;
        }
        let Some((dst_ip, src_ip, pin)) = self.addresses(t.dst, src_hint) else {
            counters.send_errors += 1;
            return false;
        };
        let dst = SocketAddr::new(dst_ip, self.peer_port);
        let id = tx.place(len, dst, pin, self.gso);
        if !self.seal(&mut tx.slot_mut(i)[..len], src_ip, dst_ip, id) {
            counters.send_errors += 1;
        }
        true
    }
}
