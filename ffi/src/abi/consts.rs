//! Enum values and flag bits of `verbs.h` the provider uses that the
//! shared vocabulary (`transport::verbs`) does not hold: those of the
//! extended verbs and device queries, which only the C ABI needs.

/// `enum ibv_qp_init_attr_mask`.
pub mod qp_init_attr_mask {
    pub const PD: u32 = 1;
    pub const XRCD: u32 = 1 << 1;
    pub const CREATE_FLAGS: u32 = 1 << 2;
    pub const SEND_OPS_FLAGS: u32 = 1 << 6;
}

/// `enum ibv_qp_create_send_ops_flags`.
pub mod send_ops {
    pub const RDMA_WRITE: u64 = 1;
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    pub const SEND: u64 = 1 << 2;
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    pub const RDMA_READ: u64 = 1 << 4;
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    pub const LOCAL_INV: u64 = 1 << 7;
    pub const BIND_MW: u64 = 1 << 8;
    pub const SEND_WITH_INV: u64 = 1 << 9;
    pub const ATOMIC_WRITE: u64 = 1 << 12;
}

/// `enum ibv_cq_init_attr_mask` and `enum ibv_create_cq_attr_flags` (the
/// one flag rxu takes; IGNORE_OVERRUN, 1 << 1, is refused).
pub mod cq_init {
    pub const MASK_FLAGS: u32 = 1;
    /// `parent_domain` is set.
    pub const MASK_PD: u32 = 1 << 1;
    pub const FLAG_SINGLE_THREADED: u32 = 1;
}

/// `enum ibv_create_cq_wc_flags`.
pub mod wc_ex {
    pub const BYTE_LEN: u64 = 1;
    pub const IMM: u64 = 1 << 1;
    pub const QP_NUM: u64 = 1 << 2;
    pub const SRC_QP: u64 = 1 << 3;
    pub const SLID: u64 = 1 << 4;
    pub const SL: u64 = 1 << 5;
    pub const DLID_PATH_BITS: u64 = 1 << 6;
    pub const COMPLETION_TIMESTAMP: u64 = 1 << 7;
    pub const COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
    /// Either timestamp: the CQ's entries carry both.
    pub const TIMESTAMPS: u64 = COMPLETION_TIMESTAMP | COMPLETION_TIMESTAMP_WALLCLOCK;
    /// What rxu fills in (no VLANs, flow tags, tag matching).
    pub const SUPPORTED: u64 =
        BYTE_LEN | IMM | QP_NUM | SRC_QP | SLID | SL | DLID_PATH_BITS | TIMESTAMPS;
}

/// `enum ibv_parent_domain_init_attr_mask`, `IBV_ALLOCATOR_USE_DEFAULT`.
pub mod parent_domain {
    pub const ALLOCATORS: u32 = 1;
    pub const PD_CONTEXT: u32 = 1 << 1;
    /// `(void *)-1`: "allocate it the default way".
    pub const USE_DEFAULT: usize = usize::MAX;
}

/// `enum ibv_values_mask`.
pub mod values {
    pub const RAW_CLOCK: u32 = 1;
}

/// `enum ibv_srq_init_attr_mask` and `enum ibv_srq_type`.
pub mod srq_init {
    pub const TYPE: u32 = 1;
    pub const PD: u32 = 1 << 1;
    pub const XRCD: u32 = 1 << 2;
    pub const CQ: u32 = 1 << 3;
    pub const TYPE_BASIC: i32 = 0;
    pub const TYPE_XRC: i32 = 1;
}

/// `enum ibv_qp_open_attr_mask`.
pub mod qp_open_attr {
    pub const NUM: u32 = 1;
    pub const XRCD: u32 = 1 << 1;
    pub const CONTEXT: u32 = 1 << 2;
    pub const TYPE: u32 = 1 << 3;
}

/// `enum ibv_xrcd_init_attr_mask`.
pub mod xrcd_init {
    pub const FD: u32 = 1;
    pub const OFLAGS: u32 = 1 << 1;
}

/// `enum ibv_odp_general_caps` and `enum ibv_odp_transport_cap_bits`.
pub mod odp {
    pub const SUPPORT: u64 = 1;
    pub const SUPPORT_IMPLICIT: u64 = 1 << 1;
    pub const SEND: u32 = 1;
    pub const RECV: u32 = 1 << 1;
    pub const WRITE: u32 = 1 << 2;
    pub const READ: u32 = 1 << 3;
    pub const ATOMIC: u32 = 1 << 4;
    pub const SRQ_RECV: u32 = 1 << 5;
}

/// `enum ibv_port_state`, `enum ibv_port_cap_flags`/link layer, port flags.
pub mod port {
    pub const LINK_LAYER_ETHERNET: u8 = 2;
    /// `IBV_QPF_GRH_REQUIRED`: RoCE addresses need a GRH.
    pub const FLAG_GRH_REQUIRED: u8 = 1;
}

/// `enum ibv_rereg_mr_flags`.
pub mod rereg {
    pub const CHANGE_TRANSLATION: u32 = 1;
    pub const CHANGE_PD: u32 = 1 << 1;
    pub const CHANGE_ACCESS: u32 = 1 << 2;
    pub const ALL: u32 = CHANGE_TRANSLATION | CHANGE_PD | CHANGE_ACCESS;
}
