//! The send slot (SQ): a 96-byte header, then SGEs or inline data.

use transport::verbs::{Sge, WrOpcode};

use super::sge::{put_sges, Sges};
use super::{get, get_u16, get_u32, get_u64, put, too_small, SlotError, SEND_HDR, SGE_SIZE};

/// A send slot (SQ): header, then SGEs or inline data.
#[derive(Clone, Copy, Debug)]
pub struct SendSlot<T: AsRef<[u8]>> {
    buffer: T,
}

/// Byte ranges of the send slot header.
pub mod send_field {
    use super::super::Field;
    pub const WR_ID: Field = 0..8;
    /// `enum ibv_wr_opcode`.
    pub const OPCODE: Field = 8..12;
    /// `ibv_send_flags`; the daemon takes the slot as inline by
    /// IBV_SEND_INLINE alone.
    pub const SEND_FLAGS: Field = 12..16;
    /// Immediate data (the wire word) or the rkey to invalidate.
    pub const IMM_DATA: Field = 16..20;
    pub const NUM_SGE: Field = 20..22;
    pub const INLINE_LEN: Field = 22..24;
    pub const REMOTE_ADDR: Field = 24..32;
    pub const RKEY: Field = 32..36;
    pub const UD_QPN: Field = 36..40;
    /// Compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand; FLUSH: the
    /// length (FLUSH has no local data).
    pub const COMPARE_ADD: Field = 40..48;
    pub const SWAP: Field = 48..56;
    pub const UD_QKEY: Field = 56..60;
    /// FLUSH: placement type | selectivity level << 8.
    pub const FLUSH: Field = 60..64;
    pub const UD_GID: Field = 64..80;
    pub const UD_FLOW_LABEL: Field = 80..84;
    /// BIND_MW: lkey of the region (the window's rkey travels in RKEY, the
    /// new rkey in IMM_DATA, the address in REMOTE_ADDR, the length in
    /// COMPARE_ADD).
    pub const BIND_LKEY: Field = 84..88;
    /// BIND_MW: the window's access flags.
    pub const BIND_ACCESS: Field = 88..92;
    /// SGEs or inline data start here.
    pub const BODY: usize = super::super::SEND_HDR;
}

impl<T: AsRef<[u8]>> SendSlot<T> {
    /// A view without checks: getters panic if `buffer` is shorter than
    /// the header.
    pub const fn new_unchecked(buffer: T) -> SendSlot<T> {
        SendSlot { buffer }
    }

    /// A view whose header, SGE array and inline data fit `buffer`.
    pub fn new_checked(buffer: T) -> Result<SendSlot<T>, SlotError> {
        let s = SendSlot::new_unchecked(buffer);
        s.check_len()?;
        Ok(s)
    }

    /// Checks that the header fits and that `num_sge` SGEs and
    /// `inline_len` bytes fit after it.
    pub fn check_len(&self) -> Result<(), SlotError> {
        let have = self.buffer.as_ref().len();
        too_small(SEND_HDR, have)?;
        too_small(SEND_HDR + self.body_len(), have)
    }

    fn body_len(&self) -> usize {
        (usize::from(self.num_sge()) * SGE_SIZE).max(usize::from(self.inline_len()))
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn wr_id(&self) -> u64 {
        get_u64(self.b(), send_field::WR_ID)
    }
    pub fn opcode(&self) -> WrOpcode {
        WrOpcode(get_u32(self.b(), send_field::OPCODE))
    }
    pub fn send_flags(&self) -> u32 {
        get_u32(self.b(), send_field::SEND_FLAGS)
    }
    pub fn imm_data(&self) -> u32 {
        get_u32(self.b(), send_field::IMM_DATA)
    }
    pub fn num_sge(&self) -> u16 {
        get_u16(self.b(), send_field::NUM_SGE)
    }
    pub fn inline_len(&self) -> u16 {
        get_u16(self.b(), send_field::INLINE_LEN)
    }
    pub fn remote_addr(&self) -> u64 {
        get_u64(self.b(), send_field::REMOTE_ADDR)
    }
    pub fn rkey(&self) -> u32 {
        get_u32(self.b(), send_field::RKEY)
    }
    pub fn ud_qpn(&self) -> u32 {
        get_u32(self.b(), send_field::UD_QPN)
    }
    pub fn compare_add(&self) -> u64 {
        get_u64(self.b(), send_field::COMPARE_ADD)
    }
    pub fn swap(&self) -> u64 {
        get_u64(self.b(), send_field::SWAP)
    }
    pub fn ud_qkey(&self) -> u32 {
        get_u32(self.b(), send_field::UD_QKEY)
    }
    pub fn flush(&self) -> u32 {
        get_u32(self.b(), send_field::FLUSH)
    }
    pub fn ud_gid(&self) -> [u8; 16] {
        get(self.b(), send_field::UD_GID)
    }
    pub fn ud_flow_label(&self) -> u32 {
        get_u32(self.b(), send_field::UD_FLOW_LABEL)
    }
    pub fn bind_lkey(&self) -> u32 {
        get_u32(self.b(), send_field::BIND_LKEY)
    }
    pub fn bind_access(&self) -> u32 {
        get_u32(self.b(), send_field::BIND_ACCESS)
    }

    /// The `num_sge` SGEs after the header.
    pub fn sges(&self) -> Sges<'_> {
        let body = self.b().get(send_field::BODY..).unwrap_or(&[]);
        Sges::new(body, usize::from(self.num_sge()))
    }

    /// The `inline_len` bytes after the header (empty if they do not fit).
    pub fn inline_data(&self) -> &[u8] {
        let n = usize::from(self.inline_len());
        self.b()
            .get(send_field::BODY..send_field::BODY + n)
            .unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SendSlot<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Zeroes the header (reserved bytes included).
    pub fn clear_header(&mut self) {
        self.m()[..SEND_HDR].fill(0);
    }
    pub fn set_wr_id(&mut self, v: u64) {
        put(self.m(), send_field::WR_ID, &v.to_le_bytes());
    }
    pub fn set_opcode(&mut self, v: WrOpcode) {
        put(self.m(), send_field::OPCODE, &v.0.to_le_bytes());
    }
    pub fn set_send_flags(&mut self, v: u32) {
        put(self.m(), send_field::SEND_FLAGS, &v.to_le_bytes());
    }
    pub fn set_imm_data(&mut self, v: u32) {
        put(self.m(), send_field::IMM_DATA, &v.to_le_bytes());
    }
    pub fn set_num_sge(&mut self, v: u16) {
        put(self.m(), send_field::NUM_SGE, &v.to_le_bytes());
    }
    pub fn set_inline_len(&mut self, v: u16) {
        put(self.m(), send_field::INLINE_LEN, &v.to_le_bytes());
    }
    pub fn set_remote_addr(&mut self, v: u64) {
        put(self.m(), send_field::REMOTE_ADDR, &v.to_le_bytes());
    }
    pub fn set_rkey(&mut self, v: u32) {
        put(self.m(), send_field::RKEY, &v.to_le_bytes());
    }
    pub fn set_ud_qpn(&mut self, v: u32) {
        put(self.m(), send_field::UD_QPN, &v.to_le_bytes());
    }
    pub fn set_compare_add(&mut self, v: u64) {
        put(self.m(), send_field::COMPARE_ADD, &v.to_le_bytes());
    }
    pub fn set_swap(&mut self, v: u64) {
        put(self.m(), send_field::SWAP, &v.to_le_bytes());
    }
    pub fn set_ud_qkey(&mut self, v: u32) {
        put(self.m(), send_field::UD_QKEY, &v.to_le_bytes());
    }
    pub fn set_flush(&mut self, v: u32) {
        put(self.m(), send_field::FLUSH, &v.to_le_bytes());
    }
    pub fn set_ud_gid(&mut self, v: &[u8; 16]) {
        put(self.m(), send_field::UD_GID, v);
    }
    pub fn set_ud_flow_label(&mut self, v: u32) {
        put(self.m(), send_field::UD_FLOW_LABEL, &v.to_le_bytes());
    }
    pub fn set_bind_lkey(&mut self, v: u32) {
        put(self.m(), send_field::BIND_LKEY, &v.to_le_bytes());
    }
    pub fn set_bind_access(&mut self, v: u32) {
        put(self.m(), send_field::BIND_ACCESS, &v.to_le_bytes());
    }

    /// Writes `sges` after the header and sets `num_sge` (and
    /// `inline_len` to 0). The buffer must hold them.
    pub fn set_sges(&mut self, sges: &[Sge]) -> Result<(), SlotError> {
        let need = SEND_HDR + sges.len() * SGE_SIZE;
        too_small(need, self.b().len())?;
        let n = u16::try_from(sges.len()).map_err(|_| SlotError::TooSmall {
            need,
            have: self.b().len(),
        })?;
        put_sges(&mut self.m()[send_field::BODY..need], sges);
        self.set_num_sge(n);
        self.set_inline_len(0);
        Ok(())
    }

    /// Copies `data` after the header and sets `inline_len` (and
    /// `num_sge` to 0). The buffer must hold it.
    pub fn set_inline_data(&mut self, data: &[u8]) -> Result<(), SlotError> {
        let need = SEND_HDR + data.len();
        too_small(need, self.b().len())?;
        let n = u16::try_from(data.len()).map_err(|_| SlotError::TooSmall {
            need,
            have: self.b().len(),
        })?;
        self.m()[send_field::BODY..need].copy_from_slice(data);
        self.set_inline_len(n);
        self.set_num_sge(0);
        Ok(())
    }
}
