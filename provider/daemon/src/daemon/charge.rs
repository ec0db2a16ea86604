//! What each verbs request takes from or gives back to the quota
//! (`quota.rs`): [`before`] checks what a request would create against
//! the limits and notes what it would destroy; [`after`] applies that
//! once the request succeeded. Kept apart from the handlers, so that
//! each handler stays about its object.

use rxu_abi::proto::Request;

use super::completion::cq_geometry;
use super::objects::Objects;
use super::qp::grant_caps;
use super::quota::Kind;
use super::reply::Refused;

/// `IBV_SRQ_MAX_WR` of `enum ibv_srq_attr_mask`.
const SRQ_MAX_WR: u32 = 1;
/// `IBV_REREG_MR_CHANGE_TRANSLATION`.
const REREG_TRANSLATION: u32 = 1;

/// Changes to apply when the request succeeds: (session, kind, amount),
/// amounts taken (positive) or given back (negative).
#[derive(Debug, Default)]
pub struct Pending(Vec<(u32, Kind, i128)>);

impl Pending {
    fn take(&mut self, id: u32, k: Kind, n: u64) {
        self.0.push((id, k, i128::from(n)));
    }

    fn give(&mut self, id: u32, k: Kind, n: u64) {
        self.0.push((id, k, -i128::from(n)));
    }
}

/// Checks request `req` of session `id` against the quota; returns what
/// to apply if it succeeds.
pub fn before(o: &Objects, id: u32, req: &Request) -> Result<Pending, Refused> {
    let mut p = Pending::default();
    let Some(s) = o.session(id) else {
        return Ok(p);
    };
    let max_inline = o.attr().max_inline_data;
    match req {
        Request::AllocPd => p.take(id, Kind::Pds, 1),
        Request::DeallocPd { pd } => {
            let owner = if s.pds.contains(pd) {
                Some(id)
            } else {
                o.pd_owner(s.group, *pd)
            };
            if let Some(owner) = owner {
                p.give(owner, Kind::Pds, 1);
            }
        }
        Request::RegMr { len, .. } => {
            p.take(id, Kind::Mrs, 1);
            p.take(id, Kind::MrBytes, *len);
        }
        Request::DeregMr { mr } => {
            let owner = o.mr_owner(s.group, *mr).unwrap_or(id);
            if let Some(m) = o.session(owner).and_then(|s| s.mrs.get(mr)) {
                p.give(owner, Kind::Mrs, 1);
                p.give(owner, Kind::MrBytes, m.len);
            }
        }
        Request::ReregMr { mr, flags, len, .. } if flags & REREG_TRANSLATION != 0 => {
            if let Some(m) = s.mrs.get(mr) {
                p.give(id, Kind::MrBytes, m.len);
                p.take(id, Kind::MrBytes, len.saturating_sub(m.len));
            }
        }
        Request::AllocMw { .. } => p.take(id, Kind::Mrs, 1),
        Request::DeallocMw { mw } if s.mws.contains_key(mw) => p.give(id, Kind::Mrs, 1),
        Request::CreateCq { cqe, channel, .. } => {
            p.take(id, Kind::Cqs, 1);
            p.take(id, Kind::CqDepth, u64::from(cq_geometry(*cqe).1));
            if *channel {
                p.take(id, Kind::Fds, 1);
            }
        }
        Request::ResizeCq { cq, cqe } => {
            if let Some(c) = s.cqs.get(cq) {
                let new = u64::from(cq_geometry(*cqe).1);
                let old = u64::from(c.cqe);
                p.take(id, Kind::CqDepth, new.saturating_sub(old));
                p.give(id, Kind::CqDepth, old.saturating_sub(new));
            }
        }
        Request::DestroyCq { cq } => {
            if let Some(c) = s.cqs.get(cq) {
                p.give(id, Kind::Cqs, 1);
                p.give(id, Kind::CqDepth, u64::from(c.cqe));
                if c.channel.is_some() {
                    p.give(id, Kind::Fds, 1);
                }
            }
        }
        Request::CreateSrq { max_wr, .. } | Request::CreateXrcSrq { max_wr, .. } => {
            p.take(id, Kind::Srqs, 1);
            p.take(id, Kind::Wqes, u64::from(*max_wr));
        }
        Request::ModifySrq {
            srq, mask, max_wr, ..
        } if mask & SRQ_MAX_WR != 0 => {
            if let Some(q) = s.srqs.get(srq) {
                p.take(id, Kind::Wqes, u64::from(max_wr.saturating_sub(q.max_wr)));
                p.give(id, Kind::Wqes, u64::from(q.max_wr.saturating_sub(*max_wr)));
            }
        }
        Request::DestroySrq { srq } => {
            if let Some(q) = s.srqs.get(srq) {
                p.give(id, Kind::Srqs, 1);
                p.give(id, Kind::Wqes, u64::from(q.max_wr));
            }
        }
        Request::CreateQp { cap, srq, .. } => {
            let c = grant_caps(*cap, srq.is_some(), max_inline);
            p.take(id, Kind::Qps, 1);
            p.take(
                id,
                Kind::Wqes,
                u64::from(c.max_send_wr) + u64::from(c.max_recv_wr),
            );
        }
        Request::CreateXrcTgtQp { .. } | Request::OpenXrcTgtQp { .. } => {
            p.take(id, Kind::Qps, 1);
        }
        Request::DestroyQp { qp } => {
            if let Some(q) = s.qps.get(qp) {
                p.give(id, Kind::Qps, 1);
                p.give(
                    id,
                    Kind::Wqes,
                    u64::from(q.cap.max_send_wr) + u64::from(q.cap.max_recv_wr),
                );
            }
        }
        Request::OpenXrcd { .. } => p.take(id, Kind::Xrcds, 1),
        Request::CloseXrcd { xrcd } if o.xrcds.opens_of(id, *xrcd) > 0 => {
            p.give(id, Kind::Xrcds, 1);
        }
        // The cmd_fd copy the daemon keeps (a second one replaces it).
        Request::BindCmdFd | Request::ImportContext if s.cmd_file.is_none() => {
            p.take(id, Kind::Fds, 1);
        }
        _ => {}
    }
    for &(who, k, n) in &p.0 {
        if n > 0 {
            o.quota.check(who, k, n as u64)?;
        }
    }
    Ok(p)
}

/// Applies `p` if the request succeeded (`ok`).
pub fn after(o: &mut Objects, p: Pending, ok: bool) {
    if !ok {
        return;
    }
    for (who, k, n) in p.0 {
        let m = u64::try_from(n.unsigned_abs()).unwrap_or(u64::MAX);
        if n > 0 {
            o.quota.add(who, k, m);
        } else {
            o.quota.release(who, k, m);
        }
    }
}
