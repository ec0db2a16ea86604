//! Names for people: attributes, reject reasons, SIDR statuses, port
//! spaces, and a one-line summary of a CM MAD (what `rxu decode` prints).

use std::fmt;

use super::cma::{port_of, ps, ps_of};
use super::{msg_ref, AttrId, CmMad, CmMsg};

impl AttrId {
    /// The message's name as the IBA spells it (REQ, SIDR_REP, ...).
    pub fn name(self) -> &'static str {
        match self {
            AttrId::Req => "REQ",
            AttrId::Mra => "MRA",
            AttrId::Rej => "REJ",
            AttrId::Rep => "REP",
            AttrId::Rtu => "RTU",
            AttrId::Dreq => "DREQ",
            AttrId::Drep => "DREP",
            AttrId::SidrReq => "SIDR_REQ",
            AttrId::SidrRep => "SIDR_REP",
            AttrId::Lap => "LAP",
            AttrId::Apr => "APR",
        }
    }
}

impl CmMsg {
    /// The attribute ID this message travels under.
    pub fn attr_id(&self) -> AttrId {
        match self {
            CmMsg::Req(_) => AttrId::Req,
            CmMsg::Rep(_) => AttrId::Rep,
            CmMsg::Rtu(_) => AttrId::Rtu,
            CmMsg::Rej(_) => AttrId::Rej,
            CmMsg::Mra(_) => AttrId::Mra,
            CmMsg::Dreq(_) => AttrId::Dreq,
            CmMsg::Drep(_) => AttrId::Drep,
            CmMsg::SidrReq(_) => AttrId::SidrReq,
            CmMsg::SidrRep(_) => AttrId::SidrRep,
        }
    }

    pub fn name(&self) -> &'static str {
        self.attr_id().name()
    }
}

/// What a REJ reason code means (`enum ib_cm_rej_reason`, IBA Table 109).
pub fn rej_reason_name(reason: u16) -> &'static str {
    match reason {
        1 => "no QP",
        2 => "no EEC",
        3 => "no resources",
        4 => "timeout",
        5 => "unsupported request",
        6 => "invalid communication ID",
        7 => "invalid communication instance",
        8 => "invalid service ID",
        9 => "invalid transport type",
        10 => "stale connection",
        11 => "RDC does not exist",
        12 => "invalid GID",
        13 => "invalid LID",
        14 => "invalid SL",
        15 => "invalid traffic class",
        16 => "invalid hop limit",
        17 => "invalid packet rate",
        18 => "invalid alternate GID",
        19 => "invalid alternate LID",
        20 => "invalid alternate SL",
        21 => "invalid alternate traffic class",
        22 => "invalid alternate hop limit",
        23 => "invalid alternate packet rate",
        24 => "port CM redirect",
        25 => "port redirect",
        26 => "invalid MTU",
        27 => "insufficient responder resources",
        28 => "consumer defined",
        29 => "invalid RNR retry",
        30 => "duplicate local communication ID",
        31 => "invalid class version",
        32 => "invalid flow label",
        33 => "invalid alternate flow label",
        35 => "vendor option not supported",
        _ => "unknown reason",
    }
}

/// What a SIDR_REP status means.
pub fn sidr_status_name(status: u8) -> &'static str {
    match status {
        0 => "ok",
        1 => "service ID not supported",
        2 => "rejected",
        3 => "no QP",
        4 => "redirect",
        5 => "unsupported version",
        _ => "unknown status",
    }
}

/// The rdma_cm port space's name (TCP, UDP, IB, IPoIB).
pub fn ps_name(p: u16) -> Option<&'static str> {
    match p {
        ps::TCP => Some("TCP"),
        ps::UDP => Some("UDP"),
        ps::IB => Some("IB"),
        ps::IPOIB => Some("IPoIB"),
        _ => None,
    }
}

fn msg_ref_name(m: u8) -> &'static str {
    match m {
        msg_ref::REQ => "REQ",
        msg_ref::REP => "REP",
        msg_ref::OTHER => "other",
        _ => "reserved",
    }
}

/// A service ID, with port space and port when it is one of rdma_cm's.
struct Sid(u64);

impl fmt::Display for Sid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sid = self.0;
        write!(f, "sid=0x{sid:016x}")?;
        if sid >> 32 == 0 {
            match ps_name(ps_of(sid)) {
                Some(n) => write!(f, " ({n} port {})", port_of(sid)),
                None => write!(f, " (ps 0x{:04x} port {})", ps_of(sid), port_of(sid)),
            }?;
        }
        Ok(())
    }
}

/// One line describing a CM MAD: the message name, its communication IDs
/// and what identifies the connection (service ID, QPN, starting PSN,
/// reject reason).
pub struct Summary<'a>(pub &'a CmMad);

impl CmMad {
    /// The one-line summary ([`Summary`] implements `Display`).
    pub fn summary(&self) -> Summary<'_> {
        Summary(self)
    }
}

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mad = self.0;
        f.write_str(mad.msg.name())?;
        match &mad.msg {
            CmMsg::Req(m) => write!(
                f,
                " lcid=0x{:08x} {} qpn=0x{:06x} psn=0x{:06x}",
                m.local_comm_id,
                Sid(m.service_id),
                m.local_qpn,
                m.starting_psn
            ),
            CmMsg::Rep(m) => write!(
                f,
                " lcid=0x{:08x} rcid=0x{:08x} qpn=0x{:06x} psn=0x{:06x}",
                m.local_comm_id, m.remote_comm_id, m.local_qpn, m.starting_psn
            ),
            CmMsg::Rtu(m) => write!(
                f,
                " lcid=0x{:08x} rcid=0x{:08x}",
                m.local_comm_id, m.remote_comm_id
            ),
            CmMsg::Rej(m) => write!(
                f,
                " lcid=0x{:08x} rcid=0x{:08x} rejected={} reason={} ({})",
                m.local_comm_id,
                m.remote_comm_id,
                msg_ref_name(m.msg_rejected),
                m.reason,
                rej_reason_name(m.reason)
            ),
            CmMsg::Mra(m) => write!(
                f,
                " lcid=0x{:08x} rcid=0x{:08x} mraed={} timeout={}",
                m.local_comm_id,
                m.remote_comm_id,
                msg_ref_name(m.msg_mraed),
                m.service_timeout
            ),
            CmMsg::Dreq(m) => write!(
                f,
                " lcid=0x{:08x} rcid=0x{:08x} qpn=0x{:06x}",
                m.local_comm_id, m.remote_comm_id, m.remote_qpn
            ),
            CmMsg::Drep(m) => write!(
                f,
                " lcid=0x{:08x} rcid=0x{:08x}",
                m.local_comm_id, m.remote_comm_id
            ),
            CmMsg::SidrReq(m) => write!(f, " id=0x{:08x} {}", m.request_id, Sid(m.service_id)),
            CmMsg::SidrRep(m) => write!(
                f,
                " id=0x{:08x} status={} ({}) {} qpn=0x{:06x} qkey=0x{:08x}",
                m.request_id,
                m.status,
                sidr_status_name(m.status),
                Sid(m.service_id),
                m.qpn,
                m.qkey
            ),
        }?;
        write!(f, " tid=0x{:016x}", mad.tid)
    }
}
