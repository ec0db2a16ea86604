//! REJ and MRA (Tables 108 and 107; `CM_REJ_*`, `CM_MRA_*`).

use super::bits::{get_bytes, put_bytes, Field};
use super::codec::Codec;
use super::{AttrId, Mra, Rej, DATA_LEN};

/// CM offsets of the REJ fields.
pub(crate) mod at {
    use super::Field;

    pub const LOCAL_COMM_ID: Field = Field::at(0, 32);
    pub const REMOTE_COMM_ID: Field = Field::at(4, 32);
    pub const MSG_REJECTED: Field = Field::at(8, 2);
    pub const REJECT_INFO_LEN: Field = Field::at(9, 7);
    pub const REASON: Field = Field::at(10, 16);
    pub const ARI: usize = 12;
    pub const PRIVATE_DATA: usize = 84;
}

/// CM offsets of the MRA fields.
pub(crate) mod mra {
    use super::Field;

    pub const LOCAL_COMM_ID: Field = Field::at(0, 32);
    pub const REMOTE_COMM_ID: Field = Field::at(4, 32);
    pub const MSG_MRAED: Field = Field::at(8, 2);
    pub const SERVICE_TIMEOUT: Field = Field::at(9, 5);
    pub const PRIVATE_DATA: usize = 10;
}

impl Codec for Rej {
    const ATTR: AttrId = AttrId::Rej;

    /// The info length is kept as sent even when it exceeds the 72-byte
    /// ARI field (the kernel does the same); users clamp it.
    fn read(d: &[u8; DATA_LEN]) -> Rej {
        Rej {
            local_comm_id: at::LOCAL_COMM_ID.get(d),
            remote_comm_id: at::REMOTE_COMM_ID.get(d),
            msg_rejected: at::MSG_REJECTED.get(d) as u8,
            reject_info_len: at::REJECT_INFO_LEN.get(d) as u8,
            reason: at::REASON.get(d) as u16,
            ari: get_bytes(d, at::ARI),
            private_data: get_bytes(d, at::PRIVATE_DATA),
        }
    }

    fn write(&self, d: &mut [u8; DATA_LEN]) {
        at::LOCAL_COMM_ID.set(d, self.local_comm_id);
        at::REMOTE_COMM_ID.set(d, self.remote_comm_id);
        at::MSG_REJECTED.set(d, self.msg_rejected.into());
        at::REJECT_INFO_LEN.set(d, self.reject_info_len.into());
        at::REASON.set(d, self.reason.into());
        put_bytes(d, at::ARI, &self.ari);
        put_bytes(d, at::PRIVATE_DATA, &self.private_data);
    }
}

impl Codec for Mra {
    const ATTR: AttrId = AttrId::Mra;

    fn read(d: &[u8; DATA_LEN]) -> Mra {
        Mra {
            local_comm_id: mra::LOCAL_COMM_ID.get(d),
            remote_comm_id: mra::REMOTE_COMM_ID.get(d),
            msg_mraed: mra::MSG_MRAED.get(d) as u8,
            service_timeout: mra::SERVICE_TIMEOUT.get(d) as u8,
            private_data: get_bytes(d, mra::PRIVATE_DATA),
        }
    }

    fn write(&self, d: &mut [u8; DATA_LEN]) {
        mra::LOCAL_COMM_ID.set(d, self.local_comm_id);
        mra::REMOTE_COMM_ID.set(d, self.remote_comm_id);
        mra::MSG_MRAED.set(d, self.msg_mraed.into());
        mra::SERVICE_TIMEOUT.set(d, self.service_timeout.into());
        put_bytes(d, mra::PRIVATE_DATA, &self.private_data);
    }
}
