//! The attributes of an `ibv_modify_qp`, under its mask, in one table:
//! for each attribute the copy the QP keeps (what `ibv_query_qp` reports)
//! and the transport's form of it. Both walks read [`FIELDS`], so an
//! attribute is added or changed in one row.
//!
//! The values have been checked (see [`super::modify`]) before either
//! walk runs: the conversions here do not check again.

use transport::qp::{self as tqp, Mtu, QpState};
use transport::Psn;

use super::addr_of_gid;
use super::mask::*;
use rxu_abi::proto::QpAttr;

/// One attribute a modify may carry.
struct Field {
    bit: u32,
    /// Into the attributes the QP keeps for query_qp.
    keep: fn(&mut QpAttr, &QpAttr),
    /// Into the transport's attributes (a no-op for what the transport
    /// has no use for: the port and the P_Key index).
    take: fn(&mut tqp::QpAttr, &QpAttr),
}

/// Every attribute but the state (which [`super::modify::check`] decides)
/// and those never accepted (CAP, ALT_PATH, PATH_MIG_STATE, and
/// CUR_STATE / EN_SQD_ASYNC_NOTIFY, which only qualify the transition).
const FIELDS: [Field; 15] = [
    Field {
        bit: PATH_MTU,
        keep: |d, a| d.path_mtu = a.path_mtu,
        take: |t, a| t.path_mtu = Mtu::from_enum(a.path_mtu),
    },
    Field {
        bit: QKEY,
        keep: |d, a| d.qkey = a.qkey,
        take: |t, a| t.qkey = Some(a.qkey),
    },
    Field {
        bit: RQ_PSN,
        keep: |d, a| d.rq_psn = a.rq_psn & Psn::MASK,
        take: |t, a| t.rq_psn = Some(Psn::new(a.rq_psn)),
    },
    Field {
        bit: SQ_PSN,
        keep: |d, a| d.sq_psn = a.sq_psn & Psn::MASK,
        take: |t, a| t.sq_psn = Some(Psn::new(a.sq_psn)),
    },
    Field {
        bit: DEST_QPN,
        keep: |d, a| d.dest_qp_num = a.dest_qp_num,
        take: |t, a| t.dest_qpn = Some(a.dest_qp_num),
    },
    Field {
        bit: ACCESS_FLAGS,
        keep: |d, a| d.qp_access_flags = a.qp_access_flags,
        take: |t, a| t.access_flags = Some(a.qp_access_flags),
    },
    Field {
        bit: PKEY_INDEX,
        keep: |d, a| d.pkey_index = a.pkey_index,
        take: |_, _| {},
    },
    Field {
        bit: MAX_QP_RD_ATOMIC,
        keep: |d, a| d.max_rd_atomic = a.max_rd_atomic,
        take: |t, a| t.max_rd_atomic = Some(a.max_rd_atomic),
    },
    Field {
        bit: MAX_DEST_RD_ATOMIC,
        keep: |d, a| d.max_dest_rd_atomic = a.max_dest_rd_atomic,
        take: |t, a| t.max_dest_rd_atomic = Some(a.max_dest_rd_atomic),
    },
    Field {
        bit: MIN_RNR_TIMER,
        keep: |d, a| d.min_rnr_timer = a.min_rnr_timer,
        take: |t, a| t.min_rnr_timer = Some(a.min_rnr_timer),
    },
    Field {
        bit: PORT,
        keep: |d, a| d.port_num = a.port_num,
        take: |_, _| {},
    },
    Field {
        bit: TIMEOUT,
        keep: |d, a| d.timeout = a.timeout,
        take: |t, a| t.timeout = Some(a.timeout),
    },
    Field {
        bit: RETRY_CNT,
        keep: |d, a| d.retry_cnt = a.retry_cnt,
        take: |t, a| t.retry_cnt = Some(a.retry_cnt),
    },
    Field {
        bit: RNR_RETRY,
        keep: |d, a| d.rnr_retry = a.rnr_retry,
        take: |t, a| t.rnr_retry = Some(a.rnr_retry),
    },
    Field {
        bit: AV,
        keep: |d, a| d.ah = a.ah,
        take: |t, a| {
            t.dest_addr = Some(addr_of_gid(&a.ah.dgid));
            t.flow_label = Some(a.ah.flow_label & 0xF_FFFF);
        },
    },
];

/// The transport's attributes for a checked modify: the state it moves
/// to (if the mask has IBV_QP_STATE) and the attributes of `m`.
pub fn transport_attr(state: Option<QpState>, m: u32, a: &QpAttr) -> tqp::QpAttr {
    let mut t = tqp::QpAttr {
        state,
        ..tqp::QpAttr::default()
    };
    for f in FIELDS.iter().filter(|f| m & f.bit != 0) {
        (f.take)(&mut t, a);
    }
    t
}

/// Copies the attributes of `m` into those the QP keeps (after the
/// transport took them).
pub fn keep_attr(dst: &mut QpAttr, m: u32, a: &QpAttr) {
    for f in FIELDS.iter().filter(|f| m & f.bit != 0) {
        (f.keep)(dst, a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxu_abi::proto::AhAttr;

    fn attr() -> QpAttr {
        QpAttr {
            path_mtu: 3,
            qkey: 0x1111_2222,
            rq_psn: 0xAB12_3456,
            sq_psn: 0x0065_4321,
            dest_qp_num: 0x12,
            qp_access_flags: 0x7,
            pkey_index: 3,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 5,
            min_rnr_timer: 12,
            port_num: 1,
            timeout: 14,
            retry_cnt: 6,
            rnr_retry: 7,
            ah: AhAttr {
                dgid: std::net::Ipv4Addr::new(10, 0, 0, 9)
                    .to_ipv6_mapped()
                    .octets(),
                flow_label: 0xFFF1_2345,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
                is_global: true,
                port_num: 1,
            },
            ..QpAttr::default()
        }
    }

    #[test]
    fn every_attribute_under_its_bit() {
        let a = attr();
        let all = FIELDS.iter().fold(0, |m, f| m | f.bit);
        let t = transport_attr(Some(QpState::Rtr), all, &a);
        let want = tqp::QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::M1024),
            dest_qpn: Some(0x12),
            dest_addr: Some("10.0.0.9".parse().unwrap()),
            flow_label: Some(0x1_2345),
            rq_psn: Some(Psn::new(0xAB12_3456)),
            sq_psn: Some(Psn::new(0x0065_4321)),
            qkey: Some(0x1111_2222),
            access_flags: Some(0x7),
            timeout: Some(14),
            retry_cnt: Some(6),
            rnr_retry: Some(7),
            min_rnr_timer: Some(12),
            max_rd_atomic: Some(4),
            max_dest_rd_atomic: Some(5),
        };
        assert_eq!(t, want);
        let mut kept = QpAttr::default();
        keep_attr(&mut kept, all, &a);
        let mut want = a;
        want.rq_psn &= Psn::MASK;
        want.sq_psn &= Psn::MASK;
        assert_eq!(kept, want);
    }

    /// Values of the kept attributes, one per row of the table.
    fn kept_values(a: &QpAttr) -> [u64; 15] {
        [
            a.path_mtu.into(),
            a.qkey.into(),
            a.rq_psn.into(),
            a.sq_psn.into(),
            a.dest_qp_num.into(),
            a.qp_access_flags.into(),
            a.pkey_index.into(),
            a.max_rd_atomic.into(),
            a.max_dest_rd_atomic.into(),
            a.min_rnr_timer.into(),
            a.port_num.into(),
            a.timeout.into(),
            a.retry_cnt.into(),
            a.rnr_retry.into(),
            u64::from(a.ah != AhAttr::default()),
        ]
    }

    /// How many of the transport's attributes are set.
    fn taken(t: &tqp::QpAttr) -> usize {
        [
            t.state.is_some(),
            t.path_mtu.is_some(),
            t.dest_qpn.is_some(),
            t.dest_addr.is_some(),
            t.flow_label.is_some(),
            t.rq_psn.is_some(),
            t.sq_psn.is_some(),
            t.qkey.is_some(),
            t.access_flags.is_some(),
            t.timeout.is_some(),
            t.retry_cnt.is_some(),
            t.rnr_retry.is_some(),
            t.min_rnr_timer.is_some(),
            t.max_rd_atomic.is_some(),
            t.max_dest_rd_atomic.is_some(),
        ]
        .into_iter()
        .filter(|&s| s)
        .count()
    }

    /// With [`every_attribute_under_its_bit`]: no row writes another's
    /// attribute, and bits outside the table change nothing.
    #[test]
    fn each_bit_sets_only_its_own() {
        let a = attr();
        let blank = kept_values(&QpAttr::default());
        for f in &FIELDS {
            let name = super::super::mask_names(f.bit);
            let mut kept = QpAttr::default();
            keep_attr(&mut kept, f.bit, &a);
            let changed = kept_values(&kept)
                .iter()
                .zip(blank)
                .filter(|(x, y)| **x != *y)
                .count();
            assert_eq!(changed, 1, "{name}");
            let want = match f.bit {
                PKEY_INDEX | PORT => 0,
                AV => 2,
                _ => 1,
            };
            assert_eq!(taken(&transport_attr(None, f.bit, &a)), want, "{name}");
        }
        let others = !FIELDS.iter().fold(0, |m, f| m | f.bit);
        assert_eq!(transport_attr(None, others, &a), tqp::QpAttr::default());
        let mut kept = QpAttr::default();
        keep_attr(&mut kept, others, &a);
        assert_eq!(kept, QpAttr::default());
    }
}
