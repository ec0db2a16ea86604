//! The verbs attributes that travel in control messages (QP capacities,
//! QP attributes, address vectors), shared by the verbs and the rdma_cm
//! requests.

use serde::{Deserialize, Serialize};

/// Queue capacities, as `struct ibv_qp_cap` (requested in, granted out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// QP attributes as `struct ibv_qp_attr`, with the fields rxu uses. Which
/// ones apply is said by `mask` (bits of `enum ibv_qp_attr_mask`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpAttr {
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub ah: AhAttr,
    pub cap: QpCap,
    pub sq_sig_all: bool,
}

/// Address vector, as the RoCE part of `struct ibv_ah_attr`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AhAttr {
    /// Destination GID (IPv4-mapped `::ffff:a.b.c.d` or IPv6).
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub is_global: bool,
    pub port_num: u8,
}
