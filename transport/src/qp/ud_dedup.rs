//! UD duplicate filter.
//!
//! The IBA gives UD receivers no PSN check, so a datagram the network
//! duplicates would be delivered twice. A UD sender still numbers its
//! packets with its own PSN sequence, so the receiver remembers, per
//! source (address, QPN), the highest PSN seen and which of the 64 before
//! it arrived, and drops a repeat. A PSN far behind the highest is taken
//! as a sender that restarted its sequence (QP reset), not as a
//! duplicate. Loss and reordering within the window stay allowed, as UD
//! permits; no allocation after creation.

use crate::Psn;
use std::net::IpAddr;

/// Sources remembered at once (the oldest is replaced).
const SOURCES: usize = 16;
/// PSNs remembered behind the highest one.
const WINDOW: i32 = 64;

#[derive(Clone, Copy, Debug)]
struct Source {
    addr: IpAddr,
    qpn: u32,
    highest: Psn,
    /// Bit k set: PSN `highest - k` was seen.
    seen: u64,
}

/// Recent PSNs per UD source.
#[derive(Clone, Debug, Default)]
pub(crate) struct UdDedup {
    sources: [Option<Source>; SOURCES],
    next: usize,
}

impl UdDedup {
    /// Records `psn` from (`addr`, `qpn`); false when it is a repeat.
    pub(crate) fn accept(&mut self, addr: IpAddr, qpn: u32, psn: Psn) -> bool {
        let found = self
            .sources
            .iter_mut()
            .flatten()
            .find(|s| s.qpn == qpn && s.addr == addr);
        let Some(s) = found else {
            self.sources[self.next] = Some(Source {
                addr,
                qpn,
                highest: psn,
                seen: 1,
            });
            self.next = (self.next + 1) % SOURCES;
            return true;
        };
        let d = psn.diff(s.highest);
        if d > 0 {
            s.seen = if d >= WINDOW { 0 } else { s.seen << d };
            s.seen |= 1;
            s.highest = psn;
            true
        } else if d > -WINDOW {
            let bit = 1u64 << (-d);
            let fresh = s.seen & bit == 0;
            s.seen |= bit;
            fresh
        } else {
            // Far behind: the sender started over.
            s.highest = psn;
            s.seen = 1;
            true
        }
    }

    pub(crate) fn clear(&mut self) {
        *self = UdDedup::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));

    #[test]
    fn repeats_dropped_reorder_and_loss_allowed() {
        let mut d = UdDedup::default();
        let p = Psn::new(Psn::MASK - 2); // across the wrap
        assert!(d.accept(A, 7, p));
        assert!(!d.accept(A, 7, p));
        assert!(d.accept(A, 7, p.add(3))); // a gap: loss is fine
        assert!(d.accept(A, 7, p.add(1))); // reordered, not seen before
        assert!(!d.accept(A, 7, p.add(1)));
        assert!(!d.accept(A, 7, p.add(3)));
        assert!(d.accept(A, 8, p)); // another sender QP
    }

    #[test]
    fn restart_far_behind_is_accepted() {
        let mut d = UdDedup::default();
        assert!(d.accept(A, 7, Psn::new(5000)));
        assert!(d.accept(A, 7, Psn::new(10)));
        assert!(d.accept(A, 7, Psn::new(11)));
        assert!(!d.accept(A, 7, Psn::new(10)));
    }

    #[test]
    fn many_sources_bounded() {
        let mut d = UdDedup::default();
        for q in 0..100u32 {
            assert!(d.accept(A, q, Psn::new(1)));
        }
        assert!(d.sources.iter().all(|s| s.is_some()));
        assert!(!d.accept(A, 99, Psn::new(1)));
    }
}
