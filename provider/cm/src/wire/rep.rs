//! REP and RTU (Tables 110 and 111; `CM_REP_*`, `CM_RTU_*`).

use super::bits::{get_bytes, get_u64, put_bytes, put_u64, Field};
use super::codec::Codec;
use super::{AttrId, Rep, Rtu, DATA_LEN};

/// CM offsets of the REP fields.
pub(crate) mod at {
    use super::Field;

    pub const LOCAL_COMM_ID: Field = Field::at(0, 32);
    pub const REMOTE_COMM_ID: Field = Field::at(4, 32);
    pub const LOCAL_QKEY: Field = Field::at(8, 32);
    pub const LOCAL_QPN: Field = Field::at(12, 24);
    /// The ECE vendor ID is split over three reserved bytes (H, M, L).
    pub const VENDOR_ID_H: Field = Field::at(15, 8);
    pub const LOCAL_EECN: Field = Field::at(16, 24);
    pub const VENDOR_ID_M: Field = Field::at(19, 8);
    pub const STARTING_PSN: Field = Field::at(20, 24);
    pub const VENDOR_ID_L: Field = Field::at(23, 8);
    pub const RESPONDER_RESOURCES: Field = Field::at(24, 8);
    pub const INITIATOR_DEPTH: Field = Field::at(25, 8);
    pub const TARGET_ACK_DELAY: Field = Field::at(26, 5);
    pub const FAILOVER_ACCEPTED: Field = Field::new(26, 5, 2);
    pub const FLOW_CONTROL: Field = Field::new(26, 7, 1);
    pub const RNR_RETRY_COUNT: Field = Field::at(27, 3);
    pub const SRQ: Field = Field::new(27, 3, 1);
    pub const LOCAL_CA_GUID: usize = 28;
    pub const PRIVATE_DATA: usize = 36;
}

/// CM offsets of the RTU fields.
pub(crate) mod rtu {
    use super::Field;

    pub const LOCAL_COMM_ID: Field = Field::at(0, 32);
    pub const REMOTE_COMM_ID: Field = Field::at(4, 32);
    pub const PRIVATE_DATA: usize = 8;
}

impl Codec for Rep {
    const ATTR: AttrId = AttrId::Rep;

    fn read(d: &[u8; DATA_LEN]) -> Rep {
        Rep {
            local_comm_id: at::LOCAL_COMM_ID.get(d),
            remote_comm_id: at::REMOTE_COMM_ID.get(d),
            local_qkey: at::LOCAL_QKEY.get(d),
            local_qpn: at::LOCAL_QPN.get(d),
            local_eecn: at::LOCAL_EECN.get(d),
            starting_psn: at::STARTING_PSN.get(d),
            vendor_id: at::VENDOR_ID_H.get(d) << 16
                | at::VENDOR_ID_M.get(d) << 8
                | at::VENDOR_ID_L.get(d),
            responder_resources: at::RESPONDER_RESOURCES.get(d) as u8,
            initiator_depth: at::INITIATOR_DEPTH.get(d) as u8,
            target_ack_delay: at::TARGET_ACK_DELAY.get(d) as u8,
            failover_accepted: at::FAILOVER_ACCEPTED.get(d) as u8,
            flow_control: at::FLOW_CONTROL.flag(d),
            rnr_retry_count: at::RNR_RETRY_COUNT.get(d) as u8,
            srq: at::SRQ.flag(d),
            local_ca_guid: get_u64(d, at::LOCAL_CA_GUID),
            private_data: get_bytes(d, at::PRIVATE_DATA),
        }
    }

    fn write(&self, d: &mut [u8; DATA_LEN]) {
        at::LOCAL_COMM_ID.set(d, self.local_comm_id);
        at::REMOTE_COMM_ID.set(d, self.remote_comm_id);
        at::LOCAL_QKEY.set(d, self.local_qkey);
        at::LOCAL_QPN.set(d, self.local_qpn);
        at::VENDOR_ID_H.set(d, self.vendor_id >> 16);
        at::LOCAL_EECN.set(d, self.local_eecn);
        at::VENDOR_ID_M.set(d, self.vendor_id >> 8);
        at::STARTING_PSN.set(d, self.starting_psn);
        at::VENDOR_ID_L.set(d, self.vendor_id);
        at::RESPONDER_RESOURCES.set(d, self.responder_resources.into());
        at::INITIATOR_DEPTH.set(d, self.initiator_depth.into());
        at::TARGET_ACK_DELAY.set(d, self.target_ack_delay.into());
        at::FAILOVER_ACCEPTED.set(d, self.failover_accepted.into());
        at::FLOW_CONTROL.set(d, self.flow_control.into());
        at::RNR_RETRY_COUNT.set(d, self.rnr_retry_count.into());
        at::SRQ.set(d, self.srq.into());
        put_u64(d, at::LOCAL_CA_GUID, self.local_ca_guid);
        put_bytes(d, at::PRIVATE_DATA, &self.private_data);
    }
}

impl Codec for Rtu {
    const ATTR: AttrId = AttrId::Rtu;

    fn read(d: &[u8; DATA_LEN]) -> Rtu {
        Rtu {
            local_comm_id: rtu::LOCAL_COMM_ID.get(d),
            remote_comm_id: rtu::REMOTE_COMM_ID.get(d),
            private_data: get_bytes(d, rtu::PRIVATE_DATA),
        }
    }

    fn write(&self, d: &mut [u8; DATA_LEN]) {
        rtu::LOCAL_COMM_ID.set(d, self.local_comm_id);
        rtu::REMOTE_COMM_ID.set(d, self.remote_comm_id);
        put_bytes(d, rtu::PRIVATE_DATA, &self.private_data);
    }
}
