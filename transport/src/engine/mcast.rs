//! Multicast groups of one device: which UD QPs are attached to which
//! group (`ibv_attach_mcast`). RoCEv2 maps an IPv4-mapped multicast GID
//! `::ffff:a.b.c.d` to the IP group a.b.c.d; packets to a group carry
//! BTH DestQP 0xFFFFFF and reach every QP attached to it. Data only: the
//! endpoint delivers, the driver joins the IP groups.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use super::config::EngineError;

/// The DestQP of every multicast packet.
pub const MCAST_QPN: u32 = 0xFF_FFFF;

/// Groups one device may have (each is a socket in the driver).
pub const MAX_GROUPS: usize = 64;

/// QPs one group may hold (rxe's `max_mcast_qp_attach`).
pub const MAX_GROUP_QPS: usize = 56;

/// The address a group is known by: IPv4-mapped GIDs become IPv4.
pub fn group_key(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        a => a,
    }
}

/// Whether `a` is a multicast address (of either family).
pub fn is_group(a: IpAddr) -> bool {
    a.is_multicast()
}

/// The IPv4 groups among `addrs` (what the driver can join).
pub fn ipv4_groups(addrs: impl Iterator<Item = IpAddr>) -> Vec<Ipv4Addr> {
    addrs
        .filter_map(|a| match group_key(a) {
            IpAddr::V4(v4) if v4.is_multicast() => Some(v4),
            _ => None,
        })
        .collect()
}

/// Group -> attached QPs.
#[derive(Debug, Default)]
pub struct Groups {
    map: HashMap<IpAddr, Vec<u32>>,
}

impl Groups {
    /// Attaches `qpn` to `group` (idempotent).
    pub fn attach(&mut self, qpn: u32, group: IpAddr) -> Result<(), EngineError> {
        let g = group_key(group);
        let v4 = match g {
            IpAddr::V4(v4) => v4,
            // A real group, but rxu joins IPv4 groups only.
            IpAddr::V6(v6) if v6.is_multicast() => {
                return Err(EngineError::Config(
                    "IPv6 multicast groups are not supported",
                ))
            }
            IpAddr::V6(_) => return Err(EngineError::NotMulticast(group)),
        };
        if !v4.is_multicast() {
            return Err(EngineError::NotMulticast(group));
        }
        if !self.map.contains_key(&g) && self.map.len() >= MAX_GROUPS {
            return Err(EngineError::TooManyGroups(MAX_GROUPS));
        }
        let qps = self.map.entry(g).or_default();
        if !qps.contains(&qpn) {
            if qps.len() >= MAX_GROUP_QPS {
                return Err(EngineError::TooManyGroups(MAX_GROUP_QPS));
            }
            qps.push(qpn);
        }
        Ok(())
    }

    /// Detaches `qpn` from `group`; a group with no QP left is gone.
    pub fn detach(&mut self, qpn: u32, group: IpAddr) -> Result<(), EngineError> {
        let g = group_key(group);
        let qps = self
            .map
            .get_mut(&g)
            .ok_or(EngineError::NotAttached(qpn, group))?;
        let i = qps
            .iter()
            .position(|&q| q == qpn)
            .ok_or(EngineError::NotAttached(qpn, group))?;
        qps.swap_remove(i);
        if qps.is_empty() {
            self.map.remove(&g);
        }
        Ok(())
    }

    /// A destroyed QP leaves every group.
    pub fn forget_qp(&mut self, qpn: u32) {
        if self.map.is_empty() {
            return;
        }
        self.map.retain(|_, qps| {
            qps.retain(|&q| q != qpn);
            !qps.is_empty()
        });
    }

    /// Some QP is attached to `a` (already a group key).
    pub fn has(&self, a: IpAddr) -> bool {
        !self.map.is_empty() && self.map.contains_key(&group_key(a))
    }

    /// The QPs attached to `group` (a group key).
    pub fn members(&self, group: IpAddr) -> &[u32] {
        self.map.get(&group).map_or(&[], Vec::as_slice)
    }

    pub fn addrs(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.map.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn mapped_gids_and_ipv4_groups_are_one_group() {
        let mut g = Groups::default();
        g.attach(5, ip("::ffff:239.1.2.3")).unwrap();
        g.attach(5, ip("239.1.2.3")).unwrap();
        g.attach(6, ip("239.1.2.3")).unwrap();
        assert_eq!(g.members(ip("239.1.2.3")), &[5, 6]);
        assert!(g.has(ip("::ffff:239.1.2.3")));
        g.detach(5, ip("::ffff:239.1.2.3")).unwrap();
        assert_eq!(g.members(ip("239.1.2.3")), &[6]);
        assert!(matches!(
            g.detach(5, ip("239.1.2.3")),
            Err(EngineError::NotAttached(5, _))
        ));
        g.forget_qp(6);
        assert!(!g.has(ip("239.1.2.3")));
        assert_eq!(g.addrs().count(), 0);
    }

    #[test]
    fn only_ipv4_multicast_groups_within_the_limits() {
        let mut g = Groups::default();
        for bad in ["10.0.0.1", "::ffff:10.0.0.1", "fe80::1", "255.255.255.255"] {
            assert!(
                matches!(g.attach(1, ip(bad)), Err(EngineError::NotMulticast(_))),
                "{bad}"
            );
        }
        // A real IPv6 group: not supported (EOPNOTSUPP to the client).
        assert!(matches!(
            g.attach(1, ip("ff0e::1")),
            Err(EngineError::Config(_))
        ));
        for i in 0..MAX_GROUPS {
            g.attach(1, IpAddr::from([239, 0, 0, i as u8])).unwrap();
        }
        assert!(matches!(
            g.attach(1, ip("239.0.1.0")),
            Err(EngineError::TooManyGroups(_))
        ));
        for q in 2..=MAX_GROUP_QPS as u32 {
            g.attach(q, ip("239.0.0.0")).unwrap();
        }
        assert!(g.attach(1000, ip("239.0.0.0")).is_err());
        assert_eq!(g.members(ip("239.0.0.0")).len(), MAX_GROUP_QPS);
    }
}
