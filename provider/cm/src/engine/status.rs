//! What `rxu status` shows of the CM: one line per id.

use std::net::SocketAddr;
use std::ops::{Bound, RangeBounds};

use rxu_abi::proto::QpType;

use super::{Cm, Owner};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdStatus {
    pub owner: Owner,
    pub id: u32,
    pub ps: u16,
    pub qp_type: QpType,
    /// rdma_cm state, and the IB CM state when there is a connection
    /// ("connect/established").
    pub state: String,
    pub local: SocketAddr,
    pub remote: Option<SocketAddr>,
    /// The local QP of its connection (0 before connect / accept).
    pub qpn: u32,
}

impl Cm {
    pub fn status(&self) -> Vec<IdStatus> {
        self.status_of(..)
    }

    /// The lines of the ids whose owner is in `owners` (work in those only).
    pub fn status_of(&self, owners: impl RangeBounds<Owner>) -> Vec<IdStatus> {
        self.ids_owned(owners)
            .filter_map(|n| self.ids.get(&n).map(|i| (n, i)))
            .map(|(n, i)| {
                let conn = i.conn.and_then(|c| self.conns.get(&c));
                let state = match conn {
                    Some(c) => format!("{}/{}", i.state.name(), c.state.name()),
                    None => i.state.name().to_string(),
                };
                IdStatus {
                    owner: i.owner,
                    id: n,
                    ps: i.ps,
                    qp_type: i.qp_type,
                    state,
                    local: i.local,
                    remote: i.remote,
                    qpn: conn.map_or(0, |c| c.local_qpn),
                }
            })
            .collect()
    }

    /// The owner of `id`, if it exists.
    pub fn owner_of(&self, id: u32) -> Option<Owner> {
        self.ids.get(&id).map(|i| i.owner)
    }

    /// The QP type of `id`, if it exists.
    pub fn qp_type_of(&self, id: u32) -> Option<QpType> {
        self.ids.get(&id).map(|i| i.qp_type)
    }

    /// Every id with its owner.
    pub fn owned_ids(&self) -> impl Iterator<Item = (Owner, u32)> + '_ {
        self.ids.iter().map(|(&n, i)| (i.owner, n))
    }

    /// The ids whose owner is in `owners`, by owner then id: a range of
    /// the owner index, so the cost is what those owners hold.
    pub fn ids_owned(&self, owners: impl RangeBounds<Owner>) -> impl Iterator<Item = u32> + '_ {
        let lo = match owners.start_bound() {
            Bound::Included(&o) => Bound::Included((o, 0)),
            Bound::Excluded(&o) => Bound::Excluded((o, u32::MAX)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let hi = match owners.end_bound() {
            Bound::Included(&o) => Bound::Included((o, u32::MAX)),
            Bound::Excluded(&o) => Bound::Excluded((o, 0)),
            Bound::Unbounded => Bound::Unbounded,
        };
        self.by_owner.range((lo, hi)).map(|&(_, n)| n)
    }
}
