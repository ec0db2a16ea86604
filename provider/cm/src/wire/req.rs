//! REQ (Table 106 of IBA vol. 1; `CM_REQ_*` in the kernel's
//! `ibta_vol1_c12.h`).

use super::bits::{get_bytes, get_u64, put_bytes, put_u64, Field};
use super::codec::Codec;
use super::{AttrId, Req, ReqPath, DATA_LEN};

/// CM offsets of the REQ fields.
pub(crate) mod at {
    use super::Field;

    pub const LOCAL_COMM_ID: Field = Field::at(0, 32);
    /// ECE vendor ID (IBA comment #9434), in the reserved bytes 5..8.
    pub const VENDOR_ID: Field = Field::at(5, 24);
    pub const SERVICE_ID: usize = 8;
    pub const LOCAL_CA_GUID: usize = 16;
    pub const LOCAL_QKEY: Field = Field::at(28, 32);
    pub const LOCAL_QPN: Field = Field::at(32, 24);
    pub const RESPONDER_RESOURCES: Field = Field::at(35, 8);
    pub const LOCAL_EECN: Field = Field::at(36, 24);
    pub const INITIATOR_DEPTH: Field = Field::at(39, 8);
    pub const REMOTE_EECN: Field = Field::at(40, 24);
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Field = Field::at(43, 5);
    pub const TRANSPORT_TYPE: Field = Field::new(43, 5, 2);
    pub const FLOW_CONTROL: Field = Field::new(43, 7, 1);
    pub const STARTING_PSN: Field = Field::at(44, 24);
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Field = Field::at(47, 5);
    pub const RETRY_COUNT: Field = Field::new(47, 5, 3);
    pub const PKEY: Field = Field::at(48, 16);
    pub const PATH_MTU: Field = Field::at(50, 4);
    pub const RDC_EXISTS: Field = Field::new(50, 4, 1);
    pub const RNR_RETRY_COUNT: Field = Field::new(50, 5, 3);
    pub const MAX_CM_RETRIES: Field = Field::at(51, 4);
    pub const SRQ: Field = Field::new(51, 4, 1);
    pub const EXTENDED_TRANSPORT: Field = Field::new(51, 5, 3);
    pub const PRIMARY: usize = 52;
    pub const ALTERNATE: usize = 96;
    pub const PRIVATE_DATA: usize = 140;
}

/// Offsets inside one path (44 bytes), from its start (52 or 96).
pub(crate) mod path {
    use super::Field;

    pub const LEN: usize = 44;
    pub const LOCAL_LID: Field = Field::at(0, 16);
    pub const REMOTE_LID: Field = Field::at(2, 16);
    pub const LOCAL_GID: usize = 4;
    pub const REMOTE_GID: usize = 20;
    pub const FLOW_LABEL: Field = Field::at(36, 20);
    pub const PACKET_RATE: Field = Field::new(39, 2, 6);
    pub const TRAFFIC_CLASS: Field = Field::at(40, 8);
    pub const HOP_LIMIT: Field = Field::at(41, 8);
    pub const SL: Field = Field::at(42, 4);
    pub const SUBNET_LOCAL: Field = Field::new(42, 4, 1);
    pub const LOCAL_ACK_TIMEOUT: Field = Field::at(43, 5);
}

fn read_path(p: &[u8]) -> ReqPath {
    ReqPath {
        local_lid: path::LOCAL_LID.get(p) as u16,
        remote_lid: path::REMOTE_LID.get(p) as u16,
        local_gid: get_bytes(p, path::LOCAL_GID),
        remote_gid: get_bytes(p, path::REMOTE_GID),
        flow_label: path::FLOW_LABEL.get(p),
        packet_rate: path::PACKET_RATE.get(p) as u8,
        traffic_class: path::TRAFFIC_CLASS.get(p) as u8,
        hop_limit: path::HOP_LIMIT.get(p) as u8,
        sl: path::SL.get(p) as u8,
        subnet_local: path::SUBNET_LOCAL.flag(p),
        local_ack_timeout: path::LOCAL_ACK_TIMEOUT.get(p) as u8,
    }
}

fn write_path(r: &ReqPath, p: &mut [u8]) {
    path::LOCAL_LID.set(p, r.local_lid.into());
    path::REMOTE_LID.set(p, r.remote_lid.into());
    put_bytes(p, path::LOCAL_GID, &r.local_gid);
    put_bytes(p, path::REMOTE_GID, &r.remote_gid);
    path::FLOW_LABEL.set(p, r.flow_label);
    path::PACKET_RATE.set(p, r.packet_rate.into());
    path::TRAFFIC_CLASS.set(p, r.traffic_class.into());
    path::HOP_LIMIT.set(p, r.hop_limit.into());
    path::SL.set(p, r.sl.into());
    path::SUBNET_LOCAL.set(p, r.subnet_local.into());
    path::LOCAL_ACK_TIMEOUT.set(p, r.local_ack_timeout.into());
}

impl Codec for Req {
    const ATTR: AttrId = AttrId::Req;

    fn read(d: &[u8; DATA_LEN]) -> Req {
        Req {
            local_comm_id: at::LOCAL_COMM_ID.get(d),
            vendor_id: at::VENDOR_ID.get(d),
            service_id: get_u64(d, at::SERVICE_ID),
            local_ca_guid: get_u64(d, at::LOCAL_CA_GUID),
            local_qkey: at::LOCAL_QKEY.get(d),
            local_qpn: at::LOCAL_QPN.get(d),
            responder_resources: at::RESPONDER_RESOURCES.get(d) as u8,
            local_eecn: at::LOCAL_EECN.get(d),
            initiator_depth: at::INITIATOR_DEPTH.get(d) as u8,
            remote_eecn: at::REMOTE_EECN.get(d),
            remote_cm_response_timeout: at::REMOTE_CM_RESPONSE_TIMEOUT.get(d) as u8,
            transport_type: at::TRANSPORT_TYPE.get(d) as u8,
            flow_control: at::FLOW_CONTROL.flag(d),
            starting_psn: at::STARTING_PSN.get(d),
            local_cm_response_timeout: at::LOCAL_CM_RESPONSE_TIMEOUT.get(d) as u8,
            retry_count: at::RETRY_COUNT.get(d) as u8,
            pkey: at::PKEY.get(d) as u16,
            path_mtu: at::PATH_MTU.get(d) as u8,
            rdc_exists: at::RDC_EXISTS.flag(d),
            rnr_retry_count: at::RNR_RETRY_COUNT.get(d) as u8,
            max_cm_retries: at::MAX_CM_RETRIES.get(d) as u8,
            srq: at::SRQ.flag(d),
            extended_transport: at::EXTENDED_TRANSPORT.get(d) as u8,
            primary: read_path(&d[at::PRIMARY..at::PRIMARY + path::LEN]),
            alternate: read_path(&d[at::ALTERNATE..at::ALTERNATE + path::LEN]),
            private_data: get_bytes(d, at::PRIVATE_DATA),
        }
    }

    fn write(&self, d: &mut [u8; DATA_LEN]) {
        at::LOCAL_COMM_ID.set(d, self.local_comm_id);
        at::VENDOR_ID.set(d, self.vendor_id);
        put_u64(d, at::SERVICE_ID, self.service_id);
        put_u64(d, at::LOCAL_CA_GUID, self.local_ca_guid);
        at::LOCAL_QKEY.set(d, self.local_qkey);
        at::LOCAL_QPN.set(d, self.local_qpn);
        at::RESPONDER_RESOURCES.set(d, self.responder_resources.into());
        at::LOCAL_EECN.set(d, self.local_eecn);
        at::INITIATOR_DEPTH.set(d, self.initiator_depth.into());
        at::REMOTE_EECN.set(d, self.remote_eecn);
        at::REMOTE_CM_RESPONSE_TIMEOUT.set(d, self.remote_cm_response_timeout.into());
        at::TRANSPORT_TYPE.set(d, self.transport_type.into());
        at::FLOW_CONTROL.set(d, self.flow_control.into());
        at::STARTING_PSN.set(d, self.starting_psn);
        at::LOCAL_CM_RESPONSE_TIMEOUT.set(d, self.local_cm_response_timeout.into());
        at::RETRY_COUNT.set(d, self.retry_count.into());
        at::PKEY.set(d, self.pkey.into());
        at::PATH_MTU.set(d, self.path_mtu.into());
        at::RDC_EXISTS.set(d, self.rdc_exists.into());
        at::RNR_RETRY_COUNT.set(d, self.rnr_retry_count.into());
        at::MAX_CM_RETRIES.set(d, self.max_cm_retries.into());
        at::SRQ.set(d, self.srq.into());
        at::EXTENDED_TRANSPORT.set(d, self.extended_transport.into());
        write_path(&self.primary, &mut d[at::PRIMARY..at::PRIMARY + path::LEN]);
        write_path(
            &self.alternate,
            &mut d[at::ALTERNATE..at::ALTERNATE + path::LEN],
        );
        put_bytes(d, at::PRIVATE_DATA, &self.private_data);
    }
}
