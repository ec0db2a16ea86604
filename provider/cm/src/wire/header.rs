//! The common MAD header (24 bytes, IBA vol. 1 §13.4.2), as a typed view
//! over a byte buffer.

use super::{WireError, MAD_HDR_LEN};

/// Byte ranges of the header fields.
pub mod field {
    use std::ops::Range;

    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    /// R bit (MSB, responses) and method (7 bits); CM uses SEND = 0x03.
    pub const METHOD: usize = 3;
    pub const STATUS: Range<usize> = 4..6;
    pub const CLASS_SPECIFIC: Range<usize> = 6..8;
    pub const TID: Range<usize> = 8..16;
    pub const ATTR_ID: Range<usize> = 16..18;
    pub const RESERVED: Range<usize> = 18..20;
    pub const ATTR_MOD: Range<usize> = 20..24;
}

/// A MAD header view. Construct with [`MadHeader::new_checked`]; the
/// getters of a view made with `new_unchecked` over fewer than 24 bytes
/// panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadHeader<T: AsRef<[u8]>> {
    buffer: T,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl<T: AsRef<[u8]>> MadHeader<T> {
    /// Wraps `buffer` without checking its length.
    pub const fn new_unchecked(buffer: T) -> MadHeader<T> {
        MadHeader { buffer }
    }

    /// Wraps `buffer`, which must hold at least the 24-byte header.
    pub fn new_checked(buffer: T) -> Result<MadHeader<T>, WireError> {
        let h = MadHeader::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// Errors if the buffer is shorter than the header.
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < MAD_HDR_LEN {
            return Err(WireError::TooShort(len));
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }

    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[field::MGMT_CLASS]
    }

    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }

    /// The whole method byte (R bit included).
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[field::METHOD]
    }

    pub fn status(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::STATUS])
    }

    pub fn class_specific(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CLASS_SPECIFIC])
    }

    pub fn tid(&self) -> u64 {
        let b = &self.buffer.as_ref()[field::TID];
        u64::from(be32(&b[..4])) << 32 | u64::from(be32(&b[4..]))
    }

    pub fn attr_id(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ATTR_ID])
    }

    pub fn attr_mod(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::ATTR_MOD])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MadHeader<T> {
    pub fn set_base_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::BASE_VERSION] = v;
    }

    pub fn set_mgmt_class(&mut self, v: u8) {
        self.buffer.as_mut()[field::MGMT_CLASS] = v;
    }

    pub fn set_class_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::CLASS_VERSION] = v;
    }

    pub fn set_method(&mut self, v: u8) {
        self.buffer.as_mut()[field::METHOD] = v;
    }

    pub fn set_status(&mut self, v: u16) {
        self.buffer.as_mut()[field::STATUS].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_class_specific(&mut self, v: u16) {
        self.buffer.as_mut()[field::CLASS_SPECIFIC].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_tid(&mut self, v: u64) {
        self.buffer.as_mut()[field::TID].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_attr_id(&mut self, v: u16) {
        self.buffer.as_mut()[field::ATTR_ID].copy_from_slice(&v.to_be_bytes());
    }

    /// Zeroes the reserved word after the attribute ID.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }

    pub fn set_attr_mod(&mut self, v: u32) {
        self.buffer.as_mut()[field::ATTR_MOD].copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_at_their_offsets() {
        let mut b = [0u8; 24];
        let mut h = MadHeader::new_checked(&mut b[..]).unwrap();
        h.set_base_version(1);
        h.set_mgmt_class(0x07);
        h.set_class_version(2);
        h.set_method(0x03);
        h.set_status(0x0102);
        h.set_class_specific(0x0304);
        h.set_tid(0x1122_3344_5566_7788);
        h.set_attr_id(0x0010);
        h.set_attr_mod(0x3000_0000);
        assert_eq!(
            b,
            [
                1, 7, 2, 3, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 0x10, 0,
                0, 0x30, 0, 0, 0
            ]
        );
        let h = MadHeader::new_checked(&b[..]).unwrap();
        assert_eq!(h.tid(), 0x1122_3344_5566_7788);
        assert_eq!(h.attr_id(), 0x10);
        assert_eq!(h.attr_mod(), 0x3000_0000);
        assert_eq!((h.status(), h.class_specific()), (0x0102, 0x0304));
        assert_eq!(
            MadHeader::new_checked(&b[..23]),
            Err(WireError::TooShort(23))
        );
    }
}
