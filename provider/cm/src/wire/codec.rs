//! A whole CM MAD: [`parse`] (checks the header, decodes the message) and
//! [`emit`] (writes all 256 bytes, reserved bits zero).

use super::header::MadHeader;
use super::{
    AttrId, CmMad, CmMsg, Drep, Dreq, Mra, Rej, Rep, Req, Rtu, SidrRep, SidrReq, WireError,
    BASE_VERSION, CM_CLASS_VERSION, DATA_LEN, MAD_HDR_LEN, MAD_LEN, METHOD_SEND, MGMT_CLASS_CM,
};

/// One message's layout: its attribute ID and how it reads from and
/// writes to the data area (CM offsets). Reading cannot fail: every bit
/// pattern of a field is a value of the message type.
pub(crate) trait Codec: Sized {
    const ATTR: AttrId;
    fn read(d: &[u8; DATA_LEN]) -> Self;
    /// Writes every field, masked to its width, into a zeroed data area.
    fn write(&self, d: &mut [u8; DATA_LEN]);
}

impl AttrId {
    /// The attribute with ID `v`, if the CM class defines it.
    pub fn from_u16(v: u16) -> Option<AttrId> {
        Some(match v {
            0x0010 => AttrId::Req,
            0x0011 => AttrId::Mra,
            0x0012 => AttrId::Rej,
            0x0013 => AttrId::Rep,
            0x0014 => AttrId::Rtu,
            0x0015 => AttrId::Dreq,
            0x0016 => AttrId::Drep,
            0x0017 => AttrId::SidrReq,
            0x0018 => AttrId::SidrRep,
            0x0019 => AttrId::Lap,
            0x001A => AttrId::Apr,
            _ => return None,
        })
    }
}

/// Parses a CM MAD from the first 256 bytes of `bytes` (a UD payload may
/// be longer; the MAD is always 256 bytes).
pub fn parse(bytes: &[u8]) -> Result<CmMad, WireError> {
    let mad: &[u8; MAD_LEN] = bytes
        .get(..MAD_LEN)
        .and_then(|b| b.try_into().ok())
        .ok_or(WireError::TooShort(bytes.len()))?;
    let h = MadHeader::new_checked(&mad[..])?;
    if h.base_version() != BASE_VERSION {
        return Err(WireError::BaseVersion(h.base_version()));
    }
    if h.mgmt_class() != MGMT_CLASS_CM {
        return Err(WireError::MgmtClass(h.mgmt_class()));
    }
    if h.class_version() != CM_CLASS_VERSION {
        return Err(WireError::ClassVersion(h.class_version()));
    }
    if h.method() != METHOD_SEND {
        return Err(WireError::Method(h.method()));
    }
    let mut data = [0u8; DATA_LEN];
    data.copy_from_slice(&mad[MAD_HDR_LEN..]);
    let d = &data;
    let msg = match AttrId::from_u16(h.attr_id()) {
        Some(AttrId::Req) => CmMsg::Req(Box::new(Req::read(d))),
        Some(AttrId::Mra) => CmMsg::Mra(Box::new(Mra::read(d))),
        Some(AttrId::Rej) => CmMsg::Rej(Box::new(Rej::read(d))),
        Some(AttrId::Rep) => CmMsg::Rep(Box::new(Rep::read(d))),
        Some(AttrId::Rtu) => CmMsg::Rtu(Box::new(Rtu::read(d))),
        Some(AttrId::Dreq) => CmMsg::Dreq(Box::new(Dreq::read(d))),
        Some(AttrId::Drep) => CmMsg::Drep(Box::new(Drep::read(d))),
        Some(AttrId::SidrReq) => CmMsg::SidrReq(Box::new(SidrReq::read(d))),
        Some(AttrId::SidrRep) => CmMsg::SidrRep(Box::new(SidrRep::read(d))),
        Some(a @ (AttrId::Lap | AttrId::Apr)) => return Err(WireError::Unsupported(a)),
        None => return Err(WireError::UnknownAttr(h.attr_id())),
    };
    Ok(CmMad {
        tid: h.tid(),
        attr_mod: h.attr_mod(),
        msg,
    })
}

fn write<M: Codec>(m: &M, out: &mut [u8; MAD_LEN]) -> AttrId {
    let mut d = [0u8; DATA_LEN];
    m.write(&mut d);
    out[MAD_HDR_LEN..].copy_from_slice(&d);
    M::ATTR
}

/// Writes `mad` as a whole 256-byte MAD: header (base version 1, class
/// CM, class version 2, method SEND, status 0), then the message with
/// every field masked to its width and every reserved bit zero.
pub fn emit(mad: &CmMad, out: &mut [u8; MAD_LEN]) {
    out.fill(0);
    let attr = match &mad.msg {
        CmMsg::Req(m) => write(m.as_ref(), out),
        CmMsg::Rep(m) => write(m.as_ref(), out),
        CmMsg::Rtu(m) => write(m.as_ref(), out),
        CmMsg::Rej(m) => write(m.as_ref(), out),
        CmMsg::Mra(m) => write(m.as_ref(), out),
        CmMsg::Dreq(m) => write(m.as_ref(), out),
        CmMsg::Drep(m) => write(m.as_ref(), out),
        CmMsg::SidrReq(m) => write(m.as_ref(), out),
        CmMsg::SidrRep(m) => write(m.as_ref(), out),
    };
    let mut h = MadHeader::new_unchecked(&mut out[..]);
    h.set_base_version(BASE_VERSION);
    h.set_mgmt_class(MGMT_CLASS_CM);
    h.set_class_version(CM_CLASS_VERSION);
    h.set_method(METHOD_SEND);
    h.set_status(0);
    h.set_class_specific(0);
    h.set_tid(mad.tid);
    h.set_attr_id(attr as u16);
    h.clear_reserved();
    h.set_attr_mod(mad.attr_mod);
}
