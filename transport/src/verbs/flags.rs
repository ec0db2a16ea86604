//! Flag words of `verbs.h`: one module per C enum, values as libibverbs
//! numbers them.

/// Memory access flags, `enum ibv_access_flags`.
pub mod access {
    pub const LOCAL_WRITE: u32 = 1;
    pub const REMOTE_WRITE: u32 = 1 << 1;
    pub const REMOTE_READ: u32 = 1 << 2;
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    pub const MW_BIND: u32 = 1 << 4;
    pub const ZERO_BASED: u32 = 1 << 5;
    pub const ON_DEMAND: u32 = 1 << 6;
    pub const HUGETLB: u32 = 1 << 7;
    pub const FLUSH_GLOBAL: u32 = 1 << 8;
    pub const FLUSH_PERSISTENT: u32 = 1 << 9;
    /// `IBV_ACCESS_OPTIONAL_RANGE`: hints a device may ignore (relaxed
    /// ordering and the like).
    pub const OPTIONAL_RANGE: u32 = 0x3ff0_0000;
}

/// Send work request flags, `enum ibv_send_flags`.
pub mod send_flags {
    pub const FENCE: u32 = 1;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
    /// Checksum offload, for raw packet QPs.
    pub const IP_CSUM: u32 = 1 << 4;
}

/// Completion flags, `enum ibv_wc_flags`.
pub mod wc_flags {
    pub const GRH: u32 = 1;
    pub const WITH_IMM: u32 = 1 << 1;
    pub const IP_CSUM_OK: u32 = 1 << 2;
    pub const WITH_INV: u32 = 1 << 3;
}

/// `enum ibv_qp_attr_mask`: which fields of a `struct ibv_qp_attr` apply.
pub mod qp_attr_mask {
    pub const STATE: u32 = 1;
    pub const CUR_STATE: u32 = 1 << 1;
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const ALT_PATH: u32 = 1 << 14;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    pub const CAP: u32 = 1 << 19;
    pub const DEST_QPN: u32 = 1 << 20;
}

/// `enum ibv_srq_attr_mask`: which fields of a `struct ibv_srq_attr` apply.
pub mod srq_attr_mask {
    pub const MAX_WR: u32 = 1;
    pub const LIMIT: u32 = 1 << 1;
}
