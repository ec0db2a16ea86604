//! DREQ and DREP (Tables 112 and 113; `CM_DREQ_*`, `CM_DREP_*`).

use super::bits::{get_bytes, put_bytes, Field};
use super::codec::Codec;
use super::{AttrId, Drep, Dreq, DATA_LEN};

/// CM offsets of the DREQ fields.
pub(crate) mod at {
    use super::Field;

    pub const LOCAL_COMM_ID: Field = Field::at(0, 32);
    pub const REMOTE_COMM_ID: Field = Field::at(4, 32);
    pub const REMOTE_QPN: Field = Field::at(8, 24);
    pub const PRIVATE_DATA: usize = 12;
}

/// CM offsets of the DREP fields.
pub(crate) mod drep {
    use super::Field;

    pub const LOCAL_COMM_ID: Field = Field::at(0, 32);
    pub const REMOTE_COMM_ID: Field = Field::at(4, 32);
    pub const PRIVATE_DATA: usize = 8;
}

impl Codec for Dreq {
    const ATTR: AttrId = AttrId::Dreq;

    fn read(d: &[u8; DATA_LEN]) -> Dreq {
        Dreq {
            local_comm_id: at::LOCAL_COMM_ID.get(d),
            remote_comm_id: at::REMOTE_COMM_ID.get(d),
            remote_qpn: at::REMOTE_QPN.get(d),
            private_data: get_bytes(d, at::PRIVATE_DATA),
        }
    }

    fn write(&self, d: &mut [u8; DATA_LEN]) {
        at::LOCAL_COMM_ID.set(d, self.local_comm_id);
        at::REMOTE_COMM_ID.set(d, self.remote_comm_id);
        at::REMOTE_QPN.set(d, self.remote_qpn);
        put_bytes(d, at::PRIVATE_DATA, &self.private_data);
    }
}

impl Codec for Drep {
    const ATTR: AttrId = AttrId::Drep;

    fn read(d: &[u8; DATA_LEN]) -> Drep {
        Drep {
            local_comm_id: drep::LOCAL_COMM_ID.get(d),
            remote_comm_id: drep::REMOTE_COMM_ID.get(d),
            private_data: get_bytes(d, drep::PRIVATE_DATA),
        }
    }

    fn write(&self, d: &mut [u8; DATA_LEN]) {
        drep::LOCAL_COMM_ID.set(d, self.local_comm_id);
        drep::REMOTE_COMM_ID.set(d, self.remote_comm_id);
        put_bytes(d, drep::PRIVATE_DATA, &self.private_data);
    }
}
