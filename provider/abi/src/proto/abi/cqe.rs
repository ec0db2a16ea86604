//! The completion queue entry: 64 bytes, or 80 with the two completion
//! timestamps of a CQ created with them.

use super::{
    get, get_u16, get_u32, get_u64, put, too_small, SlotError, CQE_SIZE, CQE_STAMPED_SIZE,
};

/// The bytes of one CQE as the daemon builds and queues it (room for the
/// timestamps; a CQ without them gets the first [`CQE_SIZE`] bytes).
pub type CqeBytes = [u8; CQE_STAMPED_SIZE];

/// A completion queue entry (64 bytes).
#[derive(Clone, Copy, Debug)]
pub struct Cqe<T: AsRef<[u8]>> {
    buffer: T,
}

/// Byte ranges of a CQE (47 reserved).
pub mod cqe_field {
    use super::super::Field;
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
    /// 1: a receive of a message with the solicited-event bit. The
    /// daemon's, for CQs armed for solicited completions; not a field of
    /// `ibv_wc`, the client reads nothing here.
    pub const SOLICITED: usize = 46;
    /// UD: the sender's GID.
    pub const SRC_GID: Field = 48..64;
    /// Completion time in ns of CLOCK_MONOTONIC, the device's "HCA clock"
    /// (stamped entries only).
    pub const COMPLETION_TS: Field = 64..72;
    /// Completion time in ns of CLOCK_REALTIME (stamped entries only).
    pub const COMPLETION_WALLCLOCK: Field = 72..80;
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
    pub fn solicited(&self) -> bool {
        self.b()[cqe_field::SOLICITED] != 0
    }
    pub fn src_gid(&self) -> [u8; 16] {
        get(self.b(), cqe_field::SRC_GID)
    }
    /// The HCA-clock timestamp; 0 for an entry without timestamps (a
    /// buffer shorter than [`CQE_STAMPED_SIZE`]).
    pub fn completion_ts(&self) -> u64 {
        self.stamp(cqe_field::COMPLETION_TS)
    }
    /// The wall-clock timestamp; 0 for an entry without timestamps.
    pub fn completion_wallclock_ns(&self) -> u64 {
        self.stamp(cqe_field::COMPLETION_WALLCLOCK)
    }
    fn stamp(&self, f: super::Field) -> u64 {
        if self.b().len() < CQE_STAMPED_SIZE {
            0
        } else {
            get_u64(self.b(), f)
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Zeroes the entry (with its timestamps, if the buffer has them).
    pub fn clear(&mut self) {
        let n = self.m().len().min(CQE_STAMPED_SIZE);
        self.m()[..n].fill(0);
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
    pub fn set_solicited(&mut self, v: bool) {
        self.m()[cqe_field::SOLICITED] = u8::from(v);
    }
    pub fn set_src_gid(&mut self, v: &[u8; 16]) {
        put(self.m(), cqe_field::SRC_GID, v);
    }
    /// Sets both timestamps; panics on a buffer shorter than
    /// [`CQE_STAMPED_SIZE`] (the daemon's own [`CqeBytes`] are long enough).
    pub fn set_completion_stamps(&mut self, ts: u64, wallclock_ns: u64) {
        put(self.m(), cqe_field::COMPLETION_TS, &ts.to_le_bytes());
        put(
            self.m(),
            cqe_field::COMPLETION_WALLCLOCK,
            &wallclock_ns.to_le_bytes(),
        );
    }
}
