//! The libibverbs vocabulary every rxu crate shares: the work-request
//! opcode table, numbered as `verbs.h` numbers it.

pub mod wr_opcode;

pub use wr_opcode::{wr_flags, QpTypes, WrKind, WrOpcode, WrOpcodeInfo, ALL_WR_OPCODES};
