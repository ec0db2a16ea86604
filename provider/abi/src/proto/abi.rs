//! Layouts of the slots in the shared-memory rings (the fast path).
//!
//! Shared by the daemon and the client library (and through it the C
//! provider). All fields little-endian at fixed offsets; encoded and
//! decoded field by field (no `repr(C)` casts), so a slot written by a
//! hostile or crashed client decodes to *some* values that the daemon then
//! validates — never to undefined behaviour.
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

/// `enum ibv_wr_opcode` values.
pub mod wr_opcode {
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    pub const LOCAL_INV: u32 = 7;
    pub const BIND_MW: u32 = 8;
    pub const SEND_WITH_INV: u32 = 9;
    pub const FLUSH: u32 = 14;
    pub const ATOMIC_WRITE: u32 = 15;
}

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

/// One scatter/gather element.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// A send WQE as posted by the client (not yet validated).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendSlot {
    pub wr_id: u64,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_or_inv: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub ud_qpn: u32,
    /// Compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand; FLUSH: the
    /// length to flush.
    pub compare_add: u64,
    pub swap: u64,
    pub ud_qkey: u32,
    pub flush: u32,
    pub ud_gid: [u8; 16],
    pub ud_flow_label: u32,
    pub sges: Vec<Sge>,
    pub inline: Vec<u8>,
}

/// A receive WQE as posted by the client (not yet validated).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecvSlot {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

/// A completion as written into the CQ ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_or_inv: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    pub src_gid: [u8; 16],
}

/// Why a slot could not be encoded or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error("slot of {have} bytes cannot hold {need}")]
    TooSmall { need: usize, have: usize },
}

fn get<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(get(b, at))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(get(b, at))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(get(b, at))
}

fn put_sges(b: &mut [u8], at: usize, sges: &[Sge]) {
    for (i, s) in sges.iter().enumerate() {
        let o = at + i * SGE_SIZE;
        b[o..o + 8].copy_from_slice(&s.addr.to_le_bytes());
        b[o + 8..o + 12].copy_from_slice(&s.length.to_le_bytes());
        b[o + 12..o + 16].copy_from_slice(&s.lkey.to_le_bytes());
    }
}

fn get_sges(b: &[u8], at: usize, n: usize) -> Vec<Sge> {
    (0..n)
        .map(|i| {
            let o = at + i * SGE_SIZE;
            Sge {
                addr: u64_at(b, o),
                length: u32_at(b, o + 8),
                lkey: u32_at(b, o + 12),
            }
        })
        .collect()
}

impl SendSlot {
    /// Writes the slot into `b` (the whole slot).
    pub fn encode(&self, b: &mut [u8]) -> Result<(), SlotError> {
        let body = (self.sges.len() * SGE_SIZE).max(self.inline.len());
        let need = SEND_HDR + body;
        if b.len() < need
            || self.sges.len() > u16::MAX as usize
            || self.inline.len() > u16::MAX as usize
        {
            return Err(SlotError::TooSmall {
                need,
                have: b.len(),
            });
        }
        b[..SEND_HDR].fill(0);
        b[0..8].copy_from_slice(&self.wr_id.to_le_bytes());
        b[8..12].copy_from_slice(&self.opcode.to_le_bytes());
        b[12..16].copy_from_slice(&self.send_flags.to_le_bytes());
        b[16..20].copy_from_slice(&self.imm_or_inv.to_le_bytes());
        b[20..22].copy_from_slice(&(self.sges.len() as u16).to_le_bytes());
        b[22..24].copy_from_slice(&(self.inline.len() as u16).to_le_bytes());
        b[24..32].copy_from_slice(&self.remote_addr.to_le_bytes());
        b[32..36].copy_from_slice(&self.rkey.to_le_bytes());
        b[36..40].copy_from_slice(&self.ud_qpn.to_le_bytes());
        b[40..48].copy_from_slice(&self.compare_add.to_le_bytes());
        b[48..56].copy_from_slice(&self.swap.to_le_bytes());
        b[56..60].copy_from_slice(&self.ud_qkey.to_le_bytes());
        b[60..64].copy_from_slice(&self.flush.to_le_bytes());
        b[64..80].copy_from_slice(&self.ud_gid);
        b[80..84].copy_from_slice(&self.ud_flow_label.to_le_bytes());
        if self.inline.is_empty() {
            put_sges(b, SEND_HDR, &self.sges);
        } else {
            b[SEND_HDR..SEND_HDR + self.inline.len()].copy_from_slice(&self.inline);
        }
        Ok(())
    }

    /// Reads a slot. Counts that do not fit the slot are an error;
    /// every other field is returned as found, for the daemon to validate.
    pub fn decode(b: &[u8]) -> Result<SendSlot, SlotError> {
        if b.len() < SEND_HDR {
            return Err(SlotError::TooSmall {
                need: SEND_HDR,
                have: b.len(),
            });
        }
        let num_sge = usize::from(u16_at(b, 20));
        let inline_len = usize::from(u16_at(b, 22));
        let body = (num_sge * SGE_SIZE).max(inline_len);
        if SEND_HDR + body > b.len() {
            return Err(SlotError::TooSmall {
                need: SEND_HDR + body,
                have: b.len(),
            });
        }
        let (sges, inline) = if inline_len > 0 {
            (Vec::new(), b[SEND_HDR..SEND_HDR + inline_len].to_vec())
        } else {
            (get_sges(b, SEND_HDR, num_sge), Vec::new())
        };
        Ok(SendSlot {
            wr_id: u64_at(b, 0),
            opcode: u32_at(b, 8),
            send_flags: u32_at(b, 12),
            imm_or_inv: u32_at(b, 16),
            remote_addr: u64_at(b, 24),
            rkey: u32_at(b, 32),
            ud_qpn: u32_at(b, 36),
            compare_add: u64_at(b, 40),
            swap: u64_at(b, 48),
            ud_qkey: u32_at(b, 56),
            flush: u32_at(b, 60),
            ud_gid: get(b, 64),
            ud_flow_label: u32_at(b, 80),
            sges,
            inline,
        })
    }
}

impl RecvSlot {
    pub fn encode(&self, b: &mut [u8]) -> Result<(), SlotError> {
        let need = RECV_HDR + self.sges.len() * SGE_SIZE;
        if b.len() < need {
            return Err(SlotError::TooSmall {
                need,
                have: b.len(),
            });
        }
        b[..RECV_HDR].fill(0);
        b[0..8].copy_from_slice(&self.wr_id.to_le_bytes());
        b[8..12].copy_from_slice(&(self.sges.len() as u32).to_le_bytes());
        put_sges(b, RECV_HDR, &self.sges);
        Ok(())
    }

    pub fn decode(b: &[u8]) -> Result<RecvSlot, SlotError> {
        if b.len() < RECV_HDR {
            return Err(SlotError::TooSmall {
                need: RECV_HDR,
                have: b.len(),
            });
        }
        let n = u32_at(b, 8) as usize;
        let need = n.saturating_mul(SGE_SIZE).saturating_add(RECV_HDR);
        if need > b.len() {
            return Err(SlotError::TooSmall {
                need,
                have: b.len(),
            });
        }
        Ok(RecvSlot {
            wr_id: u64_at(b, 0),
            sges: get_sges(b, RECV_HDR, n),
        })
    }
}

impl Cqe {
    pub fn encode(&self, b: &mut [u8]) -> Result<(), SlotError> {
        if b.len() < CQE_SIZE {
            return Err(SlotError::TooSmall {
                need: CQE_SIZE,
                have: b.len(),
            });
        }
        b[0..8].copy_from_slice(&self.wr_id.to_le_bytes());
        b[8..12].copy_from_slice(&self.status.to_le_bytes());
        b[12..16].copy_from_slice(&self.opcode.to_le_bytes());
        b[16..20].copy_from_slice(&self.vendor_err.to_le_bytes());
        b[20..24].copy_from_slice(&self.byte_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.imm_or_inv.to_le_bytes());
        b[28..32].copy_from_slice(&self.qp_num.to_le_bytes());
        b[32..36].copy_from_slice(&self.src_qp.to_le_bytes());
        b[36..40].copy_from_slice(&self.wc_flags.to_le_bytes());
        b[40..42].copy_from_slice(&self.pkey_index.to_le_bytes());
        b[42..44].copy_from_slice(&self.slid.to_le_bytes());
        b[44] = self.sl;
        b[45] = self.dlid_path_bits;
        b[46..48].fill(0);
        b[48..64].copy_from_slice(&self.src_gid);
        Ok(())
    }

    pub fn decode(b: &[u8]) -> Result<Cqe, SlotError> {
        if b.len() < CQE_SIZE {
            return Err(SlotError::TooSmall {
                need: CQE_SIZE,
                have: b.len(),
            });
        }
        Ok(Cqe {
            wr_id: u64_at(b, 0),
            status: u32_at(b, 8),
            opcode: u32_at(b, 12),
            vendor_err: u32_at(b, 16),
            byte_len: u32_at(b, 20),
            imm_or_inv: u32_at(b, 24),
            qp_num: u32_at(b, 28),
            src_qp: u32_at(b, 32),
            wc_flags: u32_at(b, 36),
            pkey_index: u16_at(b, 40),
            slid: u16_at(b, 42),
            sl: b[44],
            dlid_path_bits: b[45],
            src_gid: get(b, 48),
        })
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

    proptest! {
        #[test]
        fn send_round_trip(wr_id in any::<u64>(), opcode in 0u32..16, flags in any::<u32>(),
                           sges in proptest::collection::vec(sge(), 0..8),
                           inline in proptest::collection::vec(any::<u8>(), 0..200),
                           gid in any::<[u8; 16]>(), ra in any::<u64>(), ca in any::<u64>()) {
            let use_inline = !inline.is_empty();
            let s = SendSlot { wr_id, opcode, send_flags: flags, imm_or_inv: 7, remote_addr: ra,
                rkey: 9, ud_qpn: 3, compare_add: ca, swap: !ca, ud_qkey: 5, flush: 0x0102,
                ud_gid: gid, ud_flow_label: 0x1234,
                sges: if use_inline { vec![] } else { sges.clone() },
                inline: inline.clone() };
            let mut b = vec![0u8; send_slot_size(8, 256) as usize];
            s.encode(&mut b).unwrap();
            prop_assert_eq!(SendSlot::decode(&b).unwrap(), s);
        }

        #[test]
        fn recv_round_trip(wr_id in any::<u64>(), sges in proptest::collection::vec(sge(), 0..8)) {
            let r = RecvSlot { wr_id, sges };
            let mut b = vec![0u8; recv_slot_size(8) as usize];
            r.encode(&mut b).unwrap();
            prop_assert_eq!(RecvSlot::decode(&b).unwrap(), r);
        }

        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = SendSlot::decode(&b);
            let _ = RecvSlot::decode(&b);
            let _ = Cqe::decode(&b);
        }
    }

    #[test]
    fn cqe_round_trip() {
        let c = Cqe {
            wr_id: 1,
            status: 5,
            opcode: 128,
            vendor_err: 2,
            byte_len: 40,
            imm_or_inv: 0xdead,
            qp_num: 0x11,
            src_qp: 0x12,
            wc_flags: 3,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
            src_gid: [7; 16],
        };
        let mut b = [0u8; CQE_SIZE];
        c.encode(&mut b).unwrap();
        assert_eq!(Cqe::decode(&b).unwrap(), c);
    }

    #[test]
    fn slot_sizes() {
        assert_eq!(send_slot_size(1, 0), 128);
        assert_eq!(send_slot_size(4, 220), 320);
        assert_eq!(recv_slot_size(1), 64);
        assert_eq!(recv_slot_size(4), 128);
    }
}
