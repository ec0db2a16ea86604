//! UD ids: SIDR_REQ / SIDR_REP (`cma_resolve_ib_udp`, `cm_sidr_req_handler`,
//! `cma_sidr_rep_handler`). No RTU, no DREQ: a conn lives only while the
//! request is outstanding.

use std::net::SocketAddr;
use std::time::Instant;

use rxu_abi::proto::cm::{event, CmEventParam, CmEventRecord, ConnParam, Ece, RDMA_UDP_QKEY};
use rxu_abi::proto::QpType;

use super::conn::{Conn, ConnState};
use super::ids::{Id, IdState};
use super::listen::ip_service;
use super::listen::Miss;
use super::mads::{self, SidrRepParts};
use super::route::{gid, Path};
use super::timing::conv;
use super::{Cm, CmError, MadRx};
use crate::wire::{port_of, service_id, CmaHeader, CMA_HDR_LEN};
use crate::wire::{
    sidr_status, CmMad, CmMsg, SidrRep, SidrReq, SIDR_REP_PRIVATE, SIDR_REQ_PRIVATE,
};

/// User private data a SIDR_REQ carries after the rdma_cm header.
pub(crate) const SIDR_USER_PRIVATE: usize = SIDR_REQ_PRIVATE - CMA_HDR_LEN;

impl Cm {
    pub(crate) fn sidr_connect(
        &mut self,
        now: Instant,
        id: u32,
        p: &ConnParam,
        ece: Ece,
    ) -> Result<(), CmError> {
        if p.private_data.len() > SIDR_USER_PRIVATE {
            return Err(CmError::inval(format!(
                "SIDR_REQ private data is at most {SIDR_USER_PRIVATE} bytes"
            )));
        }
        let i = self.id_ref(id)?;
        let Some(remote) = i.remote else {
            return Err(CmError::inval("connect needs a resolved route"));
        };
        let mut pd = [0u8; SIDR_REQ_PRIVATE];
        CmaHeader {
            src_port: i.local.port(),
            src: i.local.ip(),
            dst: remote.ip(),
        }
        .emit(&mut pd)
        .map_err(|e| CmError::inval(e.to_string()))?;
        pd[CMA_HDR_LEN..CMA_HDR_LEN + p.private_data.len()].copy_from_slice(&p.private_data);
        let t = self.timing();
        let sid = service_id(i.ps, remote.port());
        let mut c = Conn::new(
            ConnState::SidrReqSent,
            QpType::Ud,
            i.local.ip(),
            remote.ip(),
        );
        c.id = Some(id);
        c.service_id = sid;
        c.timeout = conv(t.cm_response_timeout);
        c.max_cm_retries = t.max_cm_retries;
        let comm = self.alloc_comm_id();
        c.tid = self.new_tid(comm);
        let tid = c.tid;
        self.conns.insert(comm, c);
        let i = self.id_mut(id)?;
        i.conn = Some(comm);
        i.state = IdState::Connect;
        let mad = CmMad {
            tid,
            attr_mod: ece.attr_mod,
            msg: CmMsg::SidrReq(Box::new(SidrReq {
                request_id: comm,
                pkey: 0xFFFF,
                service_id: sid,
                private_data: pd,
            })),
        };
        self.conn_send_retrying(now, comm, mad);
        Ok(())
    }

    fn issue_sidr_rep(&mut self, rx: &MadRx, mad: &CmMad, r: &SidrReq, status: u8) {
        let m = mads::sidr_rep(
            mad.tid,
            SidrRepParts {
                request_id: r.request_id,
                status,
                qpn: 0,
                qkey: 0,
                service_id: r.service_id,
                vendor_id: 0,
                private_data: &[],
            },
        );
        self.push_tx(rx.dst, rx.src, m);
    }

    pub(crate) fn on_sidr_req(&mut self, rx: &MadRx, mad: &CmMad, r: &SidrReq) {
        let dup = self.conns.values().any(|c| {
            c.state == ConnState::SidrReqRcvd
                && c.remote_comm_id == r.request_id
                && c.peer_ip == rx.src
        });
        if dup {
            self.counters.dropped_duplicate += 1;
            return;
        }
        let hdr = CmaHeader::parse(&r.private_data).ok();
        let found = match ip_service(r.service_id) {
            None => Err(Miss::NoService),
            Some((ps, port)) => self.find_listener(ps, port, hdr.as_ref(), QpType::Ud),
        };
        let listener = match found {
            Ok(l) => l,
            Err(Miss::NoService) => {
                return self.issue_sidr_rep(rx, mad, r, sidr_status::UNSUPPORTED);
            }
            Err(Miss::NoMatch) => return self.issue_sidr_rep(rx, mad, r, sidr_status::REJECT),
        };
        if !self.backlog_has_room(listener) {
            self.counters.dropped_backlog += 1;
            return self.issue_sidr_rep(rx, mad, r, sidr_status::REJECT);
        }
        let Some(hdr) = hdr else {
            return;
        };
        let l = &self.ids[&listener];
        let (owner, ps, afonly, tos) = (l.owner, l.ps, l.afonly, l.tos);
        let local = SocketAddr::new(hdr.dst, port_of(r.service_id));
        let remote = SocketAddr::new(hdr.src, hdr.src_port);
        let path = Path {
            sgid: gid(hdr.dst),
            dgid: gid(rx.src),
            mtu: self.cfg.mtu,
            hop_limit: rx.hop_limit,
            traffic_class: rx.traffic_class,
            flow_label: 0,
            packet_life_time: self.cfg.timing.packet_life_time,
        };
        let ah = self.ah_of(&path);
        let route = path.route_info(self.cfg.node_guid, true);
        let mut c = Conn::new(ConnState::SidrReqRcvd, QpType::Ud, hdr.dst, rx.src);
        c.parent = Some(listener);
        c.tid = mad.tid;
        c.remote_comm_id = r.request_id;
        c.service_id = r.service_id;
        let comm = self.alloc_comm_id();
        let seq_num = self.rng.next_u32() & 0xFF_FFFF;
        let new_id = self.new_id(Id {
            owner,
            ps,
            qp_type: QpType::Ud,
            local,
            remote: Some(remote),
            holds_port: false,
            reuseaddr: false,
            afonly,
            tos,
            ack_timeout: None,
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
        self.push_event(
            listener,
            CmEventRecord {
                event: event::CONNECT_REQUEST,
                new_id,
                param: CmEventParam {
                    private_data: r.private_data[CMA_HDR_LEN..].to_vec(),
                    ah: Some(ah),
                    ..Default::default()
                },
                ece: Ece {
                    vendor_id: 0,
                    attr_mod: mad.attr_mod,
                },
                local: Some(local),
                remote: Some(remote),
                route: Some(route),
                ..Default::default()
            },
        );
    }

    /// Answers the SIDR_REQ of a passive UD id and forgets the request.
    fn sidr_answer(
        &mut self,
        id: u32,
        status: u8,
        qpn: u32,
        qkey: u32,
        ece: Ece,
        pd: &[u8],
    ) -> Result<(), CmError> {
        if pd.len() > SIDR_REP_PRIVATE {
            return Err(CmError::inval(format!(
                "SIDR_REP private data is at most {SIDR_REP_PRIVATE} bytes"
            )));
        }
        let Some((comm, c)) = self.conn_of(id) else {
            return Err(CmError::inval("no SIDR request to answer"));
        };
        if c.state != ConnState::SidrReqRcvd {
            return Err(CmError::inval("no SIDR request to answer"));
        }
        let mut m = mads::sidr_rep(
            c.tid,
            SidrRepParts {
                request_id: c.remote_comm_id,
                status,
                qpn: qpn & 0xFF_FFFF,
                qkey,
                service_id: c.service_id,
                vendor_id: ece.vendor_id & 0xFF_FFFF,
                private_data: pd,
            },
        );
        m.attr_mod = ece.attr_mod;
        self.conn_send(comm, m);
        self.free_conn(comm);
        Ok(())
    }

    pub(crate) fn sidr_accept(&mut self, id: u32, p: &ConnParam, ece: Ece) -> Result<(), CmError> {
        let i = self.id_ref(id)?;
        let qkey = match (p.qkey, i.qkey) {
            (0, Some(k)) => k,
            (0, None) => RDMA_UDP_QKEY,
            (k, _) => k,
        };
        self.sidr_answer(id, sidr_status::OK, p.qp_num, qkey, ece, &p.private_data)?;
        self.id_mut(id)?.qkey = Some(qkey);
        Ok(())
    }

    pub(crate) fn sidr_reject(&mut self, id: u32, pd: &[u8]) -> Result<(), CmError> {
        self.sidr_answer(id, sidr_status::REJECT, 0, 0, Ece::default(), pd)
    }

    pub(crate) fn on_sidr_rep(&mut self, rx: &MadRx, r: &SidrRep) {
        let comm = r.request_id;
        let found = self
            .conns
            .get(&comm)
            .filter(|c| c.state == ConnState::SidrReqSent && c.peer_ip == rx.src);
        let Some(c) = found else {
            self.counters.dropped_unknown += 1;
            return;
        };
        let id = c.id;
        self.free_conn(comm);
        let private_data = r.private_data.to_vec();
        if r.status != sidr_status::OK {
            let rec = CmEventRecord {
                event: event::UNREACHABLE,
                status: r.status as i32,
                param: CmEventParam {
                    private_data,
                    ..Default::default()
                },
                ..Default::default()
            };
            return self.conn_event(id, rec);
        }
        let ah = id
            .and_then(|n| self.ids.get(&n))
            .and_then(|i| i.path.as_ref())
            .map(|p| self.ah_of(p));
        let Some(i) = id.and_then(|n| self.ids.get_mut(&n)) else {
            return;
        };
        if i.qkey.is_some_and(|k| k != r.qkey) {
            return self.conn_event_status(id, event::ADDR_ERROR, -libc::EINVAL);
        }
        i.qkey = Some(r.qkey);
        self.conn_event(
            id,
            CmEventRecord {
                event: event::ESTABLISHED,
                param: CmEventParam {
                    private_data,
                    qp_num: r.qpn,
                    qkey: r.qkey,
                    ah,
                    ..Default::default()
                },
                ..Default::default()
            },
        );
    }
}
