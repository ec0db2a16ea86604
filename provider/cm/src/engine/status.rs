//! What `rxu status` shows of the CM: one line per id.

use std::net::SocketAddr;

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
}

impl Cm {
    pub fn status(&self) -> Vec<IdStatus> {
        self.ids
            .iter()
            .map(|(&n, i)| {
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
                }
            })
            .collect()
    }
}
