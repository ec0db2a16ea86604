//! Queue pairs: create (caps checked against the device, rings sized
//! from the granted caps), modify (the verbs rules give the transport's
//! attributes; then the device's port limits), query, destroy.

use std::net::IpAddr;

use transport::engine::{Endpoint, QpSpec};
use transport::qp::{self as tqp, Mtu, QpState, QpTuning};

use crate::mem::DeviceMemory;
use crate::verbs::{self, mask};
use rxu_abi::proto::{abi, QpAttr, QpCap, QpType, Response};
use rxu_abi::ring::Ring;

use super::counters::DaemonCounters;
use super::objects::DeviceCqs;
use super::objects::Objects;
use super::port::Port;
use super::ready::Idle;
use super::reply::{refuse, Handled, Refused, Reply};
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

pub(super) fn create(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    counters: &mut DaemonCounters,
    port: &Port,
    id: u32,
    r: QpRequest,
) -> Handled {
    let a = objects.attr();
    let (max_wr, max_sge, max_inline, max_qp) =
        (a.max_qp_wr, a.max_sge, a.max_inline_data, a.max_qp as usize);
    let n = objects.count(|s| s.qps.len());
    if r.qp_type == QpType::XrcRecv {
        return invalid("an XRC_RECV QP is made with an XRC domain, not a PD");
    }
    // An XRC initiator has no receive side at all.
    let no_rq = r.qp_type == QpType::XrcSend;
    if no_rq && r.srq.is_some() {
        return invalid("an XRC_SEND QP takes no SRQ");
    }
    let s = objects.session_mut(id)?;
    if !s.may_use_pd(r.pd) {
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
    let own_rq = srq_id.is_none() && !no_rq;
    if c.max_send_wr > max_wr || (own_rq && c.max_recv_wr > max_wr) {
        return invalid(format!("work requests above max_qp_wr {max_wr}"));
    }
    if c.max_send_sge > max_sge || (own_rq && c.max_recv_sge > max_sge) {
        return invalid(format!("SGEs above max_sge {max_sge}"));
    }
    if c.max_inline_data > max_inline {
        return invalid(format!("max_inline_data above {max_inline}"));
    }
    if n >= max_qp {
        return refuse(libc::ENOMEM, "device QP limit reached");
    }
    let cap = grant_caps(c, !own_rq, max_inline);
    let ring_err = |e| Refused {
        errno: libc::ENOMEM,
        msg: format!("QP ring: {e}"),
    };
    let sq_slot = abi::send_slot_size(cap.max_send_sge, cap.max_inline_data);
    let sq_slots = cap.max_send_wr.saturating_add(1).next_power_of_two();
    let (sq_ring, sq_fd) = Ring::create("rxu-sq", sq_slot, sq_slots).map_err(ring_err)?;
    let mut fds = vec![sq_fd];
    let (rq, rq_slot) = if own_rq {
        let slot = abi::recv_slot_size(cap.max_recv_sge);
        let slots = cap.max_recv_wr.saturating_add(1).next_power_of_two();
        let (ring, fd) = Ring::create("rxu-rq", slot, slots).map_err(ring_err)?;
        fds.push(fd);
        (Some(ring.into_consumer()), slot)
    } else {
        (None, 0)
    };
    let qpn = endpoint
        .create_qp(QpSpec {
            qp_type: r.qp_type,
            pd: r.pd,
            send_cq: scq_id,
            recv_cq: rcq_id,
            srq: srq_id,
            xrcd: None,
            sq_sig_all: r.sq_sig_all,
            max_send_wr: cap.max_send_wr,
            max_recv_wr: cap.max_recv_wr,
        })
        .map_err(|e| Refused {
            errno: libc::ENOMEM,
            msg: format!("create_qp: {e}"),
        })?;
    let tuning = QpTuning {
        port_mtu: port.mtu(),
        ..QpTuning::default()
    };
    let _ = endpoint.set_qp_tuning(qpn, tuning, &mut DeviceCqs::new(objects, counters));
    // No port until INIT sets one (ibv_query_qp says 0, as the kernel).
    let attr = QpAttr {
        cap,
        sq_sig_all: r.sq_sig_all,
        port_num: 0,
        path_mtu: Mtu::M256 as u8,
        ..QpAttr::default()
    };
    objects.add_qp(
        id,
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
            xrcd: None,
            idle: Idle::new(),
        },
    )?;
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

pub(super) fn modify(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    counters: &mut DaemonCounters,
    port: &Port,
    id: u32,
    qpn: u32,
    (m, a): (u32, &QpAttr),
) -> Handled {
    let Some(qp) = objects.session(id).and_then(|s| s.qps.get(&qpn)) else {
        return invalid(format!("no QP {qpn:#x}"));
    };
    let qp_type = qp.qp_type;
    let net_raw = objects.session(id).is_some_and(|s| s.net_raw);
    verbs::check_qkey_privilege(m, a, net_raw).map_err(|e| Refused {
        errno: e.errno,
        msg: e.msg,
    })?;
    let cur = endpoint.qp(qpn).map_or(0, |q| q.state() as u8);
    let ta = verbs::check_modify_qp(qp_type, cur, m, a).map_err(|e| Refused {
        errno: e.errno,
        msg: e.msg,
    })?;
    let next = ta.state.map_or(cur, |s| s as u8);
    check_port_limits(port, m, a, &ta)?;
    let src = av_source(port, m, a)?;
    let mut cqs = DeviceCqs::new(objects, counters);
    endpoint
        .modify_qp(qpn, &ta, &mut cqs)
        .map_err(|e| Refused {
            errno: libc::EINVAL,
            msg: format!("modify_qp: {e}"),
        })?;
    if let Some(src) = src {
        // Its packets leave from the address of its source GID.
        let _ = endpoint.set_qp_source(qpn, src);
    }
    let s = objects.session_mut(id)?;
    let Some(qp) = s.qps.get_mut(&qpn) else {
        return invalid(format!("no QP {qpn:#x}"));
    };
    verbs::keep_attr(&mut qp.attr, m, a);
    qp.attr.qp_state = next;
    if next == QpState::Reset as u8 {
        // RESET forgets posted work; what still sits in the rings was
        // posted before the reset.
        drain(&mut qp.sq);
        if let Some(rq) = &mut qp.rq {
            drain(rq);
        }
        qp.broken = false;
        // Nor does it complete: the client drops the completions of this
        // QP it has not polled (as mlx5 cleans its CQ); these are the ones
        // not yet in its ring.
        let (scq, rcq) = (qp.send_cq, qp.recv_cq);
        for h in [scq, rcq] {
            if let Some(cq) = s.cqs.get_mut(&h) {
                cq.backlog
                    .retain(|e| abi::Cqe::new_unchecked(e).qp_num() != qpn);
            }
        }
    }
    Ok(Reply::ok(Response::Ok))
}

/// What the verbs rules cannot know: the port's active MTU, its GID table
/// and the address family it serves.
fn check_port_limits(port: &Port, m: u32, a: &QpAttr, ta: &tqp::QpAttr) -> Result<(), Refused> {
    if ta.path_mtu.is_some_and(|mtu| mtu > port.mtu()) {
        return invalid("path MTU above the port's active MTU");
    }
    if m & mask::AV != 0 {
        sgid(port, a)?;
        let dst = verbs::addr_of_gid(&a.ah.dgid);
        if !port.all_addrs() && dst.is_ipv6() != port.served().is_ipv6() {
            return invalid(format!(
                "destination GID {dst} unreachable from this device"
            ));
        }
    }
    Ok(())
}

/// The AV's source GID: EINVAL outside the GID table, ENODATA for an
/// empty entry (as the kernel's GID lookup answers).
fn sgid<'p>(port: &'p Port, a: &QpAttr) -> Result<&'p [u8; 16], Refused> {
    let i = a.ah.sgid_index;
    port.attr().gid_entry(i.into()).map_err(|errno| Refused {
        errno,
        msg: match errno {
            libc::ENODATA => format!("sgid_index {i}: no GID at this index"),
            _ => format!("sgid_index {i} outside the GID table"),
        },
    })
}

/// On a device serving all its netdev's addresses: the address of the
/// AV's source GID, which must be of the destination's family.
fn av_source(port: &Port, m: u32, a: &QpAttr) -> Result<Option<IpAddr>, Refused> {
    if !port.all_addrs() || m & mask::AV == 0 {
        return Ok(None);
    }
    let src = verbs::addr_of_gid(sgid(port, a)?);
    let dst = verbs::addr_of_gid(&a.ah.dgid);
    if src.is_ipv6() != dst.is_ipv6() {
        return invalid(format!(
            "destination GID {dst} and source GID {src} differ in address family"
        ));
    }
    Ok(Some(src))
}

pub(super) fn query(
    objects: &mut Objects,
    endpoint: &Endpoint<DeviceMemory>,
    id: u32,
    qpn: u32,
) -> Handled {
    let state = endpoint.qp(qpn).map(|q| q.state() as u8);
    let s = objects.session_mut(id)?;
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

pub(super) fn destroy(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    counters: &mut DaemonCounters,
    id: u32,
    qpn: u32,
) -> Handled {
    // As the kernel's uverbs: a QP still attached to a multicast group is
    // not destroyed (EBUSY) until the application detaches it; a client
    // that goes away loses its attachments with its QPs.
    let owned = objects.session_mut(id)?.qps.contains_key(&qpn);
    if owned
        && endpoint
            .mcast_groups()
            .any(|g| endpoint.mcast_members(g).contains(&qpn))
    {
        return refuse(
            libc::EBUSY,
            format!("QP {qpn:#x} is attached to a multicast group: detach it first"),
        );
    }
    if !objects.destroy_qp(endpoint, counters, id, qpn)? {
        return refuse(libc::ENOENT, format!("no QP {qpn:#x}"));
    }
    Ok(Reply::ok(Response::Ok))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{qp_attr, DeviceFacts};
    use rxu_abi::proto::AhAttr;

    fn port(addrs: &[&str], netdev_mtu: u32) -> Port {
        let addrs: Vec<IpAddr> = addrs.iter().map(|a| a.parse().unwrap()).collect();
        let facts = DeviceFacts {
            name: "rxut".into(),
            netdev: "lo".into(),
            addrs: addrs.clone(),
            netdev_mtu,
            node_guid: 1,
            port_up: true,
        };
        Port::new(facts, addrs[0])
    }

    fn to(dst: &str, sgid_index: u8) -> QpAttr {
        QpAttr {
            path_mtu: 3,
            ah: AhAttr {
                dgid: verbs::gid_of(dst.parse().unwrap()),
                sgid_index,
                is_global: true,
                port_num: 1,
                ..AhAttr::default()
            },
            ..QpAttr::default()
        }
    }

    fn check(p: &Port, m: u32, a: &QpAttr) -> Result<(), String> {
        let ta = qp_attr::transport_attr(None, m, a);
        check_port_limits(p, m, a, &ta).map_err(|e| {
            assert_eq!(e.errno, libc::EINVAL, "{}", e.msg);
            e.msg
        })
    }

    #[test]
    fn path_mtu_up_to_the_active_mtu() {
        // Netdev MTU 1500: active MTU 1024 (3).
        let p = port(&["10.0.0.1"], 1500);
        let mut a = to("10.0.0.2", 0);
        assert_eq!(check(&p, mask::PATH_MTU, &a), Ok(()));
        a.path_mtu = 4;
        let e = check(&p, mask::PATH_MTU, &a).unwrap_err();
        assert!(e.contains("above the port's active MTU"), "{e}");
        // Not in the mask: not looked at.
        assert_eq!(check(&p, mask::QKEY, &a), Ok(()));
    }

    #[test]
    fn av_within_the_gid_table_and_the_served_family() {
        let p = port(&["10.0.0.1"], 1500);
        assert_eq!(check(&p, mask::AV, &to("10.0.0.2", 0)), Ok(()));
        // An empty entry of the table: ENODATA, as the kernel's lookup.
        let ta = qp_attr::transport_attr(None, mask::AV, &to("10.0.0.2", 1));
        let e = check_port_limits(&p, mask::AV, &to("10.0.0.2", 1), &ta).unwrap_err();
        assert_eq!(e.errno, libc::ENODATA, "{}", e.msg);
        let e = check(&p, mask::AV, &to("10.0.0.2", verbs::GID_TBL_LEN as u8)).unwrap_err();
        assert!(e.contains("outside the GID table"), "{e}");
        let e = check(&p, mask::AV, &to("fd00::2", 0)).unwrap_err();
        assert!(e.contains("unreachable"), "{e}");
        let v6 = port(&["fd00::1"], 1500);
        assert_eq!(check(&v6, mask::AV, &to("fd00::2", 0)), Ok(()));
        assert!(check(&v6, mask::AV, &to("10.0.0.2", 0)).is_err());
    }

    #[test]
    fn all_addresses_send_from_the_source_gid_of_the_family() {
        let mut p = port(&["10.0.0.1", "fd00::1"], 1500);
        assert_eq!(av_source(&p, mask::AV, &to("10.0.0.2", 0)), Ok(None));
        p.set_all_addrs(true);
        // Both families are served: the source GID decides.
        assert_eq!(check(&p, mask::AV, &to("fd00::2", 1)), Ok(()));
        assert_eq!(
            av_source(&p, mask::AV, &to("fd00::2", 1)),
            Ok(Some("fd00::1".parse().unwrap()))
        );
        assert_eq!(
            av_source(&p, mask::AV, &to("10.0.0.2", 0)),
            Ok(Some("10.0.0.1".parse().unwrap()))
        );
        let e = av_source(&p, mask::AV, &to("10.0.0.2", 1)).unwrap_err();
        assert!(e.msg.contains("differ in address family"), "{}", e.msg);
        assert_eq!(av_source(&p, mask::QKEY, &to("10.0.0.2", 1)), Ok(None));
    }
}
