//! SIDR_REQ and SIDR_REP (Tables 119 and 120; `CM_SIDR_REQ_*`,
//! `CM_SIDR_REP_*`).

use super::bits::{get_bytes, get_u64, put_bytes, put_u64, Field};
use super::codec::Codec;
use super::{AttrId, SidrRep, SidrReq, DATA_LEN};

/// CM offsets of the SIDR_REQ fields.
pub(crate) mod req {
    use super::Field;

    pub const REQUEST_ID: Field = Field::at(0, 32);
    pub const PKEY: Field = Field::at(4, 16);
    pub const SERVICE_ID: usize = 8;
    pub const PRIVATE_DATA: usize = 16;
}

/// CM offsets of the SIDR_REP fields.
pub(crate) mod rep {
    use super::Field;

    pub const REQUEST_ID: Field = Field::at(0, 32);
    pub const STATUS: Field = Field::at(4, 8);
    pub const ADD_INFO_LEN: Field = Field::at(5, 8);
    /// The ECE vendor ID's upper 16 bits; the kernel fills only the low
    /// byte of it (vendor bits 8..15), so its IDs fit in 16 bits here.
    pub const VENDOR_ID_H: Field = Field::at(6, 16);
    pub const QPN: Field = Field::at(8, 24);
    pub const VENDOR_ID_L: Field = Field::at(11, 8);
    pub const SERVICE_ID: usize = 12;
    pub const QKEY: Field = Field::at(20, 32);
    pub const ADD_INFO: usize = 24;
    pub const PRIVATE_DATA: usize = 96;
}

impl Codec for SidrReq {
    const ATTR: AttrId = AttrId::SidrReq;

    fn read(d: &[u8; DATA_LEN]) -> SidrReq {
        SidrReq {
            request_id: req::REQUEST_ID.get(d),
            pkey: req::PKEY.get(d) as u16,
            service_id: get_u64(d, req::SERVICE_ID),
            private_data: get_bytes(d, req::PRIVATE_DATA),
        }
    }

    fn write(&self, d: &mut [u8; DATA_LEN]) {
        req::REQUEST_ID.set(d, self.request_id);
        req::PKEY.set(d, self.pkey.into());
        put_u64(d, req::SERVICE_ID, self.service_id);
        put_bytes(d, req::PRIVATE_DATA, &self.private_data);
    }
}

impl Codec for SidrRep {
    const ATTR: AttrId = AttrId::SidrRep;

    fn read(d: &[u8; DATA_LEN]) -> SidrRep {
        SidrRep {
            request_id: rep::REQUEST_ID.get(d),
            status: rep::STATUS.get(d) as u8,
            add_info_len: rep::ADD_INFO_LEN.get(d) as u8,
            vendor_id: rep::VENDOR_ID_H.get(d) << 8 | rep::VENDOR_ID_L.get(d),
            qpn: rep::QPN.get(d),
            service_id: get_u64(d, rep::SERVICE_ID),
            qkey: rep::QKEY.get(d),
            add_info: get_bytes(d, rep::ADD_INFO),
            private_data: get_bytes(d, rep::PRIVATE_DATA),
        }
    }

    fn write(&self, d: &mut [u8; DATA_LEN]) {
        rep::REQUEST_ID.set(d, self.request_id);
        rep::STATUS.set(d, self.status.into());
        rep::ADD_INFO_LEN.set(d, self.add_info_len.into());
        rep::VENDOR_ID_H.set(d, self.vendor_id >> 8);
        rep::QPN.set(d, self.qpn);
        rep::VENDOR_ID_L.set(d, self.vendor_id);
        put_u64(d, rep::SERVICE_ID, self.service_id);
        rep::QKEY.set(d, self.qkey);
        put_bytes(d, rep::ADD_INFO, &self.add_info);
        put_bytes(d, rep::PRIVATE_DATA, &self.private_data);
    }
}
