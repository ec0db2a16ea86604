//! Conversions between the C attribute structs and the client library's.

use rxu_client::{AhAttr, QpAttr, QpCap, QpType};

use crate::abi::{IbvAhAttr, IbvGid, IbvGlobalRoute, IbvQpAttr, IbvQpCap};
use crate::guard::OpResult;

pub fn qp_type_from_c(t: i32) -> OpResult<QpType> {
    u32::try_from(t)
        .ok()
        .and_then(QpType::from_ibv)
        .ok_or(libc::EOPNOTSUPP)
}

pub fn cap_from_c(c: &IbvQpCap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

pub fn cap_to_c(c: &QpCap) -> IbvQpCap {
    IbvQpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The RoCE part of an address vector (no LIDs: the GRH is the address).
pub fn ah_from_c(a: &IbvAhAttr) -> AhAttr {
    AhAttr {
        dgid: a.grh.dgid.raw,
        flow_label: a.grh.flow_label,
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        sl: a.sl,
        is_global: a.is_global != 0,
        port_num: a.port_num,
    }
}

pub fn ah_to_c(a: &AhAttr) -> IbvAhAttr {
    IbvAhAttr {
        grh: IbvGlobalRoute {
            dgid: IbvGid { raw: a.dgid },
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        },
        dlid: 0,
        sl: a.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: u8::from(a.is_global),
        port_num: a.port_num,
    }
}

/// Enum fields arrive as C ints; anything outside a u8 is refused.
fn byte(v: i32) -> OpResult<u8> {
    u8::try_from(v).map_err(|_| libc::EINVAL)
}

/// The fields `mask` names; the enums of the others are not looked at
/// (callers such as librdmacm leave them uninitialised, and the kernel
/// ignores them).
pub fn qp_attr_from_c(a: &IbvQpAttr, mask: u32) -> OpResult<QpAttr> {
    use rxu_client::qp_attr_mask as m;
    let masked = |bit: u32, v: i32| if mask & bit != 0 { byte(v) } else { Ok(0) };
    Ok(QpAttr {
        qp_state: masked(m::STATE, a.qp_state)?,
        cur_qp_state: masked(m::CUR_STATE, a.cur_qp_state)?,
        path_mtu: masked(m::PATH_MTU, a.path_mtu)?,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        pkey_index: a.pkey_index,
        sq_draining: a.sq_draining,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        ah: ah_from_c(&a.ah_attr),
        cap: cap_from_c(&a.cap),
        sq_sig_all: false,
    })
}

/// ibv_query_qp's answer. On RoCE every address carries a GRH: both
/// address vectors say is_global, also before one was set (as the kernel
/// reports them; rxe's query shows the same).
pub fn qp_attr_to_c(a: &QpAttr, cap: &QpCap) -> IbvQpAttr {
    let global = IbvAhAttr {
        is_global: 1,
        ..IbvAhAttr::default()
    };
    IbvQpAttr {
        qp_state: a.qp_state.into(),
        cur_qp_state: a.cur_qp_state.into(),
        path_mtu: a.path_mtu.into(),
        // IBV_MIG_MIGRATED: no alternate paths.
        path_mig_state: 0,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        cap: cap_to_c(cap),
        ah_attr: IbvAhAttr {
            is_global: 1,
            ..ah_to_c(&a.ah)
        },
        alt_ah_attr: global,
        pkey_index: a.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: 0,
        sq_draining: a.sq_draining,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ah_round_trip() {
        let a = AhAttr {
            dgid: [7; 16],
            flow_label: 0xabcde,
            sgid_index: 3,
            hop_limit: 64,
            traffic_class: 9,
            sl: 2,
            is_global: true,
            port_num: 1,
        };
        assert_eq!(ah_from_c(&ah_to_c(&a)), a);
    }

    #[test]
    fn qp_attr_round_trip_and_bad_enum() {
        let mut c = IbvQpAttr {
            qp_state: 3,
            path_mtu: 3,
            qkey: 0x1111_1111,
            rq_psn: 5,
            sq_psn: 6,
            dest_qp_num: 0x12,
            max_rd_atomic: 4,
            timeout: 14,
            ..Default::default()
        };
        let q = qp_attr_from_c(&c, u32::MAX).unwrap();
        let back = qp_attr_to_c(&q, &QpCap::default());
        assert_eq!(
            (back.qp_state, back.qkey, back.dest_qp_num),
            (3, 0x1111_1111, 0x12)
        );
        // RoCE: both address vectors carry a GRH, set or not.
        assert_eq!((back.ah_attr.is_global, back.alt_ah_attr.is_global), (1, 1));
        c.qp_state = 300;
        assert_eq!(qp_attr_from_c(&c, u32::MAX).err(), Some(libc::EINVAL));
        // Fields outside the mask are not judged (librdmacm's
        // rdma_disconnect sets qp_state alone in an uninitialised attr).
        c.qp_state = 6;
        c.cur_qp_state = -12345;
        c.path_mtu = 0x7777_7777;
        let q = qp_attr_from_c(&c, 1).unwrap();
        assert_eq!((q.qp_state, q.cur_qp_state, q.path_mtu), (6, 0, 0));
        assert_eq!(qp_attr_from_c(&c, 1 | 0x100).err(), Some(libc::EINVAL));
    }
}
