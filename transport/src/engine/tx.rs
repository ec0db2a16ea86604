//! The send side between a QP's `poll_transmit` and sendmmsg: destination
//! and source addresses, GSO grouping, the ICRC, and send-path faults.

use super::fault::{corrupt, DelayLine, Fate, FaultInjector, Verdict};
use super::sys::{self, SendBufs};
use super::EngineCounters;
use crate::qp::Transmit;
use crate::wire::icrc::{self, IcrcIp};
use crate::wire::ip::IPV4_DF;
use crate::wire::{BTH_LEN, ICRC_LEN};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

/// Where a held-back packet goes and what it still needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeldTx {
    dst: SocketAddr,
    src_ip: IpAddr,
    pin: Option<IpAddr>,
    corrupt: Option<u64>,
}

pub(crate) struct Out {
    pub local: SocketAddr,
    /// The bound IP unless it is a wildcard.
    pub local_ip: Option<IpAddr>,
    /// Wildcard binding: source address per destination.
    routes: HashMap<IpAddr, IpAddr>,
    pub peer_port: u16,
    pub gso: bool,
    pub fault: Option<FaultInjector>,
    pub delay: DelayLine<HeldTx>,
}

impl Out {
    pub fn new(
        local: SocketAddr,
        local_ip: Option<IpAddr>,
        peer_port: u16,
        gso: bool,
        fault: Option<FaultInjector>,
        slot: usize,
    ) -> Out {
        Out {
            local,
            local_ip,
            routes: HashMap::new(),
            peer_port,
            gso,
            fault,
            delay: DelayLine::new(slot),
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

    /// Turns what `poll_transmit` wrote into slot `i` (the free slot) into
    /// a datagram or a segment of one.
    /// `src_hint`: the source address for a wildcard-bound engine (the
    /// address the QP's peer reaches it at), if known.
    pub fn finish(
        &mut self,
        tx: &mut SendBufs,
        i: usize,
        t: Transmit,
        src_hint: Option<IpAddr>,
        counters: &mut EngineCounters,
        now: Instant,
    ) {
        let len = t.len;
        if !(BTH_LEN + ICRC_LEN..=tx.slot).contains(&len) {
            counters.send_errors += 1;
            return;
        }
        let Some((dst_ip, src_ip, pin)) = self.addresses(t.dst, src_hint) else {
            counters.send_errors += 1;
            return;
        };
        let dst = SocketAddr::new(dst_ip, self.peer_port);
        let mut v = match self.fault.as_mut() {
            Some(f) => f.decide(),
            None => Verdict {
                fate: Fate::Deliver,
                corrupt: None,
            },
        };
        if v.fate == Fate::Duplicate && tx.used() + 1 >= tx.capacity() {
            if let Some(f) = self.fault.as_mut() {
                f.duplicate_refused();
            }
            v.fate = Fate::Deliver;
        }
        match v.fate {
            Fate::Drop => return,
            Fate::Delay => {
                let held = HeldTx {
                    dst,
                    src_ip,
                    pin,
                    corrupt: v.corrupt,
                };
                if self.delay.hold(&tx.slot_mut(i)[..len], held, now) {
                    return;
                }
                if let Some(f) = self.fault.as_mut() {
                    f.delay_refused();
                }
            }
            Fate::Deliver | Fate::Duplicate => {}
        }
        let id = tx.place(len, dst, pin, self.gso);
        if !self.seal(&mut tx.slot_mut(i)[..len], src_ip, dst_ip, id) {
            counters.send_errors += 1;
        }
        if v.fate == Fate::Duplicate {
            if let Some(j) = tx.free_slot() {
                let (a, b) = tx.two_slots_mut(i, j);
                b[..len].copy_from_slice(&a[..len]);
                let id = tx.place(len, dst, pin, false);
                self.seal(&mut tx.slot_mut(j)[..len], src_ip, dst_ip, id);
            }
        }
        if let Some(r) = v.corrupt {
            corrupt(&mut tx.slot_mut(i)[..len], r);
        }
        self.delay.note_passed();
        if self.delay.due(now) {
            self.release_delayed(tx, counters);
        }
    }

    /// Sends the held packet now, if there is room in the batch.
    pub fn release_delayed(&mut self, tx: &mut SendBufs, counters: &mut EngineCounters) {
        let Some(j) = tx.free_slot() else {
            return;
        };
        let Some((buf, len, h)) = self.delay.release() else {
            return;
        };
        tx.slot_mut(j)[..len].copy_from_slice(&buf[..len]);
        self.delay.restore(buf);
        let id = tx.place(len, h.dst, h.pin, false);
        let pkt = &mut tx.slot_mut(j)[..len];
        if !self.seal(pkt, h.src_ip, h.dst.ip(), id) {
            counters.send_errors += 1;
        }
        if let Some(r) = h.corrupt {
            corrupt(pkt, r);
        }
    }
}
