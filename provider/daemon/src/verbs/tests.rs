//! check_modify_qp against the IBA transition table, written out here
//! independently of the implementation: every state pair, QP type and
//! subset of the required attributes; value ranges; and arbitrary input.

use super::mask::*;
use super::state::*;
use super::*;
use proptest::prelude::*;
use rxu_abi::proto::AhAttr;

/// The state an accepted modify moves the QP to: the tests here are about
/// the state machine and the value ranges (`qp_attr` tests the attributes
/// a modify hands the transport).
fn check_modify_qp(t: QpType, cur: u8, m: u32, a: &QpAttr) -> Result<u8, VerbsError> {
    super::check_modify_qp(t, cur, m, a).map(|ta| ta.state.map_or(cur, |s| s as u8))
}

const TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];
const ALL_BITS: [u32; 21] = [
    STATE,
    CUR_STATE,
    EN_SQD_ASYNC_NOTIFY,
    ACCESS_FLAGS,
    PKEY_INDEX,
    PORT,
    QKEY,
    AV,
    PATH_MTU,
    TIMEOUT,
    RETRY_CNT,
    RNR_RETRY,
    RQ_PSN,
    MAX_QP_RD_ATOMIC,
    ALT_PATH,
    MIN_RNR_TIMER,
    SQ_PSN,
    MAX_DEST_RD_ATOMIC,
    PATH_MIG_STATE,
    CAP,
    DEST_QPN,
];

/// (from, to, type, required, optional) per the IBA, for the transitions
/// other than "any -> RESET" and "any but RESET -> ERR" (which take
/// nothing).
fn iba_rows() -> Vec<(u8, u8, QpType, u32, u32)> {
    use QpType::*;
    let rts_rc = CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER;
    let rts_uc = CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE;
    let rts_ud = CUR_STATE | QKEY;
    let rtr_rc = AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
    let sqd_rc = PORT
        | AV
        | TIMEOUT
        | RETRY_CNT
        | RNR_RETRY
        | MAX_QP_RD_ATOMIC
        | MAX_DEST_RD_ATOMIC
        | ALT_PATH
        | ACCESS_FLAGS
        | PKEY_INDEX
        | MIN_RNR_TIMER
        | PATH_MIG_STATE;
    let rts_req_rc = SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC;
    vec![
        (RESET, INIT, Rc, PKEY_INDEX | PORT | ACCESS_FLAGS, 0),
        (RESET, INIT, Uc, PKEY_INDEX | PORT | ACCESS_FLAGS, 0),
        (RESET, INIT, Ud, PKEY_INDEX | PORT | QKEY, 0),
        (INIT, INIT, Rc, 0, PKEY_INDEX | PORT | ACCESS_FLAGS),
        (INIT, INIT, Uc, 0, PKEY_INDEX | PORT | ACCESS_FLAGS),
        (INIT, INIT, Ud, 0, PKEY_INDEX | PORT | QKEY),
        (INIT, RTR, Rc, rtr_rc, ALT_PATH | ACCESS_FLAGS | PKEY_INDEX),
        (
            INIT,
            RTR,
            Uc,
            AV | PATH_MTU | DEST_QPN | RQ_PSN,
            ALT_PATH | ACCESS_FLAGS | PKEY_INDEX,
        ),
        (INIT, RTR, Ud, 0, PKEY_INDEX | QKEY),
        (RTR, RTS, Rc, rts_req_rc, rts_rc),
        (RTR, RTS, Uc, SQ_PSN, rts_uc),
        (RTR, RTS, Ud, SQ_PSN, rts_ud),
        (RTS, RTS, Rc, 0, rts_rc),
        (RTS, RTS, Uc, 0, rts_uc),
        (RTS, RTS, Ud, 0, rts_ud),
        (RTS, SQD, Rc, 0, EN_SQD_ASYNC_NOTIFY),
        (RTS, SQD, Uc, 0, EN_SQD_ASYNC_NOTIFY),
        (RTS, SQD, Ud, 0, EN_SQD_ASYNC_NOTIFY),
        (SQD, RTS, Rc, 0, rts_rc),
        (SQD, RTS, Uc, 0, rts_uc),
        (SQD, RTS, Ud, 0, rts_ud),
        (SQD, SQD, Rc, 0, sqd_rc),
        (
            SQD,
            SQD,
            Uc,
            0,
            AV | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX | PATH_MIG_STATE,
        ),
        (SQD, SQD, Ud, 0, PKEY_INDEX | QKEY),
        (SQE, RTS, Uc, 0, CUR_STATE | ACCESS_FLAGS),
        (SQE, RTS, Ud, 0, CUR_STATE | QKEY),
    ]
}

fn expected(t: QpType, cur: u8, next: u8) -> Option<(u32, u32)> {
    if next == RESET || (next == ERR && cur != RESET) {
        return Some((0, 0));
    }
    iba_rows()
        .into_iter()
        .find(|r| r.0 == cur && r.1 == next && r.2 == t)
        .map(|r| (r.3, r.4))
}

/// Attributes that are valid for every transition from `cur` to `next`.
fn good(cur: u8, next: u8) -> QpAttr {
    QpAttr {
        qp_state: next,
        cur_qp_state: cur,
        path_mtu: 3,
        qkey: 0x1111_1111,
        rq_psn: 1,
        sq_psn: 2,
        dest_qp_num: 0x12,
        qp_access_flags: 0x7,
        pkey_index: 0,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        port_num: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ah: AhAttr {
            dgid: gid_of("127.0.0.1".parse().unwrap()),
            is_global: true,
            port_num: 1,
            hop_limit: 64,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    }
}

fn names_in(msg: &str, bits: u32) -> bool {
    ALL_BITS
        .iter()
        .filter(|b| bits & **b != 0)
        .all(|b| msg.contains(&mask_names(*b)))
}

#[test]
fn transition_table_matches_iba() {
    for t in TYPES {
        for cur in 0..=ERR {
            for next in 0..=ERR {
                assert_eq!(
                    modify::transition(t, cur, next),
                    expected(t, cur, next),
                    "{t:?} {} -> {}",
                    state_name(cur),
                    state_name(next)
                );
            }
        }
    }
}

#[test]
fn every_transition_type_and_required_subset() {
    let mut checked = 0u32;
    for t in TYPES {
        for cur in 0..=ERR {
            for next in 0..=ERR {
                let a = good(cur, next);
                let what = format!("{t:?} {}->{}", state_name(cur), state_name(next));
                let Some((req, opt)) = expected(t, cur, next) else {
                    let all = 0x1f_ffff & !CUR_STATE;
                    let r = check_modify_qp(t, cur, all, &a).unwrap_err();
                    assert!(r.msg.contains("not a valid QP transition"), "{what}: {r}");
                    let r = check_modify_qp(t, cur, STATE, &a).unwrap_err();
                    assert_eq!(r.errno, libc::EINVAL);
                    continue;
                };
                assert_eq!(check_modify_qp(t, cur, STATE | req, &a), Ok(next), "{what}");
                // Every proper subset of the required attributes is refused,
                // and the message names exactly what is missing.
                let bits: Vec<u32> = ALL_BITS.iter().copied().filter(|b| req & b != 0).collect();
                for sub in 0..(1u32 << bits.len()) - 1 {
                    let given = bits
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| sub & (1 << i) != 0)
                        .fold(0, |m, (_, b)| m | b);
                    let e = check_modify_qp(t, cur, STATE | given, &a).unwrap_err();
                    assert_eq!(e.errno, libc::EINVAL);
                    assert!(e.msg.contains("needs"), "{what}: {e}");
                    assert!(names_in(&e.msg, req & !given), "{what}: {e}");
                    assert!(!names_in(&e.msg, given) || given == 0, "{what}: {e}");
                    checked += 1;
                }
                // Optional attributes are taken (alternate paths refused as
                // unsupported); anything else is refused by name.
                for b in ALL_BITS.iter().copied().filter(|b| *b != STATE) {
                    let r = check_modify_qp(t, cur, STATE | req | b, &a);
                    if opt & b != 0 && b != ALT_PATH && b != PATH_MIG_STATE {
                        assert_eq!(r, Ok(next), "{what} + {}", mask_names(b));
                    } else if req & b == 0 {
                        let e = r.unwrap_err();
                        assert!(names_in(&e.msg, b), "{what} + {}: {e}", mask_names(b));
                    }
                    checked += 1;
                }
                let e = check_modify_qp(t, cur, STATE | req | 1 << 25, &a).unwrap_err();
                assert!(e.msg.contains("0x2000000"), "{e}");
            }
        }
    }
    assert!(checked > 1000, "{checked}");
}

#[test]
fn messages_name_the_transition_and_attribute() {
    let a = good(INIT, RTR);
    let m = STATE | AV | PATH_MTU | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
    let e = check_modify_qp(QpType::Rc, INIT, m, &a).unwrap_err();
    assert_eq!(e.msg, "INIT->RTR for RC needs IBV_QP_DEST_QPN");
    assert_eq!(
        e.to_string(),
        "INIT->RTR for RC needs IBV_QP_DEST_QPN (errno 22)"
    );
    let a = good(RESET, INIT);
    let e = check_modify_qp(
        QpType::Ud,
        RESET,
        STATE | PKEY_INDEX | PORT | QKEY | ACCESS_FLAGS,
        &a,
    )
    .unwrap_err();
    assert_eq!(
        e.msg,
        "RESET->INIT for UD does not take IBV_QP_ACCESS_FLAGS"
    );
    let e = check_modify_qp(QpType::Rc, RESET, STATE, &good(RESET, RTS)).unwrap_err();
    assert_eq!(e.msg, "RESET->RTS for RC is not a valid QP transition");
    let e = check_modify_qp(QpType::Rc, SQE, STATE, &good(SQE, RTS)).unwrap_err();
    assert_eq!(e.msg, "SQE->RTS for RC is not a valid QP transition");
}

#[test]
fn what_the_pingpongs_and_perftest_send() {
    use QpType::*;
    let init = STATE | PKEY_INDEX | PORT;
    let rtr = STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN;
    let rc_rtr = rtr | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
    let rc_rts = STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC;
    let steps: [(QpType, u8, u32, u8); 9] = [
        (Rc, RESET, init | ACCESS_FLAGS, INIT),
        (Rc, INIT, rc_rtr, RTR),
        (Rc, RTR, rc_rts, RTS),
        (Uc, RESET, init | ACCESS_FLAGS, INIT),
        (Uc, INIT, rtr, RTR),
        (Uc, RTR, STATE | SQ_PSN, RTS),
        (Ud, RESET, init | QKEY, INIT),
        (Ud, INIT, STATE, RTR),
        (Ud, RTR, STATE | SQ_PSN, RTS),
    ];
    for (t, cur, m, next) in steps {
        assert_eq!(
            check_modify_qp(t, cur, m, &good(cur, next)),
            Ok(next),
            "{t:?} {cur}"
        );
    }
    // Tear-down and error paths from every state but RESET -> ERR.
    for t in TYPES {
        for cur in 0..=ERR {
            assert_eq!(check_modify_qp(t, cur, STATE, &good(cur, RESET)), Ok(RESET));
            if cur != RESET {
                assert_eq!(check_modify_qp(t, cur, STATE, &good(cur, ERR)), Ok(ERR));
            }
        }
    }
}

/// RESET -> ERR is EINVAL, as the kernel's transition table (and so rxe)
/// has it, although the IBA would allow it.
#[test]
fn reset_to_err_is_refused_as_the_kernel_does() {
    for t in TYPES {
        let e = check_modify_qp(t, RESET, STATE, &good(RESET, ERR)).unwrap_err();
        assert_eq!(e.errno, libc::EINVAL, "{t:?}: {e:?}");
        assert!(e.msg.contains("RESET->ERR"), "{}", e.msg);
    }
}

#[test]
fn modify_without_state_keeps_the_state() {
    let a = good(RTS, RTS);
    assert_eq!(check_modify_qp(QpType::Rc, RTS, MIN_RNR_TIMER, &a), Ok(RTS));
    assert_eq!(check_modify_qp(QpType::Rc, RESET, 0, &a), Ok(RESET));
    assert_eq!(
        check_modify_qp(QpType::Rc, INIT, ACCESS_FLAGS, &a),
        Ok(INIT)
    );
    assert!(check_modify_qp(QpType::Rc, RTS, TIMEOUT, &a).is_err());
    assert!(
        check_modify_qp(QpType::Rc, RTR, 0, &a).is_err(),
        "no RTR->RTR"
    );
}

#[test]
fn cur_state_must_be_true_and_allowed() {
    let mut a = good(RTR, RTS);
    let m = STATE | SQ_PSN | CUR_STATE;
    assert_eq!(check_modify_qp(QpType::Uc, RTR, m, &a), Ok(RTS));
    a.cur_qp_state = RTS;
    let e = check_modify_qp(QpType::Uc, RTR, m, &a).unwrap_err();
    assert!(
        e.msg
            .contains("IBV_QP_CUR_STATE says RTS but the QP is in RTR"),
        "{e}"
    );
    let mut a = good(INIT, RTR);
    let e = check_modify_qp(QpType::Ud, INIT, STATE | CUR_STATE, &a).unwrap_err();
    assert!(e.msg.contains("IBV_QP_CUR_STATE"), "{e}");
    a.cur_qp_state = 9;
    assert!(check_modify_qp(QpType::Ud, INIT, STATE | CUR_STATE, &a).is_err());
    let a = good(SQE, RTS);
    assert_eq!(
        check_modify_qp(QpType::Ud, SQE, STATE | CUR_STATE, &a),
        Ok(RTS)
    );
}

#[test]
fn states_out_of_range() {
    let a = good(RESET, 7);
    assert!(check_modify_qp(QpType::Rc, RESET, STATE, &a)
        .unwrap_err()
        .msg
        .contains("IBV_QP_STATE 7"));
    assert!(check_modify_qp(QpType::Rc, 7, STATE, &good(7, RESET)).is_err());
    assert!(check_modify_qp(QpType::Rc, 255, 0, &good(0, 0)).is_err());
}

/// One attribute changed from `good`, for a transition that takes it.
struct ValueCase {
    t: QpType,
    cur: u8,
    next: u8,
    mask: u32,
    set: Box<dyn Fn(&mut QpAttr)>,
    ok: bool,
    name: &'static str,
}

fn value_cases() -> Vec<ValueCase> {
    use QpType::*;
    let init = STATE | PKEY_INDEX | PORT | ACCESS_FLAGS;
    let rtr = STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
    let rts = STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC;
    fn c(
        cur: u8,
        next: u8,
        mask: u32,
        set: impl Fn(&mut QpAttr) + 'static,
        ok: bool,
        name: &'static str,
    ) -> ValueCase {
        ValueCase {
            t: Rc,
            cur,
            next,
            mask,
            set: Box::new(set),
            ok,
            name,
        }
    }
    let mut v = vec![
        c(RESET, INIT, init, |a| a.port_num = 2, false, "IBV_QP_PORT"),
        c(RESET, INIT, init, |a| a.port_num = 0, false, "IBV_QP_PORT"),
        c(
            RESET,
            INIT,
            init,
            |a| a.pkey_index = 1,
            false,
            "IBV_QP_PKEY_INDEX",
        ),
        c(
            RESET,
            INIT,
            init,
            |a| a.qp_access_flags = 1 << 15,
            false,
            "IBV_QP_ACCESS_FLAGS",
        ),
        c(
            RESET,
            INIT,
            init,
            |a| a.qp_access_flags = 0xf | 1 << 20,
            true,
            "",
        ),
        c(RESET, INIT, init, |a| a.qp_access_flags = 0, true, ""),
        c(INIT, RTR, rtr, |a| a.path_mtu = 0, false, "IBV_QP_PATH_MTU"),
        c(INIT, RTR, rtr, |a| a.path_mtu = 6, false, "IBV_QP_PATH_MTU"),
        c(INIT, RTR, rtr, |a| a.path_mtu = 1, true, ""),
        c(INIT, RTR, rtr, |a| a.path_mtu = 5, true, ""),
        c(
            INIT,
            RTR,
            rtr,
            |a| a.dest_qp_num = 0x100_0000,
            false,
            "IBV_QP_DEST_QPN",
        ),
        c(INIT, RTR, rtr, |a| a.dest_qp_num = 0xff_ffff, true, ""),
        c(INIT, RTR, rtr, |a| a.rq_psn = u32::MAX, true, ""),
        c(
            INIT,
            RTR,
            rtr,
            |a| a.min_rnr_timer = 32,
            false,
            "IBV_QP_MIN_RNR_TIMER",
        ),
        c(INIT, RTR, rtr, |a| a.min_rnr_timer = 31, true, ""),
        c(
            INIT,
            RTR,
            rtr,
            |a| a.max_dest_rd_atomic = 129,
            false,
            "IBV_QP_MAX_DEST_RD_ATOMIC",
        ),
        c(INIT, RTR, rtr, |a| a.max_dest_rd_atomic = 128, true, ""),
        c(INIT, RTR, rtr, |a| a.max_dest_rd_atomic = 0, true, ""),
        c(
            INIT,
            RTR,
            rtr,
            |a| a.ah.is_global = false,
            false,
            "is_global",
        ),
        c(INIT, RTR, rtr, |a| a.ah.port_num = 2, false, "port_num"),
        c(
            INIT,
            RTR,
            rtr,
            |a| a.ah.sgid_index = 16,
            false,
            "sgid_index",
        ),
        c(INIT, RTR, rtr, |a| a.ah.sgid_index = 15, true, ""),
        c(RTR, RTS, rts, |a| a.timeout = 32, false, "IBV_QP_TIMEOUT"),
        c(RTR, RTS, rts, |a| a.timeout = 31, true, ""),
        c(RTR, RTS, rts, |a| a.timeout = 0, true, ""),
        c(
            RTR,
            RTS,
            rts,
            |a| a.retry_cnt = 8,
            false,
            "IBV_QP_RETRY_CNT",
        ),
        c(
            RTR,
            RTS,
            rts,
            |a| a.rnr_retry = 8,
            false,
            "IBV_QP_RNR_RETRY",
        ),
        c(RTR, RTS, rts, |a| a.rnr_retry = 7, true, ""),
        c(
            RTR,
            RTS,
            rts,
            |a| a.max_rd_atomic = 129,
            false,
            "IBV_QP_MAX_QP_RD_ATOMIC",
        ),
        c(RTR, RTS, rts, |a| a.max_rd_atomic = 128, true, ""),
        c(RTR, RTS, rts, |a| a.sq_psn = u32::MAX, true, ""),
        c(RTR, RTS, rts | ALT_PATH, |_| (), false, "IBV_QP_ALT_PATH"),
        c(
            RTS,
            RTS,
            STATE | PATH_MIG_STATE,
            |_| (),
            false,
            "IBV_QP_PATH_MIG_STATE",
        ),
    ];
    // Destination GIDs.
    let gid_cases: [(&str, bool); 10] = [
        ("::ffff:127.0.0.1", true),
        ("::ffff:10.1.2.3", true),
        ("::1", true),
        ("2001:db8::1", true),
        ("::", false),
        ("::ffff:0.0.0.0", false),
        ("::ffff:224.0.0.1", false),
        ("::ffff:255.255.255.255", false),
        ("ff02::1", false),
        ("fe80::1", false),
    ];
    for (g, ok) in gid_cases {
        v.push(c(INIT, RTR, rtr, move |a| a.ah.dgid = gid(g), ok, "dgid"));
    }
    // UD's Q_Key takes any value.
    v.push(ValueCase {
        t: Ud,
        cur: RESET,
        next: INIT,
        mask: STATE | PKEY_INDEX | PORT | QKEY,
        set: Box::new(|a| a.qkey = u32::MAX),
        ok: true,
        name: "",
    });
    v
}

fn gid(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

#[test]
fn value_ranges() {
    for (i, c) in value_cases().into_iter().enumerate() {
        let mut a = good(c.cur, c.next);
        (c.set)(&mut a);
        let r = check_modify_qp(c.t, c.cur, c.mask, &a);
        if c.ok {
            assert_eq!(r, Ok(c.next), "case {i}");
        } else {
            let e = r.unwrap_err();
            assert_eq!(e.errno, libc::EINVAL, "case {i}");
            assert!(e.msg.contains(c.name), "case {i}: {e}");
        }
    }
}

#[test]
fn roce_gids() {
    assert!(valid_roce_v2_gid(&gid_of("192.168.1.1".parse().unwrap())));
    assert!(valid_roce_v2_gid(&gid("2001:db8::5")));
    assert!(
        !valid_roce_v2_gid(&gid("febf::1")),
        "fe80::/10 is link-local"
    );
    assert!(valid_roce_v2_gid(&gid("fec0::1")));
    assert_eq!(
        addr_of_gid(&gid_of("10.0.0.1".parse().unwrap())).to_string(),
        "10.0.0.1"
    );
    assert_eq!(
        mask_names(STATE | DEST_QPN | 1 << 30),
        "IBV_QP_STATE, IBV_QP_DEST_QPN, 0x40000000"
    );
    assert_eq!(state_name(3), "RTS");
    assert_eq!(state_name(9), "state 9");
}

#[test]
fn the_cm_names_gid_entries_as_the_gid_table_orders_them() {
    // rdma_cm's address vectors (rxu_cm) must name the entry this table
    // gives the source address, or a QP would send from another GID.
    let ip = |s: &str| -> std::net::IpAddr { s.parse().unwrap() };
    let lists = [
        vec![ip("127.0.0.1")],
        vec![ip("::1"), ip("127.0.0.1")],
        vec![
            ip("fd00::2"),
            ip("10.0.0.1"),
            ip("::1"),
            ip("10.0.0.2"),
            ip("10.0.0.1"),
        ],
    ];
    for addrs in lists {
        let table = gid_table(&addrs);
        for a in &addrs {
            let g = gid_of(*a);
            let want = table.iter().position(|t| *t == g).unwrap();
            assert_eq!(
                usize::from(rxu_cm::engine::sgid_index(&addrs, &g)),
                want,
                "{a} in {addrs:?}"
            );
        }
    }
}

fn any_attr() -> impl Strategy<Value = QpAttr> {
    let ah = (
        any::<[u8; 16]>(),
        any::<u32>(),
        any::<u8>(),
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(
            |(dgid, flow_label, sgid_index, is_global, port_num)| AhAttr {
                dgid,
                flow_label,
                sgid_index,
                is_global,
                port_num,
                ..AhAttr::default()
            },
        );
    let small = (
        0u8..10,
        0u8..10,
        0u8..8,
        0u8..40,
        0u8..10,
        0u8..40,
        0u8..10,
        0u8..10,
    );
    let big = (
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
        any::<[u8; 2]>(),
    );
    (small, big, ah).prop_map(|(s, b, ah)| QpAttr {
        qp_state: s.0,
        cur_qp_state: s.1,
        path_mtu: s.2,
        timeout: s.3,
        retry_cnt: s.4,
        min_rnr_timer: s.5,
        rnr_retry: s.6,
        port_num: s.7,
        qkey: b.0,
        dest_qp_num: b.1 & 0x1ff_ffff,
        qp_access_flags: b.2,
        sq_psn: b.3,
        pkey_index: b.4 % 3,
        max_rd_atomic: b.5[0],
        max_dest_rd_atomic: b.5[1],
        ah,
        ..QpAttr::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// No input panics; an accepted call moves to the asked state using
    /// only attributes the transition takes.
    #[test]
    fn never_panics_and_accepts_only_the_table(t in prop::sample::select(TYPES.to_vec()),
                                               cur in 0u8..9,
                                               mask in prop_oneof![any::<u32>(), 0u32..0x20_0000,
                                                   prop::sample::select(ALL_BITS.to_vec())
                                                       .prop_map(|b| b | STATE)],
                                               a in any_attr()) {
        if let Ok(next) = check_modify_qp(t, cur, mask, &a) {
            prop_assert!(next <= ERR && cur <= ERR);
            let want = if mask & STATE != 0 { a.qp_state } else { cur };
            prop_assert_eq!(next, want);
            let (req, opt) = expected(t, cur, next).unwrap();
            prop_assert_eq!(mask & req, req);
            prop_assert_eq!(mask & !(req | opt | STATE), 0);
        }
    }
}

/// The kernel's XRC_INI / XRC_TGT columns, with the attributes uverbs drops
/// from an XRC QP's mask first: what ibv_xsrq_pingpong and perftest's
/// `-c XRC` send.
#[test]
fn xrc_columns_as_the_kernel() {
    use QpType::*;
    let init = STATE | PKEY_INDEX | PORT | ACCESS_FLAGS;
    let rtr = STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN;
    let rc_rtr = rtr | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
    let rc_rts = STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC;
    let ok = [
        (XrcSend, RESET, init, INIT),
        (XrcSend, INIT, rtr, RTR),
        // perftest: MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER are dropped.
        (XrcSend, INIT, rc_rtr, RTR),
        (XrcSend, RTR, rc_rts, RTS),
        (XrcRecv, RESET, init, INIT),
        (XrcRecv, INIT, rc_rtr, RTR),
        (XrcRecv, RTR, STATE | TIMEOUT | SQ_PSN, RTS),
        // perftest: the requester's attributes are dropped.
        (XrcRecv, RTR, rc_rts, RTS),
    ];
    for (t, cur, m, next) in ok {
        assert_eq!(
            check_modify_qp(t, cur, m, &good(cur, next)),
            Ok(next),
            "{t:?} {} -> {}",
            state_name(cur),
            state_name(next)
        );
    }
    let refused = [
        (XrcSend, INIT, rtr & !RQ_PSN, RTR),
        (XrcSend, RTR, rc_rts & !RETRY_CNT, RTS),
        (XrcRecv, INIT, rc_rtr & !MIN_RNR_TIMER, RTR),
        (XrcRecv, RTR, STATE | SQ_PSN, RTS),
    ];
    for (t, cur, m, next) in refused {
        let e = check_modify_qp(t, cur, m, &good(cur, next)).unwrap_err();
        assert_eq!(e.errno, libc::EINVAL, "{t:?}: {e:?}");
    }
}
