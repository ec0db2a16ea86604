//! The `rdma_join_multicast`s of the device's rdma_cm ids, as the CM
//! service keeps them (the device receives the groups its QPs attach to
//! and its ids join). Indexed so that no request costs work in the joins
//! of other ids or sessions: by id, a count per session (its quota) and
//! a count per received group (the device's IP groups).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// One `rdma_join_multicast` of an rdma_cm id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Join {
    pub id: u32,
    pub group: SocketAddr,
    pub send_only: bool,
}

impl Join {
    /// The IPv4 group, for a join that needs the device to receive it.
    pub fn received(&self) -> Option<Ipv4Addr> {
        match self.group.ip() {
            IpAddr::V4(g) if !self.send_only => Some(g),
            _ => None,
        }
    }
}

/// The joins of every id, with the counts the daemon asks for.
#[derive(Default)]
pub struct Joins {
    /// Per id: (its session, its joins in order).
    by_id: BTreeMap<u32, (u32, Vec<Join>)>,
    per_session: HashMap<u32, u64>,
    /// How many joins want each IPv4 group received.
    received: BTreeMap<Ipv4Addr, u32>,
    /// Joins not reported yet (MULTICAST_JOIN or _ERROR), in order.
    unreported: Vec<Join>,
}

impl Joins {
    pub fn add(&mut self, session: u32, j: Join) {
        let e = self.by_id.entry(j.id).or_insert((session, Vec::new()));
        e.1.push(j);
        *self.per_session.entry(e.0).or_default() += 1;
        if let Some(g) = j.received() {
            *self.received.entry(g).or_default() += 1;
        }
        self.unreported.push(j);
    }

    /// Drops `id`'s first join of `group`; false if it has none.
    pub fn leave(&mut self, id: u32, group: SocketAddr) -> bool {
        let Some((session, list)) = self.by_id.get_mut(&id) else {
            return false;
        };
        let Some(i) = list.iter().position(|j| j.group == group) else {
            return false;
        };
        let (session, j) = (*session, list.remove(i));
        if list.is_empty() {
            self.by_id.remove(&id);
        }
        self.forget(session, &[j]);
        true
    }

    /// Drops every join of `id` (it was destroyed).
    pub fn remove_id(&mut self, id: u32) {
        if let Some((session, list)) = self.by_id.remove(&id) {
            self.forget(session, &list);
        }
    }

    fn forget(&mut self, session: u32, gone: &[Join]) {
        if let Some(n) = self.per_session.get_mut(&session) {
            *n = n.saturating_sub(gone.len() as u64);
            if *n == 0 {
                self.per_session.remove(&session);
            }
        }
        for g in gone.iter().filter_map(Join::received) {
            if let Some(n) = self.received.get_mut(&g) {
                *n -= 1;
                if *n == 0 {
                    self.received.remove(&g);
                }
            }
        }
        if !self.unreported.is_empty() {
            self.unreported.retain(|u| !gone.contains(u));
        }
    }

    /// Whether `j` (its id and group) is still joined.
    pub fn holds(&self, j: &Join) -> bool {
        self.by_id
            .get(&j.id)
            .is_some_and(|(_, l)| l.iter().any(|x| x.group == j.group))
    }

    pub fn of_session(&self, session: u32) -> u64 {
        self.per_session.get(&session).copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The IPv4 groups the joins need received (send-only ones aside).
    pub fn received_groups(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.received.keys().copied()
    }

    /// The joins to report now, oldest first.
    pub fn take_unreported(&mut self) -> Vec<Join> {
        std::mem::take(&mut self.unreported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(id: u32, g: [u8; 4], send_only: bool) -> Join {
        Join {
            id,
            group: SocketAddr::from((g, 0)),
            send_only,
        }
    }

    #[test]
    fn counts_follow_joins_leaves_and_destroys() {
        let mut t = Joins::default();
        t.add(1, join(10, [239, 0, 0, 1], false));
        t.add(1, join(10, [239, 0, 0, 1], false));
        t.add(1, join(11, [239, 0, 0, 2], true));
        t.add(2, join(20, [239, 0, 0, 1], false));
        assert_eq!((t.of_session(1), t.of_session(2)), (3, 1));
        let groups: Vec<_> = t.received_groups().collect();
        assert_eq!(groups, [Ipv4Addr::new(239, 0, 0, 1)]);
        assert_eq!(t.take_unreported().len(), 4);
        assert!(t.take_unreported().is_empty());

        assert!(t.leave(10, SocketAddr::from(([239, 0, 0, 1], 0))));
        assert!(!t.leave(10, SocketAddr::from(([239, 0, 0, 9], 0))));
        assert!(!t.leave(99, SocketAddr::from(([239, 0, 0, 1], 0))));
        assert_eq!(t.of_session(1), 2);
        t.remove_id(10);
        t.remove_id(20);
        assert_eq!((t.of_session(1), t.of_session(2)), (1, 0));
        assert_eq!(t.received_groups().count(), 0);
        t.remove_id(11);
        assert!(t.is_empty());
        assert!(t.per_session.is_empty());
    }

    #[test]
    fn a_join_left_before_it_is_reported_is_not_reported() {
        let mut t = Joins::default();
        let j = join(5, [239, 1, 1, 1], false);
        t.add(7, j);
        assert!(t.holds(&j));
        t.remove_id(5);
        assert!(!t.holds(&j));
        assert!(t.take_unreported().is_empty());
    }
}
