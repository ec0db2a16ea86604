//! Layouts of the slots in the shared-memory rings (the fast path).
//!
//! The contract between the daemon and the client library, written once:
//! typed views over slot bytes in smoltcp's style ([`SendSlot`],
//! [`RecvSlot`], [`Cqe`]), each with a `field` module of byte ranges,
//! getters, and setters when the bytes are writable. The client writes
//! slots with the setters, the daemon reads them with the getters. All
//! fields are little-endian at fixed offsets and read field by field (no
//! `repr(C)` casts), so a slot written by a hostile or crashed client reads
//! as *some* values that the daemon then validates, never as undefined
//! behaviour. Build a view over untrusted bytes with `new_checked`:
//! getters of a view over a buffer shorter than its header panic.
//!
//! ```text
//! send slot (SQ; header 96 bytes, then SGEs or inline data)
//!   0 u64 wr_id            8 u32 opcode (enum ibv_wr_opcode)
//!  12 u32 send_flags      16 u32 imm_data (wire word) / invalidate rkey
//!  20 u16 num_sge         22 u16 inline_len
//!  24 u64 remote_addr     32 u32 rkey        36 u32 ud remote qpn
//!  40 u64 compare_add     48 u64 swap        56 u32 ud remote qkey
//!  60 u32 flush: type | level << 8            64 [16] ud dest GID
//!  80 u32 ud flow label   84..96 reserved
//!  (FLUSH has no local data: its length travels in compare_add)
//!  96 SGE array: { u64 addr, u32 length, u32 lkey } * num_sge
//!     or inline_len bytes of data
//!
//! recv slot (RQ, SRQ; header 16 bytes, then SGEs)
//!   0 u64 wr_id   8 u32 num_sge   12 reserved   16 SGE array
//!
//! CQE (64 bytes)
//!   0 u64 wr_id   8 u32 status   12 u32 opcode   16 u32 vendor_err
//!  20 u32 byte_len   24 u32 imm_data / invalidated rkey   28 u32 qp_num
//!  32 u32 src_qp   36 u32 wc_flags   40 u16 pkey_index   42 u16 slid
//!  44 u8 sl   45 u8 dlid_path_bits   46 u16 reserved
//!  48 [16] source GID (UD)
//! ```

use std::ops::Range;

use transport::verbs::{Sge, WrOpcode};

pub const SEND_HDR: usize = 96;
pub const RECV_HDR: usize = 16;
pub const SGE_SIZE: usize = 16;
pub const CQE_SIZE: usize = 64;

/// Slot size for a send queue with these limits (multiple of 64).
pub const fn send_slot_size(max_sge: u32, max_inline: u32) -> u32 {
    let sges = max_sge as usize * SGE_SIZE;
    let body = if sges > max_inline as usize {
        sges
    } else {
        max_inline as usize
    };
    ((SEND_HDR + body).div_ceil(64) * 64) as u32
}

/// Slot size for a receive queue with `max_sge` SGEs (multiple of 64).
pub const fn recv_slot_size(max_sge: u32) -> u32 {
    ((RECV_HDR + max_sge as usize * SGE_SIZE).div_ceil(64) * 64) as u32
}

/// Why a view cannot be built over some bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error("slot of {have} bytes cannot hold {need}")]
    TooSmall { need: usize, have: usize },
}

type Field = Range<usize>;

fn too_small(need: usize, have: usize) -> Result<(), SlotError> {
    if need > have {
        Err(SlotError::TooSmall { need, have })
    } else {
        Ok(())
    }
}

fn get<const N: usize>(b: &[u8], f: Field) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[f]);
    a
}
fn get_u16(b: &[u8], f: Field) -> u16 {
    u16::from_le_bytes(get(b, f))
}
fn get_u32(b: &[u8], f: Field) -> u32 {
    u32::from_le_bytes(get(b, f))
}
fn get_u64(b: &[u8], f: Field) -> u64 {
    u64::from_le_bytes(get(b, f))
}
fn put(b: &mut [u8], f: Field, v: &[u8]) {
    b[f].copy_from_slice(v);
}

/// One SGE as stored after a slot header: `{ u64 addr, u32 length, u32 lkey }`.
pub mod sge_field {
    use super::Field;
    pub const ADDR: Field = 0..8;
    pub const LENGTH: Field = 8..12;
    pub const LKEY: Field = 12..16;
}

/// The bytes of one SGE.
pub fn emit_sge(s: &Sge) -> [u8; SGE_SIZE] {
    let mut b = [0u8; SGE_SIZE];
    put(&mut b, sge_field::ADDR, &s.addr.to_le_bytes());
    put(&mut b, sge_field::LENGTH, &s.length.to_le_bytes());
    put(&mut b, sge_field::LKEY, &s.lkey.to_le_bytes());
    b
}

fn parse_sge(b: &[u8; SGE_SIZE]) -> Sge {
    Sge {
        addr: get_u64(b, sge_field::ADDR),
        length: get_u32(b, sge_field::LENGTH),
        lkey: get_u32(b, sge_field::LKEY),
    }
}

/// The SGEs of a slot body, read in place (no allocation). Stops early,
/// rather than panicking, if the body is shorter than the count says.
#[derive(Clone, Debug)]
pub struct Sges<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
    left: usize,
}

impl<'a> Sges<'a> {
    fn new(body: &'a [u8], n: usize) -> Sges<'a> {
        Sges {
            chunks: body.chunks_exact(SGE_SIZE),
            left: n,
        }
    }
}

impl Iterator for Sges<'_> {
    type Item = Sge;
    fn next(&mut self) -> Option<Sge> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let c: &[u8; SGE_SIZE] = self.chunks.next()?.try_into().ok()?;
        Some(parse_sge(c))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.left.min(self.chunks.len());
        (n, Some(n))
    }
}

impl ExactSizeIterator for Sges<'_> {}

fn put_sges(body: &mut [u8], sges: &[Sge]) {
    for (c, s) in body.chunks_exact_mut(SGE_SIZE).zip(sges) {
        c.copy_from_slice(&emit_sge(s));
    }
}

/// A send slot (SQ): header, then SGEs or inline data.
#[derive(Clone, Copy, Debug)]
pub struct SendSlot<T: AsRef<[u8]>> {
    buffer: T,
}

/// Byte ranges of the send slot header.
pub mod send_field {
    use super::Field;
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
    /// SGEs or inline data start here.
    pub const BODY: usize = super::SEND_HDR;
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

/// A receive slot (RQ, SRQ): header, then SGEs.
#[derive(Clone, Copy, Debug)]
pub struct RecvSlot<T: AsRef<[u8]>> {
    buffer: T,
}

/// Byte ranges of the receive slot header (12..16 reserved).
pub mod recv_field {
    use super::Field;
    pub const WR_ID: Field = 0..8;
    pub const NUM_SGE: Field = 8..12;
    /// SGEs start here.
    pub const BODY: usize = super::RECV_HDR;
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

/// The bytes of one CQE, as the daemon queues them while a ring is full.
pub type CqeBytes = [u8; CQE_SIZE];

/// A completion queue entry (64 bytes).
#[derive(Clone, Copy, Debug)]
pub struct Cqe<T: AsRef<[u8]>> {
    buffer: T,
}

/// Byte ranges of a CQE (46..48 reserved).
pub mod cqe_field {
    use super::Field;
    pub const WR_ID: Field = 0..8;
    /// `enum ibv_wc_status`.
    pub const STATUS: Field = 8..12;
    /// `enum ibv_wc_opcode`.
    pub const OPCODE: Field = 12..16;
    pub const VENDOR_ERR: Field = 16..20;
    pub const BYTE_LEN: Field = 20..24;
    /// Immediate data (wire word) or the invalidated rkey.
    pub const IMM_DATA: Field = 24..28;
    pub const QP_NUM: Field = 28..32;
    pub const SRC_QP: Field = 32..36;
    pub const WC_FLAGS: Field = 36..40;
    pub const PKEY_INDEX: Field = 40..42;
    pub const SLID: Field = 42..44;
    pub const SL: usize = 44;
    pub const DLID_PATH_BITS: usize = 45;
    /// UD: the sender's GID.
    pub const SRC_GID: Field = 48..64;
}

impl<T: AsRef<[u8]>> Cqe<T> {
    /// A view without checks: getters panic if `buffer` is shorter than
    /// [`CQE_SIZE`].
    pub const fn new_unchecked(buffer: T) -> Cqe<T> {
        Cqe { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Cqe<T>, SlotError> {
        too_small(CQE_SIZE, buffer.as_ref().len())?;
        Ok(Cqe::new_unchecked(buffer))
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn wr_id(&self) -> u64 {
        get_u64(self.b(), cqe_field::WR_ID)
    }
    pub fn status(&self) -> u32 {
        get_u32(self.b(), cqe_field::STATUS)
    }
    pub fn opcode(&self) -> u32 {
        get_u32(self.b(), cqe_field::OPCODE)
    }
    pub fn vendor_err(&self) -> u32 {
        get_u32(self.b(), cqe_field::VENDOR_ERR)
    }
    pub fn byte_len(&self) -> u32 {
        get_u32(self.b(), cqe_field::BYTE_LEN)
    }
    pub fn imm_data(&self) -> u32 {
        get_u32(self.b(), cqe_field::IMM_DATA)
    }
    pub fn qp_num(&self) -> u32 {
        get_u32(self.b(), cqe_field::QP_NUM)
    }
    pub fn src_qp(&self) -> u32 {
        get_u32(self.b(), cqe_field::SRC_QP)
    }
    pub fn wc_flags(&self) -> u32 {
        get_u32(self.b(), cqe_field::WC_FLAGS)
    }
    pub fn pkey_index(&self) -> u16 {
        get_u16(self.b(), cqe_field::PKEY_INDEX)
    }
    pub fn slid(&self) -> u16 {
        get_u16(self.b(), cqe_field::SLID)
    }
    pub fn sl(&self) -> u8 {
        self.b()[cqe_field::SL]
    }
    pub fn dlid_path_bits(&self) -> u8 {
        self.b()[cqe_field::DLID_PATH_BITS]
    }
    pub fn src_gid(&self) -> [u8; 16] {
        get(self.b(), cqe_field::SRC_GID)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Zeroes the entry.
    pub fn clear(&mut self) {
        self.m()[..CQE_SIZE].fill(0);
    }
    pub fn set_wr_id(&mut self, v: u64) {
        put(self.m(), cqe_field::WR_ID, &v.to_le_bytes());
    }
    pub fn set_status(&mut self, v: u32) {
        put(self.m(), cqe_field::STATUS, &v.to_le_bytes());
    }
    pub fn set_opcode(&mut self, v: u32) {
        put(self.m(), cqe_field::OPCODE, &v.to_le_bytes());
    }
    pub fn set_vendor_err(&mut self, v: u32) {
        put(self.m(), cqe_field::VENDOR_ERR, &v.to_le_bytes());
    }
    pub fn set_byte_len(&mut self, v: u32) {
        put(self.m(), cqe_field::BYTE_LEN, &v.to_le_bytes());
    }
    pub fn set_imm_data(&mut self, v: u32) {
        put(self.m(), cqe_field::IMM_DATA, &v.to_le_bytes());
    }
    pub fn set_qp_num(&mut self, v: u32) {
        put(self.m(), cqe_field::QP_NUM, &v.to_le_bytes());
    }
    pub fn set_src_qp(&mut self, v: u32) {
        put(self.m(), cqe_field::SRC_QP, &v.to_le_bytes());
    }
    pub fn set_wc_flags(&mut self, v: u32) {
        put(self.m(), cqe_field::WC_FLAGS, &v.to_le_bytes());
    }
    pub fn set_pkey_index(&mut self, v: u16) {
        put(self.m(), cqe_field::PKEY_INDEX, &v.to_le_bytes());
    }
    pub fn set_slid(&mut self, v: u16) {
        put(self.m(), cqe_field::SLID, &v.to_le_bytes());
    }
    pub fn set_sl(&mut self, v: u8) {
        self.m()[cqe_field::SL] = v;
    }
    pub fn set_dlid_path_bits(&mut self, v: u8) {
        self.m()[cqe_field::DLID_PATH_BITS] = v;
    }
    pub fn set_src_gid(&mut self, v: &[u8; 16]) {
        put(self.m(), cqe_field::SRC_GID, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sge() -> impl Strategy<Value = Sge> {
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(addr, length, lkey)| Sge {
            addr,
            length,
            lkey,
        })
    }

    /// The offsets of the layout in the module doc, pinned byte by byte:
    /// the field modules may be rewritten, the contract may not.
    #[test]
    fn layout_is_the_documented_one() {
        let mut b = [0u8; 128];
        let mut s = SendSlot::new_unchecked(&mut b[..]);
        s.set_wr_id(0x0807_0605_0403_0201);
        s.set_opcode(WrOpcode(0x0c0b_0a09));
        s.set_send_flags(0x100f_0e0d);
        s.set_imm_data(0x1413_1211);
        s.set_num_sge(0x1615);
        s.set_inline_len(0x1817);
        s.set_remote_addr(0x201f_1e1d_1c1b_1a19);
        s.set_rkey(0x2423_2221);
        s.set_ud_qpn(0x2827_2625);
        s.set_compare_add(0x302f_2e2d_2c2b_2a29);
        s.set_swap(0x3837_3635_3433_3231);
        s.set_ud_qkey(0x3c3b_3a39);
        s.set_flush(0x403f_3e3d);
        s.set_ud_gid(&std::array::from_fn(|i| 0x41 + i as u8));
        s.set_ud_flow_label(0x5453_5251);
        let want: Vec<u8> = (1..=0x54).collect();
        assert_eq!(&b[..0x54], &want[..]);
        assert!(b[0x54..SEND_HDR].iter().all(|&x| x == 0), "reserved");
        let sg = emit_sge(&Sge {
            addr: 0x0807_0605_0403_0201,
            length: 0x0c0b_0a09,
            lkey: 0x100f_0e0d,
        });
        assert_eq!(sg.to_vec(), (1..=16).collect::<Vec<u8>>());

        let mut r = [0u8; RECV_HDR];
        let mut v = RecvSlot::new_unchecked(&mut r[..]);
        v.set_wr_id(0x0807_0605_0403_0201);
        v.set_num_sge(0x0c0b_0a09);
        assert_eq!(&r[..12], &(1..=12).collect::<Vec<u8>>()[..]);

        let mut c = [0u8; CQE_SIZE];
        let mut e = Cqe::new_unchecked(&mut c[..]);
        e.set_wr_id(0x0807_0605_0403_0201);
        e.set_status(0x0c0b_0a09);
        e.set_opcode(0x100f_0e0d);
        e.set_vendor_err(0x1413_1211);
        e.set_byte_len(0x1817_1615);
        e.set_imm_data(0x1c1b_1a19);
        e.set_qp_num(0x201f_1e1d);
        e.set_src_qp(0x2423_2221);
        e.set_wc_flags(0x2827_2625);
        e.set_pkey_index(0x2a29);
        e.set_slid(0x2c2b);
        e.set_sl(0x2d);
        e.set_dlid_path_bits(0x2e);
        e.set_src_gid(&std::array::from_fn(|i| 0x31 + i as u8));
        assert_eq!(&c[..46], &(1..=46).collect::<Vec<u8>>()[..]);
        assert_eq!(&c[46..48], &[0, 0], "reserved");
        assert_eq!(&c[48..], &(0x31..=0x40).collect::<Vec<u8>>()[..]);
    }

    proptest! {
        #[test]
        fn send_round_trip(wr_id in any::<u64>(), opcode in 0u32..16, flags in any::<u32>(),
                           sges in proptest::collection::vec(sge(), 0..8),
                           inline in proptest::collection::vec(any::<u8>(), 0..200),
                           gid in any::<[u8; 16]>(), ra in any::<u64>(), ca in any::<u64>()) {
            let mut b = vec![0u8; send_slot_size(8, 256) as usize];
            let mut s = SendSlot::new_unchecked(&mut b[..]);
            s.set_wr_id(wr_id);
            s.set_opcode(WrOpcode(opcode));
            s.set_send_flags(flags);
            s.set_imm_data(7);
            s.set_remote_addr(ra);
            s.set_rkey(9);
            s.set_ud_qpn(3);
            s.set_compare_add(ca);
            s.set_swap(!ca);
            s.set_ud_qkey(5);
            s.set_flush(0x0102);
            s.set_ud_gid(&gid);
            s.set_ud_flow_label(0x1234);
            if inline.is_empty() {
                s.set_sges(&sges).unwrap();
            } else {
                s.set_inline_data(&inline).unwrap();
            }
            let s = SendSlot::new_checked(&b[..]).unwrap();
            prop_assert_eq!((s.wr_id(), s.opcode(), s.send_flags()), (wr_id, WrOpcode(opcode), flags));
            prop_assert_eq!((s.imm_data(), s.remote_addr(), s.rkey()), (7, ra, 9));
            prop_assert_eq!((s.ud_qpn(), s.compare_add(), s.swap()), (3, ca, !ca));
            prop_assert_eq!((s.ud_qkey(), s.flush(), s.ud_gid()), (5, 0x0102, gid));
            prop_assert_eq!(s.ud_flow_label(), 0x1234);
            if inline.is_empty() {
                prop_assert_eq!(s.sges().collect::<Vec<_>>(), sges);
                prop_assert!(s.inline_data().is_empty());
            } else {
                prop_assert_eq!(s.inline_data(), &inline[..]);
                prop_assert_eq!(s.sges().len(), 0);
            }
        }

        #[test]
        fn recv_round_trip(wr_id in any::<u64>(), sges in proptest::collection::vec(sge(), 0..8)) {
            let mut b = vec![0u8; recv_slot_size(8) as usize];
            let mut r = RecvSlot::new_unchecked(&mut b[..]);
            r.set_wr_id(wr_id);
            r.set_sges(&sges).unwrap();
            let r = RecvSlot::new_checked(&b[..]).unwrap();
            prop_assert_eq!(r.wr_id(), wr_id);
            prop_assert_eq!(r.sges().collect::<Vec<_>>(), sges);
        }

        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            // Checked views read every field; unchecked ones over short
            // buffers are not built from untrusted bytes.
            if let Ok(s) = SendSlot::new_checked(&b[..]) {
                let _ = (s.wr_id(), s.opcode(), s.ud_gid(), s.ud_flow_label());
                prop_assert_eq!(s.sges().count(), usize::from(s.num_sge()));
                prop_assert_eq!(s.inline_data().len(), usize::from(s.inline_len()));
            }
            if let Ok(r) = RecvSlot::new_checked(&b[..]) {
                prop_assert_eq!(r.sges().count() as u32, r.num_sge());
            }
            if let Ok(c) = Cqe::new_checked(&b[..]) {
                let _ = (c.wr_id(), c.src_gid(), c.sl(), c.dlid_path_bits());
            }
            // The SGE iterator stops at the end of the bytes, whatever the
            // count says.
            let s = SendSlot::new_unchecked(&b[..]);
            if b.len() >= SEND_HDR {
                prop_assert!(s.sges().count() <= (b.len() - SEND_HDR) / SGE_SIZE);
            }
        }
    }

    #[test]
    fn short_buffers_are_refused() {
        let b = [0u8; SEND_HDR - 1];
        assert_eq!(
            SendSlot::new_checked(&b[..]).unwrap_err(),
            SlotError::TooSmall {
                need: SEND_HDR,
                have: SEND_HDR - 1
            }
        );
        let mut b = [0u8; 128];
        SendSlot::new_unchecked(&mut b[..]).set_num_sge(3);
        assert!(SendSlot::new_checked(&b[..]).is_err(), "3 SGEs in 32 bytes");
        let mut b = [0u8; 64];
        RecvSlot::new_unchecked(&mut b[..]).set_num_sge(u32::MAX);
        assert!(RecvSlot::new_checked(&b[..]).is_err());
        assert!(Cqe::new_checked(&[0u8; CQE_SIZE - 1][..]).is_err());
        let mut s = SendSlot::new_unchecked(vec![0u8; SEND_HDR + 16]);
        assert!(s.set_sges(&[Sge::default(); 2]).is_err());
        assert!(s.set_inline_data(&[0; 17]).is_err());
    }

    #[test]
    fn cqe_round_trip() {
        let mut b = [0u8; CQE_SIZE];
        let mut c = Cqe::new_unchecked(&mut b);
        c.set_wr_id(1);
        c.set_status(5);
        c.set_opcode(128);
        c.set_vendor_err(2);
        c.set_byte_len(40);
        c.set_imm_data(0xdead);
        c.set_qp_num(0x11);
        c.set_src_qp(0x12);
        c.set_wc_flags(3);
        c.set_src_gid(&[7; 16]);
        let c = Cqe::new_checked(&b).unwrap();
        assert_eq!(
            (c.wr_id(), c.status(), c.opcode(), c.vendor_err()),
            (1, 5, 128, 2)
        );
        assert_eq!(
            (c.byte_len(), c.imm_data(), c.qp_num(), c.src_qp()),
            (40, 0xdead, 0x11, 0x12)
        );
        assert_eq!(
            (c.wc_flags(), c.pkey_index(), c.slid(), c.sl()),
            (3, 0, 0, 0)
        );
        assert_eq!((c.dlid_path_bits(), c.src_gid()), (0, [7; 16]));
    }

    #[test]
    fn slot_sizes() {
        assert_eq!(send_slot_size(1, 0), 128);
        assert_eq!(send_slot_size(4, 220), 320);
        assert_eq!(recv_slot_size(1), 64);
        assert_eq!(recv_slot_size(4), 128);
    }
}
