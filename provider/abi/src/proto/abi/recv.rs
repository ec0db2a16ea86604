//! The receive slot (RQ, SRQ): a 16-byte header, then SGEs.

use transport::verbs::Sge;

use super::sge::{put_sges, Sges};
use super::{get_u32, get_u64, put, too_small, SlotError, RECV_HDR, SGE_SIZE};

/// A receive slot (RQ, SRQ): header, then SGEs.
#[derive(Clone, Copy, Debug)]
pub struct RecvSlot<T: AsRef<[u8]>> {
    buffer: T,
}

/// Byte ranges of the receive slot header (12..16 reserved).
pub mod recv_field {
    use super::super::Field;
    pub const WR_ID: Field = 0..8;
    pub const NUM_SGE: Field = 8..12;
    /// SGEs start here.
    pub const BODY: usize = super::super::RECV_HDR;
}

impl<T: AsRef<[u8]>> RecvSlot<T> {
    /// A view without checks: getters panic if `buffer` is shorter than
    /// the header.
    pub const fn new_unchecked(buffer: T) -> RecvSlot<T> {
        RecvSlot { buffer }
    }

    /// A view whose header and `num_sge` SGEs fit `buffer`.
    pub fn new_checked(buffer: T) -> Result<RecvSlot<T>, SlotError> {
        let s = RecvSlot::new_unchecked(buffer);
        s.check_len()?;
        Ok(s)
    }

    pub fn check_len(&self) -> Result<(), SlotError> {
        let have = self.buffer.as_ref().len();
        too_small(RECV_HDR, have)?;
        let n = self.num_sge() as usize;
        too_small(n.saturating_mul(SGE_SIZE).saturating_add(RECV_HDR), have)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn wr_id(&self) -> u64 {
        get_u64(self.buffer.as_ref(), recv_field::WR_ID)
    }
    pub fn num_sge(&self) -> u32 {
        get_u32(self.buffer.as_ref(), recv_field::NUM_SGE)
    }

    /// The `num_sge` SGEs after the header.
    pub fn sges(&self) -> Sges<'_> {
        let body = self.buffer.as_ref().get(recv_field::BODY..).unwrap_or(&[]);
        Sges::new(body, self.num_sge() as usize)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RecvSlot<T> {
    /// Zeroes the header (reserved bytes included).
    pub fn clear_header(&mut self) {
        self.buffer.as_mut()[..RECV_HDR].fill(0);
    }
    pub fn set_wr_id(&mut self, v: u64) {
        put(self.buffer.as_mut(), recv_field::WR_ID, &v.to_le_bytes());
    }
    pub fn set_num_sge(&mut self, v: u32) {
        put(self.buffer.as_mut(), recv_field::NUM_SGE, &v.to_le_bytes());
    }

    /// Writes `sges` after the header and sets `num_sge`. The buffer must
    /// hold them.
    pub fn set_sges(&mut self, sges: &[Sge]) -> Result<(), SlotError> {
        let need = RECV_HDR + sges.len() * SGE_SIZE;
        too_small(need, self.buffer.as_ref().len())?;
        put_sges(&mut self.buffer.as_mut()[recv_field::BODY..need], sges);
        self.set_num_sge(sges.len() as u32);
        Ok(())
    }
}
