//! `ibv_modify_qp` checks: the QP state machine with the attributes each
//! transition requires and accepts per QP type, then the attribute values.
//!
//! The transition table is the kernel's `ib_modify_qp_is_ok`, which every
//! verbs device on Linux goes through: the IBA's (Table "QP State
//! Transition Properties") for RC, UC and UD, except that RESET -> ERR is
//! not a transition (the IBA allows any state -> Error; the kernel's table
//! does not list it, and rxe answers EINVAL). Alternate paths (ALT_PATH,
//! PATH_MIG_STATE) are valid in the table but refused: rxu has no
//! automatic path migration and does not report IBV_DEVICE_AUTO_PATH_MIG.
//! XRC's initiator and target follow RC but for what their missing side
//! would need (the kernel's XRC_INI / XRC_TGT columns): the initiator's
//! INIT->RTR is UC's, the target's RTR->RTS takes only SQ_PSN and TIMEOUT.

use transport::qp::{self as tqp, QpState};

use super::mask::*;
use super::{limits, qp_attr, valid_roce_v2_gid, VerbsError};
use crate::mem::access;
use rxu_abi::proto::{QpAttr, QpType};

/// `enum ibv_qp_state` values as the control protocol carries them (u8).
pub mod state {
    use transport::verbs::QpState;
    pub const RESET: u8 = QpState::Reset as u8;
    pub const INIT: u8 = QpState::Init as u8;
    pub const RTR: u8 = QpState::Rtr as u8;
    pub const RTS: u8 = QpState::Rts as u8;
    pub const SQD: u8 = QpState::Sqd as u8;
    pub const SQE: u8 = QpState::Sqe as u8;
    pub const ERR: u8 = QpState::Err as u8;
}
use state::*;

/// Every mask bit with its `ibv_qp_attr_mask` name, in bit order.
const NAMES: [(u32, &str); 21] = [
    (STATE, "IBV_QP_STATE"),
    (CUR_STATE, "IBV_QP_CUR_STATE"),
    (EN_SQD_ASYNC_NOTIFY, "IBV_QP_EN_SQD_ASYNC_NOTIFY"),
    (ACCESS_FLAGS, "IBV_QP_ACCESS_FLAGS"),
    (PKEY_INDEX, "IBV_QP_PKEY_INDEX"),
    (PORT, "IBV_QP_PORT"),
    (QKEY, "IBV_QP_QKEY"),
    (AV, "IBV_QP_AV"),
    (PATH_MTU, "IBV_QP_PATH_MTU"),
    (TIMEOUT, "IBV_QP_TIMEOUT"),
    (RETRY_CNT, "IBV_QP_RETRY_CNT"),
    (RNR_RETRY, "IBV_QP_RNR_RETRY"),
    (RQ_PSN, "IBV_QP_RQ_PSN"),
    (MAX_QP_RD_ATOMIC, "IBV_QP_MAX_QP_RD_ATOMIC"),
    (ALT_PATH, "IBV_QP_ALT_PATH"),
    (MIN_RNR_TIMER, "IBV_QP_MIN_RNR_TIMER"),
    (SQ_PSN, "IBV_QP_SQ_PSN"),
    (MAX_DEST_RD_ATOMIC, "IBV_QP_MAX_DEST_RD_ATOMIC"),
    (PATH_MIG_STATE, "IBV_QP_PATH_MIG_STATE"),
    (CAP, "IBV_QP_CAP"),
    (DEST_QPN, "IBV_QP_DEST_QPN"),
];

/// Names of the bits of `m`, e.g. `IBV_QP_AV, IBV_QP_DEST_QPN`; unnamed
/// bits as hex.
pub fn mask_names(m: u32) -> String {
    let mut out: Vec<String> = Vec::new();
    for bit in (0..32).map(|i| 1u32 << i).filter(|b| m & b != 0) {
        match NAMES.iter().find(|(b, _)| *b == bit) {
            Some((_, n)) => out.push((*n).to_owned()),
            None => out.push(format!("{bit:#x}")),
        }
    }
    out.join(", ")
}

/// `RESET`, `INIT`, ... or the number.
pub fn state_name(s: u8) -> String {
    transport::verbs::QpState::from_u8(s)
        .map_or_else(|| format!("state {s}"), |n| n.name().to_owned())
}

fn type_name(t: QpType) -> &'static str {
    t.name()
}

/// Required and optional attributes (besides STATE) of a transition for
/// a QP type; `None` if the transition is not allowed.
pub fn transition(t: QpType, cur: u8, next: u8) -> Option<(u32, u32)> {
    use QpType::*;
    let rc = t == Rc || t == XrcSend;
    let ud = t == Ud;
    let pick = |rc_v: u32, uc_v: u32, ud_v: u32| match t {
        Rc | XrcSend | XrcRecv => rc_v,
        Uc => uc_v,
        Ud => ud_v,
    };
    // Attributes RTS->RTS, SQD->RTS and SQE->RTS may change, per type.
    let rts_opt = pick(
        CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER,
        CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE,
        CUR_STATE | QKEY,
    );
    match (cur, next) {
        (RESET..=ERR, RESET) | (INIT..=ERR, ERR) => Some((0, 0)),
        (RESET, INIT) => {
            let req = PKEY_INDEX | PORT | if ud { QKEY } else { ACCESS_FLAGS };
            Some((req, 0))
        }
        (INIT, INIT) => Some((0, PKEY_INDEX | PORT | if ud { QKEY } else { ACCESS_FLAGS })),
        (INIT, RTR) if t == XrcSend => Some((
            AV | PATH_MTU | DEST_QPN | RQ_PSN,
            ALT_PATH | ACCESS_FLAGS | PKEY_INDEX,
        )),
        (INIT, RTR) => {
            let req = pick(
                AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
                AV | PATH_MTU | DEST_QPN | RQ_PSN,
                0,
            );
            let opt = if ud {
                PKEY_INDEX | QKEY
            } else {
                ALT_PATH | ACCESS_FLAGS | PKEY_INDEX
            };
            Some((req, opt))
        }
        (RTR, RTS) if t == XrcRecv => Some((SQ_PSN | TIMEOUT, rts_opt)),
        (RTR, RTS) => {
            let req = if rc {
                SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC
            } else {
                SQ_PSN
            };
            Some((req, rts_opt))
        }
        (RTS, RTS) | (SQD, RTS) => Some((0, rts_opt)),
        (SQE, RTS) if !t.is_reliable() => {
            Some((0, pick(0, CUR_STATE | ACCESS_FLAGS, CUR_STATE | QKEY)))
        }
        (RTS, SQD) => Some((0, EN_SQD_ASYNC_NOTIFY)),
        (SQD, SQD) => Some((
            0,
            pick(
                PORT | AV
                    | TIMEOUT
                    | RETRY_CNT
                    | RNR_RETRY
                    | MAX_QP_RD_ATOMIC
                    | MAX_DEST_RD_ATOMIC
                    | ALT_PATH
                    | ACCESS_FLAGS
                    | PKEY_INDEX
                    | MIN_RNR_TIMER
                    | PATH_MIG_STATE,
                AV | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX | PATH_MIG_STATE,
                PKEY_INDEX | QKEY,
            ),
        )),
        _ => None,
    }
}

fn einval(msg: String) -> VerbsError {
    VerbsError {
        errno: libc::EINVAL,
        msg,
    }
}

/// Attributes the kernel's uverbs drops from the mask of an XRC QP before
/// checking it (`modify_qp_mask`): the responder's on an initiator, the
/// requester's on a target. perftest's `-c XRC` passes them.
fn xrc_ignored(t: QpType) -> u32 {
    match t {
        QpType::XrcSend => MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
        QpType::XrcRecv => MAX_QP_RD_ATOMIC | RETRY_CNT | RNR_RETRY,
        _ => 0,
    }
}

/// See [`super::check_modify_qp`].
pub fn check(t: QpType, cur: u8, m: u32, a: &QpAttr) -> Result<tqp::QpAttr, VerbsError> {
    let m = m & !xrc_ignored(t);
    if cur > ERR {
        return Err(einval(format!("QP is in invalid state {cur}")));
    }
    let next = if m & STATE != 0 { a.qp_state } else { cur };
    let Some(next_state) = QpState::from_u8(next) else {
        return Err(einval(format!("IBV_QP_STATE {next} is not a QP state")));
    };
    if m & CUR_STATE != 0 {
        if !matches!(a.cur_qp_state, RTR | RTS | SQD | SQE) {
            return Err(einval(format!(
                "IBV_QP_CUR_STATE may only name RTR, RTS, SQD or SQE, not {}",
                state_name(a.cur_qp_state)
            )));
        }
        if a.cur_qp_state != cur {
            return Err(einval(format!(
                "IBV_QP_CUR_STATE says {} but the QP is in {}",
                state_name(a.cur_qp_state),
                state_name(cur)
            )));
        }
    }
    let what = format!(
        "{}->{} for {}",
        state_name(cur),
        state_name(next),
        type_name(t)
    );
    let Some((req, opt)) = transition(t, cur, next) else {
        return Err(einval(format!("{what} is not a valid QP transition")));
    };
    if m & req != req {
        return Err(einval(format!("{what} needs {}", mask_names(req & !m))));
    }
    let extra = m & !(req | opt | STATE);
    if extra != 0 {
        return Err(einval(format!(
            "{what} does not take {}",
            mask_names(extra)
        )));
    }
    check_values(m, a)?;
    let state = (m & STATE != 0).then_some(next_state);
    Ok(qp_attr::transport_attr(state, m, a))
}

/// Value ranges of the attributes present in `m`.
fn check_values(m: u32, a: &QpAttr) -> Result<(), VerbsError> {
    let has = |bit: u32| m & bit != 0;
    let over = |name: &str, v: u32, max: u32| -> Result<(), VerbsError> {
        if v > max {
            return Err(einval(format!("{name} {v} above {max}")));
        }
        Ok(())
    };
    if has(ALT_PATH) || has(PATH_MIG_STATE) {
        return Err(einval(format!(
            "{} not supported: rxu has no alternate paths",
            mask_names(m & (ALT_PATH | PATH_MIG_STATE))
        )));
    }
    if has(PORT) && a.port_num != limits::PORT_NUM {
        return Err(einval(format!(
            "IBV_QP_PORT {}: the only port is 1",
            a.port_num
        )));
    }
    if has(PKEY_INDEX) {
        over(
            "IBV_QP_PKEY_INDEX",
            u32::from(a.pkey_index),
            u32::from(limits::MAX_PKEYS) - 1,
        )?;
    }
    if has(ACCESS_FLAGS) {
        let known = access::LOCAL_WRITE
            | access::REMOTE_WRITE
            | access::REMOTE_READ
            | access::REMOTE_ATOMIC
            | access::MW_BIND
            | access::ZERO_BASED
            | access::ON_DEMAND
            | access::HUGETLB
            | access::FLUSH_GLOBAL
            | access::FLUSH_PERSISTENT
            | access::OPTIONAL_RANGE;
        if a.qp_access_flags & !known != 0 {
            return Err(einval(format!(
                "IBV_QP_ACCESS_FLAGS {:#x} has unknown bits",
                a.qp_access_flags
            )));
        }
    }
    if has(PATH_MTU) && !(1..=limits::MAX_MTU).contains(&a.path_mtu) {
        return Err(einval(format!(
            "IBV_QP_PATH_MTU {} is not an MTU (1 = 256 .. 5 = 4096)",
            a.path_mtu
        )));
    }
    if has(TIMEOUT) {
        over("IBV_QP_TIMEOUT", a.timeout.into(), 31)?;
    }
    if has(RETRY_CNT) {
        over("IBV_QP_RETRY_CNT", a.retry_cnt.into(), 7)?;
    }
    if has(RNR_RETRY) {
        over("IBV_QP_RNR_RETRY", a.rnr_retry.into(), 7)?;
    }
    if has(MIN_RNR_TIMER) {
        over("IBV_QP_MIN_RNR_TIMER", a.min_rnr_timer.into(), 31)?;
    }
    if has(MAX_QP_RD_ATOMIC) {
        let max = limits::MAX_QP_INIT_RD_ATOM.into();
        over("IBV_QP_MAX_QP_RD_ATOMIC", a.max_rd_atomic.into(), max)?;
    }
    if has(MAX_DEST_RD_ATOMIC) {
        let max = limits::MAX_QP_RD_ATOM.into();
        over(
            "IBV_QP_MAX_DEST_RD_ATOMIC",
            a.max_dest_rd_atomic.into(),
            max,
        )?;
    }
    if has(DEST_QPN) {
        over("IBV_QP_DEST_QPN", a.dest_qp_num, 0xFF_FFFF)?;
    }
    if has(AV) {
        check_av(a)?;
    }
    Ok(())
}

fn check_av(a: &QpAttr) -> Result<(), VerbsError> {
    let ah = &a.ah;
    if !ah.is_global {
        return Err(einval(
            "IBV_QP_AV needs is_global: RoCE addresses by GID".to_owned(),
        ));
    }
    if ah.port_num != limits::PORT_NUM {
        return Err(einval(format!(
            "IBV_QP_AV port_num {}: the only port is 1",
            ah.port_num
        )));
    }
    if u32::from(ah.sgid_index) >= limits::GID_TBL_LEN {
        return Err(einval(format!(
            "IBV_QP_AV sgid_index {} outside the GID table ({} entries)",
            ah.sgid_index,
            limits::GID_TBL_LEN
        )));
    }
    if !valid_roce_v2_gid(&ah.dgid) {
        return Err(einval(format!(
            "IBV_QP_AV dgid {} is not a RoCE v2 unicast GID",
            std::net::Ipv6Addr::from(ah.dgid)
        )));
    }
    Ok(())
}
