//! `rdma_init_qp_attr`: the attributes (and `ibv_qp_attr_mask`) the
//! kernel hands back for INIT / RTR / RTS (`cma_ib_init_qp_attr`,
//! `cm_init_qp_{init,rtr,rts}_attr`).

use rxu_abi::proto::cm::RDMA_UDP_QKEY;
use rxu_abi::proto::{QpAttr, QpType};

use super::conn::ConnState;
use super::ids::IdState;
use super::{Cm, CmError};

/// `enum ibv_qp_attr_mask` bits.
pub mod mask {
    pub const STATE: u32 = 1 << 0;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const DEST_QPN: u32 = 1 << 20;
}

/// `enum ibv_qp_state`.
pub mod qp_state {
    pub const INIT: u8 = 1;
    pub const RTR: u8 = 2;
    pub const RTS: u8 = 3;
}

/// `enum ibv_access_flags`.
const REMOTE_WRITE: u32 = 1 << 1;
const REMOTE_READ: u32 = 1 << 2;
const REMOTE_ATOMIC: u32 = 1 << 3;

impl Cm {
    pub fn init_qp_attr(&self, id: u32, state: u8) -> Result<(u32, QpAttr), CmError> {
        let i = self.id_ref(id)?;
        if !matches!(state, qp_state::INIT | qp_state::RTR | qp_state::RTS) {
            return Err(CmError::inval(format!(
                "no attributes for QP state {state}"
            )));
        }
        let mut a = QpAttr {
            qp_state: state,
            port_num: 1,
            pkey_index: 0,
            ..Default::default()
        };
        let conn = i.conn.and_then(|c| self.conns.get(&c));
        // Without an IB CM connection (and always for UD): the defaults.
        let connected = matches!(i.state, IdState::Connect | IdState::Disconnect);
        if i.qp_type == QpType::Ud {
            a.qkey = i.qkey.unwrap_or(RDMA_UDP_QKEY);
            return Ok((mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::QKEY, a));
        }
        let Some(c) = conn.filter(|_| connected) else {
            if connected {
                return Err(CmError::inval("the connection is over"));
            }
            return Ok((
                mask::STATE | mask::ACCESS_FLAGS | mask::PKEY_INDEX | mask::PORT,
                a,
            ));
        };
        let ok = match state {
            qp_state::INIT => matches!(
                c.state,
                ConnState::ReqSent
                    | ConnState::ReqRcvd
                    | ConnState::RepRcvd
                    | ConnState::RepSent
                    | ConnState::Established
            ),
            _ => matches!(
                c.state,
                ConnState::ReqRcvd
                    | ConnState::RepRcvd
                    | ConnState::RepSent
                    | ConnState::Established
            ),
        };
        if !ok {
            return Err(CmError::inval(format!(
                "no QP attributes in CM state {}",
                c.state.name()
            )));
        }
        let m = match state {
            qp_state::INIT => {
                a.qp_access_flags = REMOTE_WRITE;
                if c.responder_resources > 0 {
                    a.qp_access_flags |= REMOTE_READ | REMOTE_ATOMIC;
                }
                mask::STATE | mask::ACCESS_FLAGS | mask::PKEY_INDEX | mask::PORT
            }
            qp_state::RTR => {
                if let Some(p) = &i.path {
                    a.ah = self.ah_of(p);
                }
                a.path_mtu = c.path_mtu;
                a.dest_qp_num = c.remote_qpn;
                a.rq_psn = i.seq_num;
                a.max_dest_rd_atomic = c.responder_resources;
                a.min_rnr_timer = 0;
                let mut m = mask::STATE | mask::AV | mask::PATH_MTU | mask::DEST_QPN | mask::RQ_PSN;
                if c.qp_type == QpType::Rc {
                    m |= mask::MAX_DEST_RD_ATOMIC | mask::MIN_RNR_TIMER;
                }
                m
            }
            _ => {
                a.sq_psn = c.remote_psn;
                let mut m = mask::STATE | mask::SQ_PSN;
                if c.qp_type == QpType::Rc {
                    a.timeout = i.ack_timeout.unwrap_or(c.av_timeout);
                    a.retry_cnt = c.retry_count;
                    a.rnr_retry = c.rnr_retry_count;
                    a.max_rd_atomic = c.initiator_depth;
                    m |= mask::TIMEOUT | mask::RETRY_CNT | mask::RNR_RETRY | mask::MAX_QP_RD_ATOMIC;
                }
                m
            }
        };
        Ok((m, a))
    }
}
