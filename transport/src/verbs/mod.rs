//! The libibverbs vocabulary every rxu crate shares, at the bottom of the
//! dependency graph: flag words, event types, the QP type and state, path
//! MTU, SGE, completion status and opcode, and the work-request opcode
//! table. Values are `verbs.h`'s; the C layouts of the structs that carry
//! them stay in the ffi crate.

pub mod event_type;
mod flags;
mod network_hdr;
mod types;
pub mod wr_opcode;

pub use flags::{access, qp_attr_mask, send_flags, srq_attr_mask, wc_flags};
pub use network_hdr::NetworkHdr;
pub use types::{Mtu, QpState, QpType, Sge, WcOpcode, WcStatus};
pub use wr_opcode::{wr_flags, QpTypes, WrKind, WrOpcode, WrOpcodeInfo, ALL_WR_OPCODES};

/// The uverbs ABI version an rxu device reports in sysfs
/// (`class/infiniband_verbs/uverbsN/abi_version`) and the provider
/// matches on.
pub const UVERBS_ABI_VERSION: u32 = 1;

/// GID table entries a port reports (`ibv_port_attr.gid_tbl_len`), and the
/// least the sysfs tree of a device holds.
pub const GID_TBL_LEN: u32 = 16;
