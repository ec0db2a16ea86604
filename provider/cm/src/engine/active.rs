//! The active side of an RC/UC connection: REQ (as `cma_connect_ib` and
//! `cm_format_req` fill it on RoCE), MRA, REP -> CONNECT_RESPONSE, RTU.

use std::time::Instant;

use rxu_abi::proto::cm::{event, CmEventParam, CmEventRecord, ConnParam, Ece};
use rxu_abi::proto::QpType;

use super::conn::{Conn, ConnState};
use super::ids::IdState;
use super::mads::{self, RejParts};
use super::timing::{ack_timeout, conv, peer_time, MRA_SERVICE_TIMEOUT, ROUTE_RATE};
use super::{Cm, CmError, MadRx};
use crate::wire::{msg_ref, rej_reason, CmMad, CmMsg, Mra, Rep, Req, ReqPath, REQ_PRIVATE};
use crate::wire::{service_id, CmaHeader, CMA_HDR_LEN};

/// User private data a REQ carries after the rdma_cm header.
pub(crate) const REQ_USER_PRIVATE: usize = REQ_PRIVATE - CMA_HDR_LEN;

impl Cm {
    /// `rdma_connect`: REQ for RC/UC ids, SIDR_REQ for UD ids.
    pub fn connect(
        &mut self,
        now: Instant,
        id: u32,
        p: &ConnParam,
        ece: Ece,
    ) -> Result<(), CmError> {
        let i = self.id_ref(id)?;
        if i.state != IdState::Resolved {
            return Err(CmError::inval("connect needs a resolved route"));
        }
        if i.qp_type == QpType::Ud {
            return self.sidr_connect(now, id, p, ece);
        }
        if p.private_data.len() > REQ_USER_PRIVATE {
            return Err(CmError::inval(format!(
                "REQ private data is at most {REQ_USER_PRIVATE} bytes"
            )));
        }
        let (Some(path), Some(remote)) = (i.path.as_ref(), i.remote) else {
            return Err(CmError::inval("connect needs a resolved route"));
        };
        let t = self.timing();
        let mut pd = [0u8; REQ_PRIVATE];
        CmaHeader {
            src_port: i.local.port(),
            src: i.local.ip(),
            dst: remote.ip(),
        }
        .emit(&mut pd)
        .map_err(|e| CmError::inval(e.to_string()))?;
        pd[CMA_HDR_LEN..CMA_HDR_LEN + p.private_data.len()].copy_from_slice(&p.private_data);
        let life = path.packet_life_time;
        let req = Req {
            local_comm_id: 0,
            vendor_id: ece.vendor_id & 0xFF_FFFF,
            service_id: service_id(i.ps, remote.port()),
            local_ca_guid: self.cfg.node_guid,
            local_qkey: 0,
            local_qpn: p.qp_num & 0xFF_FFFF,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: t.cm_response_timeout,
            transport_type: u8::from(i.qp_type == QpType::Uc),
            flow_control: p.flow_control != 0,
            starting_psn: i.seq_num,
            local_cm_response_timeout: t.cm_response_timeout,
            retry_count: p.retry_count.min(7),
            pkey: 0xFFFF,
            path_mtu: path.mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: t.max_cm_retries.min(15),
            srq: p.srq != 0,
            extended_transport: 0,
            primary: ReqPath {
                local_lid: 0xFFFF,
                remote_lid: 0xFFFF,
                local_gid: path.sgid,
                remote_gid: path.dgid,
                flow_label: path.flow_label,
                packet_rate: ROUTE_RATE,
                traffic_class: path.traffic_class,
                hop_limit: path.hop_limit,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: ack_timeout(t.local_ack_delay, life),
            },
            alternate: ReqPath::default(),
            private_data: pd,
        };
        let mut c = Conn::new(ConnState::ReqSent, i.qp_type, i.local.ip(), remote.ip());
        c.id = Some(id);
        c.local_qpn = req.local_qpn;
        c.path_mtu = path.mtu;
        c.av_timeout = (life + 1).min(31);
        c.responder_resources = p.responder_resources;
        c.initiator_depth = p.initiator_depth;
        c.retry_count = req.retry_count;
        c.rnr_retry_count = req.rnr_retry_count;
        c.timeout = conv(life) * 2 + conv(t.cm_response_timeout);
        c.max_cm_retries = req.max_cm_retries;
        let comm = self.alloc_comm_id();
        c.tid = self.new_tid(comm);
        let tid = c.tid;
        self.conns.insert(comm, c);
        let i = self.id_mut(id)?;
        i.conn = Some(comm);
        i.state = IdState::Connect;
        let msg = CmMsg::Req(Box::new(Req {
            local_comm_id: comm,
            ..req
        }));
        let mad = CmMad {
            tid,
            attr_mod: ece.attr_mod,
            msg,
        };
        self.conn_send_retrying(now, comm, mad);
        Ok(())
    }

    /// The active side's "send RTU" (ACCEPT without parameters) after
    /// CONNECT_RESPONSE: the connection is established, no event (the
    /// library reports ESTABLISHED itself).
    pub(crate) fn send_rtu(&mut self, id: u32) -> Result<(), CmError> {
        let Some((comm, c)) = self.conn_of(id) else {
            return Err(CmError::inval("no connection to confirm"));
        };
        if c.state != ConnState::RepRcvd {
            return Err(CmError::inval("RTU only after CONNECT_RESPONSE"));
        }
        let m = mads::rtu(c.tid, comm, c.remote_comm_id);
        self.conns.get_mut(&comm).expect("conn_of").state = ConnState::Established;
        self.conn_send(comm, m);
        Ok(())
    }

    pub(crate) fn on_rep(&mut self, now: Instant, rx: &MadRx, mad: &CmMad, rep: &Rep) {
        let comm = rep.remote_comm_id;
        let Some(c) = self.conns.get(&comm) else {
            self.counters.dropped_unknown += 1;
            return;
        };
        match c.state {
            ConnState::ReqSent => {}
            ConnState::RepRcvd if c.remote_comm_id == rep.local_comm_id => {
                // The REP came again before the RTU: ask for patience.
                self.counters.dropped_duplicate += 1;
                let m = mads::mra(
                    c.tid,
                    comm,
                    c.remote_comm_id,
                    msg_ref::REP,
                    MRA_SERVICE_TIMEOUT,
                );
                self.conn_send(comm, m);
                return;
            }
            ConnState::Established if c.remote_comm_id == rep.local_comm_id => {
                // Our RTU was lost (`cm_dup_rep_handler`).
                self.counters.dropped_duplicate += 1;
                let m = mads::rtu(c.tid, comm, c.remote_comm_id);
                self.conn_send(comm, m);
                return;
            }
            _ => {
                self.counters.dropped_stale += 1;
                return;
            }
        }
        let key = (rep.local_ca_guid, rep.local_qpn);
        if let Some(&old) = self.remote_qps.get(&key).filter(|&&o| o != comm) {
            // That QP of the peer still has a connection here: stale.
            let tid = mad.tid;
            let rej = mads::rej(
                tid,
                RejParts {
                    local: comm,
                    remote: rep.local_comm_id,
                    msg_rejected: msg_ref::REP,
                    reason: rej_reason::STALE_CONN,
                    ari: &[],
                    private_data: &[],
                },
            );
            self.push_tx(rx.dst, rx.src, rej);
            self.dreq_stale(now, old);
            return;
        }
        self.disarm(comm);
        let Some(c) = self.conns.get_mut(&comm) else {
            return;
        };
        c.last = None;
        c.state = ConnState::RepRcvd;
        c.remote_comm_id = rep.local_comm_id;
        c.remote_guid = rep.local_ca_guid;
        c.remote_qpn = rep.local_qpn;
        c.remote_psn = rep.starting_psn;
        c.responder_resources = rep.initiator_depth;
        c.initiator_depth = rep.responder_resources;
        c.rnr_retry_count = rep.rnr_retry_count;
        c.av_timeout = ack_timeout(
            peer_time(rep.target_ack_delay),
            c.av_timeout.saturating_sub(1),
        );
        let id = c.id;
        self.insert_remote(comm);
        self.conn_event(
            id,
            CmEventRecord {
                event: event::CONNECT_RESPONSE,
                param: CmEventParam {
                    private_data: rep.private_data.to_vec(),
                    responder_resources: rep.initiator_depth,
                    initiator_depth: rep.responder_resources,
                    flow_control: u8::from(rep.flow_control),
                    rnr_retry_count: rep.rnr_retry_count,
                    srq: u8::from(rep.srq),
                    qp_num: rep.local_qpn,
                    ..Default::default()
                },
                ece: Ece {
                    vendor_id: rep.vendor_id,
                    attr_mod: mad.attr_mod,
                },
                ..Default::default()
            },
        );
    }

    /// MRA: the peer needs more time for our REQ (or REP); the current
    /// wait is extended once by its service timeout (`cm_mra_handler`).
    pub(crate) fn on_mra(&mut self, now: Instant, mra: &Mra) {
        let comm = mra.remote_comm_id;
        let Some(c) = self.conns.get_mut(&comm) else {
            self.counters.dropped_unknown += 1;
            return;
        };
        let fits = match (c.state, mra.msg_mraed) {
            (ConnState::ReqSent, msg_ref::REQ) => true,
            (ConnState::RepSent, msg_ref::REP) => c.remote_comm_id == mra.local_comm_id,
            _ => false,
        };
        if !fits || c.mra_rcvd || c.deadline.is_none() {
            self.counters.dropped_stale += 1;
            return;
        }
        c.mra_rcvd = true;
        let at = now + conv(peer_time(mra.service_timeout)) + conv(c.av_timeout);
        self.arm(comm, at);
    }
}
