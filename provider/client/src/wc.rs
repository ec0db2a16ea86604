//! Work completions, as `struct ibv_wc` plus the source GID.

use rxu_abi::proto::abi::Cqe;
use transport::qp::WcStatus;

/// One work completion. The first 48 bytes are laid out as `struct
/// ibv_wc`, except that `imm_data` is the wire word (C's `__be32` is
/// `u32::to_be` of it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wc {
    pub wr_id: u64,
    /// An `ibv_wc_status` (`WcStatus as u32`).
    pub status: u32,
    /// An `ibv_wc_opcode` (`WcOpcode as u32`).
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Immediate data (wire word) with IBV_WC_WITH_IMM, the invalidated
    /// rkey with IBV_WC_WITH_INV.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    /// `ibv_wc_flags` bits.
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    /// UD receives: the sender's GID.
    pub src_gid: [u8; 16],
    /// CQs created with timestamps: when the daemon made the completion, in
    /// ns of the device's clock (CLOCK_MONOTONIC) and of the wall clock
    /// (CLOCK_REALTIME); 0 otherwise.
    pub completion_ts: u64,
    pub completion_wallclock_ns: u64,
}

impl Wc {
    pub fn from_cqe<T: AsRef<[u8]>>(c: &Cqe<T>) -> Wc {
        Wc {
            wr_id: c.wr_id(),
            status: c.status(),
            opcode: c.opcode(),
            vendor_err: c.vendor_err(),
            byte_len: c.byte_len(),
            imm_data: c.imm_data(),
            qp_num: c.qp_num(),
            src_qp: c.src_qp(),
            wc_flags: c.wc_flags(),
            pkey_index: c.pkey_index(),
            slid: c.slid(),
            sl: c.sl(),
            dlid_path_bits: c.dlid_path_bits(),
            src_gid: c.src_gid(),
            completion_ts: c.completion_ts(),
            completion_wallclock_ns: c.completion_wallclock_ns(),
        }
    }

    pub fn is_success(&self) -> bool {
        self.status == WcStatus::Success as u32
    }

    /// The status as an enum (None for a value libibverbs does not define).
    pub fn wc_status(&self) -> Option<WcStatus> {
        WcStatus::from_u32(self.status)
    }

    /// The libibverbs name of the status.
    pub fn status_str(&self) -> &'static str {
        self.wc_status()
            .map(WcStatus::verbs_name)
            .unwrap_or("unknown status")
    }

    /// The invalidated rkey (same field as `imm_data`, as in `ibv_wc`).
    pub fn invalidated_rkey(&self) -> u32 {
        self.imm_data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_named() {
        let wc = Wc {
            status: 10,
            ..Default::default()
        };
        assert_eq!(wc.status_str(), "IBV_WC_REM_ACCESS_ERR");
        assert_eq!(
            Wc {
                status: 99,
                ..Default::default()
            }
            .wc_status(),
            None
        );
    }

    #[test]
    fn ibv_wc_prefix_layout() {
        assert_eq!(std::mem::offset_of!(Wc, status), 8);
        assert_eq!(std::mem::offset_of!(Wc, imm_data), 24);
        assert_eq!(std::mem::offset_of!(Wc, wc_flags), 36);
        assert_eq!(std::mem::offset_of!(Wc, pkey_index), 40);
        assert_eq!(std::mem::offset_of!(Wc, dlid_path_bits), 45);
        assert_eq!(std::mem::offset_of!(Wc, src_gid), 46);
        assert_eq!(std::mem::offset_of!(Wc, completion_ts), 64);
    }
}
