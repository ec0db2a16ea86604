//! The passive side of an RC/UC connection: REQ checks (duplicate, stale,
//! listener, QP type, backlog) -> CONNECT_REQUEST, REP, RTU -> ESTABLISHED.

use std::net::SocketAddr;
use std::time::Instant;

use rxu_abi::proto::cm::{event, CmEventParam, CmEventRecord, ConnParam, Ece};
use rxu_abi::proto::QpType;

use super::conn::{Conn, ConnState};
use super::ids::{Id, IdState};
use super::listen::ip_service;
use super::listen::Miss;
use super::mads::{self, padded, RejParts};
use super::route::{gid, Path};
use super::timing::{conv, peer_time, MRA_SERVICE_TIMEOUT};
use super::{Cm, CmError, MadRx};
use crate::wire::{msg_ref, rej_reason, CmMad, CmMsg, Rep, Req, Rtu, REP_PRIVATE};
use crate::wire::{port_of, CmaHeader, CMA_HDR_LEN};

impl Cm {
    /// Answers a REQ no connection takes, from the address it was sent to.
    fn issue_rej(&mut self, rx: &MadRx, mad: &CmMad, req: &Req, reason: u16) {
        let rej = mads::rej(
            mad.tid,
            RejParts {
                local: 0,
                remote: req.local_comm_id,
                msg_rejected: msg_ref::REQ,
                reason,
                ari: &[],
                private_data: &[],
            },
        );
        self.push_tx(rx.dst, rx.src, rej);
    }

    pub(crate) fn on_req(&mut self, now: Instant, rx: &MadRx, mad: &CmMad, req: &Req) {
        let guid = req.local_ca_guid;
        if let Some(&comm) = self.remote_ids.get(&(guid, req.local_comm_id)) {
            self.dup_req(comm);
            return;
        }
        if let Some(&old) = self.remote_qps.get(&(guid, req.local_qpn)) {
            // The peer's QP still has a connection here (`cm_match_req`).
            self.counters.dropped_stale += 1;
            self.issue_rej(rx, mad, req, rej_reason::STALE_CONN);
            self.dreq_stale(now, old);
            return;
        }
        let hdr = CmaHeader::parse(&req.private_data).ok();
        let qp_type = match req.transport_type {
            0 => Some(QpType::Rc),
            1 => Some(QpType::Uc),
            _ => None,
        };
        let found = match ip_service(req.service_id) {
            None => Err(Miss::NoService),
            Some((ps, port)) => self
                .find_listener(ps, port, hdr.as_ref(), qp_type.unwrap_or(QpType::Ud))
                .and_then(|l| qp_type.map(|_| l).ok_or(Miss::NoMatch)),
        };
        let listener = match found {
            Ok(l) => l,
            Err(Miss::NoService) => {
                return self.issue_rej(rx, mad, req, rej_reason::INVALID_SERVICE_ID);
            }
            Err(Miss::NoMatch) => {
                return self.issue_rej(rx, mad, req, rej_reason::CONSUMER_DEFINED);
            }
        };
        if !self.backlog_has_room(listener) {
            // ucma's -ENOMEM: no REJ, so that the peer's retry may fit.
            self.counters.dropped_backlog += 1;
            return;
        }
        let (Some(hdr), Some(qp_type)) = (hdr, qp_type) else {
            return;
        };
        let l = &self.ids[&listener];
        let (owner, ps, afonly, tos, ack) = (l.owner, l.ps, l.afonly, l.tos, l.ack_timeout);
        let local = SocketAddr::new(hdr.dst, port_of(req.service_id));
        let remote = SocketAddr::new(hdr.src, hdr.src_port);
        let mtu = req.path_mtu.min(self.cfg.mtu).max(1);
        let lat = peer_time(req.primary.local_ack_timeout);
        let mut c = Conn::new(ConnState::ReqRcvd, qp_type, hdr.dst, rx.src);
        c.parent = Some(listener);
        c.tid = mad.tid;
        c.remote_comm_id = req.local_comm_id;
        c.remote_guid = guid;
        c.remote_qpn = req.local_qpn;
        c.remote_psn = req.starting_psn;
        c.path_mtu = mtu;
        c.av_timeout = lat.max(1);
        c.responder_resources = req.initiator_depth;
        c.initiator_depth = req.responder_resources;
        c.retry_count = req.retry_count;
        c.rnr_retry_count = req.rnr_retry_count;
        c.timeout = conv(peer_time(req.local_cm_response_timeout));
        c.max_cm_retries = req.max_cm_retries;
        let path = Path {
            sgid: gid(hdr.dst),
            dgid: req.primary.local_gid,
            mtu,
            hop_limit: rx.hop_limit,
            traffic_class: req.primary.traffic_class,
            flow_label: req.primary.flow_label,
            packet_life_time: lat.saturating_sub(1),
        };
        let route = path.route_info(self.cfg.node_guid, true);
        let seq_num = self.rng.next_u32() & 0xFF_FFFF;
        let comm = self.alloc_comm_id();
        let new_id = self.new_id(Id {
            owner,
            ps,
            qp_type,
            local,
            remote: Some(remote),
            holds_port: false,
            reuseaddr: false,
            afonly,
            tos,
            ack_timeout: ack,
            state: IdState::Connect,
            backlog: 0,
            conn: Some(comm),
            seq_num,
            qkey: None,
            path: Some(path),
            addr_gone: false,
        });
        c.id = Some(new_id);
        self.conns.insert(comm, c);
        self.insert_remote(comm);
        self.push_event(
            listener,
            CmEventRecord {
                event: event::CONNECT_REQUEST,
                new_id,
                param: CmEventParam {
                    private_data: req.private_data[CMA_HDR_LEN..].to_vec(),
                    responder_resources: req.initiator_depth,
                    initiator_depth: req.responder_resources,
                    flow_control: u8::from(req.flow_control),
                    retry_count: req.retry_count,
                    rnr_retry_count: req.rnr_retry_count,
                    srq: u8::from(req.srq),
                    qp_num: req.local_qpn,
                    ..Default::default()
                },
                ece: Ece {
                    vendor_id: req.vendor_id,
                    attr_mod: mad.attr_mod,
                },
                local: Some(local),
                remote: Some(remote),
                route: Some(route),
                ..Default::default()
            },
        );
    }

    /// A REQ we already have (`cm_dup_req_handler`, rdma_cm's delayed MRA).
    fn dup_req(&mut self, comm: u32) {
        self.counters.dropped_duplicate += 1;
        let Some(c) = self.conns.get(&comm) else {
            return;
        };
        let m = match c.state {
            ConnState::ReqRcvd => Some(mads::mra(
                c.tid,
                comm,
                c.remote_comm_id,
                msg_ref::REQ,
                MRA_SERVICE_TIMEOUT,
            )),
            ConnState::RepSent => c.last.clone(),
            // A conn in TimeWait is no longer known by the peer's comm ID.
            _ => None,
        };
        if let Some(m) = m {
            self.conn_send(comm, m);
        }
    }

    /// `rdma_accept` on a passive RC id: REP.
    pub(crate) fn send_rep(
        &mut self,
        now: Instant,
        id: u32,
        p: &ConnParam,
        ece: Ece,
    ) -> Result<(), CmError> {
        if p.private_data.len() > REP_PRIVATE {
            return Err(CmError::inval(format!(
                "REP private data is at most {REP_PRIVATE} bytes"
            )));
        }
        let Some((comm, c)) = self.conn_of(id) else {
            return Err(CmError::inval("no connection request to accept"));
        };
        if c.state != ConnState::ReqRcvd {
            return Err(CmError::inval("accept only answers a connection request"));
        }
        let seq_num = self.ids[&id].seq_num;
        let rep = Rep {
            local_comm_id: comm,
            remote_comm_id: c.remote_comm_id,
            local_qkey: 0,
            local_qpn: p.qp_num & 0xFF_FFFF,
            local_eecn: 0,
            starting_psn: seq_num,
            vendor_id: ece.vendor_id & 0xFF_FFFF,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: self.cfg.timing.local_ack_delay,
            failover_accepted: 0,
            flow_control: p.flow_control != 0,
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: p.srq != 0,
            local_ca_guid: self.cfg.node_guid,
            private_data: padded::<REP_PRIVATE>(&p.private_data),
        };
        let mad = CmMad {
            tid: c.tid,
            attr_mod: ece.attr_mod,
            msg: CmMsg::Rep(Box::new(rep)),
        };
        let c = self.conns.get_mut(&comm).expect("conn_of");
        c.state = ConnState::RepSent;
        c.local_qpn = p.qp_num & 0xFF_FFFF;
        c.responder_resources = p.responder_resources;
        c.initiator_depth = p.initiator_depth;
        self.conn_send_retrying(now, comm, mad);
        Ok(())
    }

    pub(crate) fn on_rtu(&mut self, rtu: &Rtu) {
        let comm = rtu.remote_comm_id;
        let Some(c) = self.conns.get_mut(&comm) else {
            self.counters.dropped_unknown += 1;
            return;
        };
        if c.state != ConnState::RepSent || c.remote_comm_id != rtu.local_comm_id {
            self.counters.dropped_stale += 1;
            return;
        }
        c.state = ConnState::Established;
        c.last = None;
        let id = c.id;
        self.disarm(comm);
        self.conn_event_status(id, event::ESTABLISHED, 0);
    }
}

impl Cm {
    /// `rdma_accept`: `Some` answers a CONNECT_REQUEST (REP, or SIDR_REP
    /// for UD); `None` is the active side's RTU after CONNECT_RESPONSE.
    pub fn accept(
        &mut self,
        now: Instant,
        id: u32,
        p: Option<&ConnParam>,
        ece: Ece,
    ) -> Result<(), CmError> {
        let i = self.id_ref(id)?;
        if i.state != IdState::Connect {
            return Err(CmError::inval("accept needs a connecting id"));
        }
        match (p, i.qp_type) {
            (None, _) => self.send_rtu(id),
            (Some(p), QpType::Ud) => self.sidr_accept(id, p, ece),
            (Some(p), _) => self.send_rep(now, id, p, ece),
        }
    }
}
