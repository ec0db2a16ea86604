//! Queue pairs: create (caps checked against the device, rings sized
//! from the granted caps), modify (verbs rules, then the transport's
//! attributes), query, destroy.

use std::net::IpAddr;

use transport::engine::QpSpec;
use transport::qp::{self as tqp, Mtu, QpState, QpTuning};
use transport::Psn;

use crate::verbs::{self, mask};
use rxu_abi::proto::{abi, QpAttr, QpCap, QpType, Response};
use rxu_abi::ring::Ring;

use super::device::{refuse, Device, Handled, Refused, Reply};
use super::session::Qp;

/// The fields of a CreateQp request.
#[derive(Clone, Copy, Debug)]
pub struct QpRequest {
    pub pd: u32,
    pub qp_type: QpType,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub srq: Option<u32>,
    pub cap: QpCap,
    pub sq_sig_all: bool,
    pub user_handle: u64,
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, Refused> {
    refuse(libc::EINVAL, msg)
}

/// Caps granted for a request that passed the device limits. Inline
/// data shares the slot body with the SGE list, so the real inline limit
/// is whichever is larger (as rxe reports it), up to the device's.
pub fn grant_caps(req: QpCap, has_srq: bool, dev_max_inline: u32) -> QpCap {
    let send_sge = req.max_send_sge.max(1);
    QpCap {
        max_send_wr: req.max_send_wr,
        max_recv_wr: if has_srq { 0 } else { req.max_recv_wr },
        max_send_sge: send_sge,
        max_recv_sge: if has_srq { 0 } else { req.max_recv_sge.max(1) },
        max_inline_data: req
            .max_inline_data
            .max(send_sge.saturating_mul(abi::SGE_SIZE as u32))
            .min(dev_max_inline),
    }
}

impl Device {
    pub(super) fn create_qp(&mut self, id: u32, r: QpRequest) -> Handled {
        let a = &self.dev_attr;
        let (max_wr, max_sge, max_inline, max_qp) =
            (a.max_qp_wr, a.max_sge, a.max_inline_data, a.max_qp as usize);
        let n = self.count(|s| s.qps.len());
        let s = self.session(id)?;
        if !s.pds.contains(&r.pd) {
            return invalid(format!("no PD {}", r.pd));
        }
        let (Some(scq), Some(rcq)) = (s.cqs.get(&r.send_cq), s.cqs.get(&r.recv_cq)) else {
            return invalid("no such CQ");
        };
        let (scq_id, rcq_id) = (scq.id, rcq.id);
        let srq_id = match r.srq {
            None => None,
            Some(h) => match s.srqs.get(&h) {
                Some(q) => Some(q.id),
                None => return invalid(format!("no SRQ {h}")),
            },
        };
        let c = r.cap;
        if c.max_send_wr > max_wr || (srq_id.is_none() && c.max_recv_wr > max_wr) {
            return invalid(format!("work requests above max_qp_wr {max_wr}"));
        }
        if c.max_send_sge > max_sge || (srq_id.is_none() && c.max_recv_sge > max_sge) {
            return invalid(format!("SGEs above max_sge {max_sge}"));
        }
        if c.max_inline_data > max_inline {
            return invalid(format!("max_inline_data above {max_inline}"));
        }
        if n >= max_qp {
            return refuse(libc::ENOMEM, "device QP limit reached");
        }
        let cap = grant_caps(c, srq_id.is_some(), max_inline);
        let ring_err = |e| Refused {
            errno: libc::ENOMEM,
            msg: format!("QP ring: {e}"),
        };
        let sq_slot = abi::send_slot_size(cap.max_send_sge, cap.max_inline_data);
        let sq_slots = cap.max_send_wr.saturating_add(1).next_power_of_two();
        let (sq_ring, sq_fd) = Ring::create("rxu-sq", sq_slot, sq_slots).map_err(ring_err)?;
        let mut fds = vec![sq_fd];
        let (rq, rq_slot) = if srq_id.is_none() {
            let slot = abi::recv_slot_size(cap.max_recv_sge);
            let slots = cap.max_recv_wr.saturating_add(1).next_power_of_two();
            let (ring, fd) = Ring::create("rxu-rq", slot, slots).map_err(ring_err)?;
            fds.push(fd);
            (Some(ring.into_consumer()), slot)
        } else {
            (None, 0)
        };
        let qpn = self
            .engine
            .create_qp(QpSpec {
                qp_type: r.qp_type,
                pd: r.pd,
                send_cq: scq_id,
                recv_cq: rcq_id,
                srq: srq_id,
                sq_sig_all: r.sq_sig_all,
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
            })
            .map_err(|e| Refused {
                errno: libc::ENOMEM,
                msg: format!("create_qp: {e}"),
            })?;
        let tuning = QpTuning {
            port_mtu: self.port_mtu,
            ..QpTuning::default()
        };
        let _ = self.engine.set_qp_tuning(qpn, tuning);
        let attr = QpAttr {
            cap,
            sq_sig_all: r.sq_sig_all,
            port_num: 1,
            path_mtu: Mtu::M256 as u8,
            ..QpAttr::default()
        };
        let s = self.session(id)?;
        s.qps.insert(
            qpn,
            Qp {
                qpn,
                qp_type: r.qp_type,
                pd: r.pd,
                send_cq: r.send_cq,
                recv_cq: r.recv_cq,
                srq: r.srq,
                cap,
                sq_sig_all: r.sq_sig_all,
                user_handle: r.user_handle,
                sq: sq_ring.into_consumer(),
                rq,
                attr,
                broken: false,
            },
        );
        self.qp_owner.insert(qpn, id);
        Ok(Reply::with_fds(
            Response::Qp {
                qpn,
                cap,
                sq_slot,
                rq_slot,
            },
            fds,
        ))
    }

    pub(super) fn modify_qp(&mut self, id: u32, qpn: u32, m: u32, a: &QpAttr) -> Handled {
        let Some(qp) = self.sessions.get(&id).and_then(|s| s.qps.get(&qpn)) else {
            return invalid(format!("no QP {qpn:#x}"));
        };
        let qp_type = qp.qp_type;
        let cur = self.engine.qp(qpn).map_or(0, |q| q.state() as u8);
        let next = verbs::check_modify_qp(qp_type, cur, m, a).map_err(|e| Refused {
            errno: e.errno,
            msg: e.msg,
        })?;
        let ta = self.transport_attr(m, a, next)?;
        let src = self.av_source(m, a)?;
        self.engine.modify_qp(qpn, &ta).map_err(|e| Refused {
            errno: libc::EINVAL,
            msg: format!("modify_qp: {e}"),
        })?;
        if let Some(src) = src {
            // Its packets leave from the address of its source GID.
            let _ = self.engine.set_qp_source(qpn, src);
        }
        let s = self.session(id)?;
        let Some(qp) = s.qps.get_mut(&qpn) else {
            return invalid(format!("no QP {qpn:#x}"));
        };
        merge_attr(&mut qp.attr, m, a);
        qp.attr.qp_state = next;
        if next == QpState::Reset as u8 {
            // RESET forgets posted work; what still sits in the rings was
            // posted before the reset.
            drain(&mut qp.sq);
            if let Some(rq) = &mut qp.rq {
                drain(rq);
            }
            qp.broken = false;
        }
        Ok(Reply::ok(Response::Ok))
    }

    /// On a device serving all its netdev's addresses: the address of the
    /// AV's source GID, which must be of the destination's family.
    fn av_source(&self, m: u32, a: &QpAttr) -> Result<Option<IpAddr>, Refused> {
        if !self.all_addrs || m & mask::AV == 0 {
            return Ok(None);
        }
        let Some(g) = self.port_attr.gids.get(usize::from(a.ah.sgid_index)) else {
            return invalid(format!(
                "sgid_index {} outside the GID table",
                a.ah.sgid_index
            ));
        };
        let src = verbs::addr_of_gid(g);
        let dst = verbs::addr_of_gid(&a.ah.dgid);
        if src.is_ipv6() != dst.is_ipv6() {
            return invalid(format!(
                "destination GID {dst} and source GID {src} differ in address family"
            ));
        }
        Ok(Some(src))
    }

    /// The transport's view of a verbs modify (already checked by verbs).
    fn transport_attr(&self, m: u32, a: &QpAttr, next: u8) -> Result<tqp::QpAttr, Refused> {
        let has = |bit: u32| m & bit != 0;
        let mut t = tqp::QpAttr::default();
        if has(mask::STATE) {
            t.state = Some(QpState::from_u8(next).ok_or(Refused {
                errno: libc::EINVAL,
                msg: format!("invalid QP state {next}"),
            })?);
        }
        if has(mask::PORT) && a.port_num != 1 {
            return invalid(format!("no port {}", a.port_num));
        }
        if has(mask::PKEY_INDEX)
            && u32::from(a.pkey_index) >= u32::from(self.port_attr.pkey_tbl_len.max(1))
        {
            return invalid("pkey_index outside the P_Key table");
        }
        if has(mask::CAP) {
            return invalid("resizing a QP is not supported");
        }
        if has(mask::PATH_MTU) {
            let Some(mtu) = Mtu::from_enum(a.path_mtu) else {
                return invalid(format!("invalid path MTU {}", a.path_mtu));
            };
            if mtu > self.port_mtu {
                return invalid("path MTU above the port's active MTU");
            }
            t.path_mtu = Some(mtu);
        }
        if has(mask::AV) {
            let ngids = self.port_attr.gids.len().max(1);
            if usize::from(a.ah.sgid_index) >= ngids {
                return invalid(format!(
                    "sgid_index {} outside the GID table",
                    a.ah.sgid_index
                ));
            }
            let dst = verbs::addr_of_gid(&a.ah.dgid);
            let family_ok = self.all_addrs || dst.is_ipv6() == self.engine.local_addr().is_ipv6();
            if !family_ok || dst.is_unspecified() {
                return invalid(format!(
                    "destination GID {dst} unreachable from this device"
                ));
            }
            t.dest_addr = Some(dst);
            t.flow_label = Some(a.ah.flow_label & 0xF_FFFF);
        }
        if has(mask::DEST_QPN) {
            t.dest_qpn = Some(a.dest_qp_num);
        }
        if has(mask::RQ_PSN) {
            t.rq_psn = Some(Psn::new(a.rq_psn));
        }
        if has(mask::SQ_PSN) {
            t.sq_psn = Some(Psn::new(a.sq_psn));
        }
        if has(mask::QKEY) {
            t.qkey = Some(a.qkey);
        }
        if has(mask::ACCESS_FLAGS) {
            t.access_flags = Some(a.qp_access_flags);
        }
        if has(mask::TIMEOUT) {
            t.timeout = Some(a.timeout);
        }
        if has(mask::RETRY_CNT) {
            t.retry_cnt = Some(a.retry_cnt);
        }
        if has(mask::RNR_RETRY) {
            t.rnr_retry = Some(a.rnr_retry);
        }
        if has(mask::MIN_RNR_TIMER) {
            t.min_rnr_timer = Some(a.min_rnr_timer);
        }
        if has(mask::MAX_QP_RD_ATOMIC) {
            if u32::from(a.max_rd_atomic) > self.dev_attr.max_qp_init_rd_atom {
                return invalid("max_rd_atomic above max_qp_init_rd_atom");
            }
            t.max_rd_atomic = Some(a.max_rd_atomic);
        }
        if has(mask::MAX_DEST_RD_ATOMIC) {
            if u32::from(a.max_dest_rd_atomic) > self.dev_attr.max_qp_rd_atom {
                return invalid("max_dest_rd_atomic above max_qp_rd_atom");
            }
            t.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
        }
        Ok(t)
    }

    pub(super) fn query_qp(&mut self, id: u32, qpn: u32) -> Handled {
        let state = self.engine.qp(qpn).map(|q| q.state() as u8);
        let s = self.session(id)?;
        let (Some(qp), Some(state)) = (s.qps.get(&qpn), state) else {
            return invalid(format!("no QP {qpn:#x}"));
        };
        let mut attr = qp.attr;
        attr.qp_state = state;
        attr.cur_qp_state = state;
        attr.cap = qp.cap;
        attr.sq_sig_all = qp.sq_sig_all;
        Ok(Reply::ok(Response::QpAttr { attr, cap: qp.cap }))
    }

    pub(super) fn destroy_qp(&mut self, id: u32, qpn: u32) -> Handled {
        let s = self.session(id)?;
        if s.qps.remove(&qpn).is_none() {
            return refuse(libc::ENOENT, format!("no QP {qpn:#x}"));
        }
        self.retire_qp(qpn);
        Ok(Reply::ok(Response::Ok))
    }
}

/// Drops every entry of a ring (bounded by its capacity).
fn drain(c: &mut rxu_abi::ring::Consumer) {
    for _ in 0..c.capacity() {
        match c.peek() {
            Ok(Some(slot)) => slot.release(),
            _ => break,
        }
    }
}

/// Copies the attributes named by `m` into the stored ones.
fn merge_attr(dst: &mut QpAttr, m: u32, a: &QpAttr) {
    let has = |bit: u32| m & bit != 0;
    if has(mask::PATH_MTU) {
        dst.path_mtu = a.path_mtu;
    }
    if has(mask::QKEY) {
        dst.qkey = a.qkey;
    }
    if has(mask::RQ_PSN) {
        dst.rq_psn = a.rq_psn & Psn::MASK;
    }
    if has(mask::SQ_PSN) {
        dst.sq_psn = a.sq_psn & Psn::MASK;
    }
    if has(mask::DEST_QPN) {
        dst.dest_qp_num = a.dest_qp_num;
    }
    if has(mask::ACCESS_FLAGS) {
        dst.qp_access_flags = a.qp_access_flags;
    }
    if has(mask::PKEY_INDEX) {
        dst.pkey_index = a.pkey_index;
    }
    if has(mask::MAX_QP_RD_ATOMIC) {
        dst.max_rd_atomic = a.max_rd_atomic;
    }
    if has(mask::MAX_DEST_RD_ATOMIC) {
        dst.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if has(mask::MIN_RNR_TIMER) {
        dst.min_rnr_timer = a.min_rnr_timer;
    }
    if has(mask::PORT) {
        dst.port_num = a.port_num;
    }
    if has(mask::TIMEOUT) {
        dst.timeout = a.timeout;
    }
    if has(mask::RETRY_CNT) {
        dst.retry_cnt = a.retry_cnt;
    }
    if has(mask::RNR_RETRY) {
        dst.rnr_retry = a.rnr_retry;
    }
    if has(mask::AV) {
        dst.ah = a.ah;
    }
}
