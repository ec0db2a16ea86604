//! The limits rxu reports in `ibv_query_device` / `ibv_query_port` and the
//! daemon enforces: one set of numbers for both, so a program that sizes
//! itself by the device attributes is never refused.
//!
//! Where rxe has a figure and it fits the daemon's design, rxe's figure is
//! used (programs tested on rxe then size themselves the same way); where
//! the daemon's memory model differs, the number is smaller and the reason
//! given.

use transport::qp::MAX_MSG_SIZE;

/// QPs per device. Each QP has two ring memfds mapped in the daemon, so
/// this bounds the daemon's mappings (and descriptors, if it keeps them:
/// then RLIMIT_NOFILE must be raised to match).
pub const MAX_QP: u32 = 16 * 1024;
/// Work requests per send or receive queue (ring slots). perftest's
/// deepest default (tx depth 128, rx depth 512) and its `-t 8192` fit; a
/// full SQ of maximal slots stays at 10 MiB.
pub const MAX_QP_WR: u32 = 16 * 1024;
/// Scatter/gather entries per send or receive WR (rxe: 32).
pub const MAX_SGE: u32 = 32;
/// SGEs per READ response scatter list (rxe: 32).
pub const MAX_SGE_RD: u32 = 32;
/// Inline bytes per send WR (rxe: 32 SGEs' worth, 512).
pub const MAX_INLINE_DATA: u32 = 512;
/// CQs per device (one ring memfd each).
pub const MAX_CQ: u32 = 16 * 1024;
/// Entries per CQ: 2^16 - 1 (64-byte CQEs, a 4 MiB ring).
pub const MAX_CQE: u32 = (1 << 16) - 1;
/// Memory regions per device (keys are random 32-bit values, so the
/// table's fill stays far below where a key draw collides often).
pub const MAX_MR: u32 = 1 << 20;
/// Memory windows per device: rxe's figure (its window index range).
/// Window keys have 24 random index bits, so this keeps index draws
/// mostly free too.
pub const MAX_MW: u32 = 0x1_ffff;
/// Largest region: any range the client's address space can hold (as rxe).
pub const MAX_MR_SIZE: u64 = u64::MAX;
/// Page sizes regions may use (rxe's figure: 4 KiB and up).
pub const PAGE_SIZE_CAP: u64 = 0xffff_f000;
/// Protection domains per device (PD numbers are device-unique).
pub const MAX_PD: u32 = 64 * 1024;
/// Outstanding RDMA READ / atomic requests a QP accepts as responder
/// (max_dest_rd_atomic) and issues as requester (max_rd_atomic): rxe's 128.
pub const MAX_QP_RD_ATOM: u8 = 128;
pub const MAX_QP_INIT_RD_ATOM: u8 = 128;
/// Responder resources of the device: every QP may use all of its own.
pub const MAX_RES_RD_ATOM: u32 = MAX_QP * MAX_QP_RD_ATOM as u32;
/// Address handles live in the client library (no daemon object); it
/// enforces rxe's figure.
pub const MAX_AH: u32 = (1 << 15) - 1;
/// Shared receive queues per device, their depth and SGEs.
pub const MAX_SRQ: u32 = 16 * 1024;
pub const MAX_SRQ_WR: u32 = 16 * 1024;
pub const MAX_SRQ_SGE: u32 = 32;
/// One P_Key (the default, 0xffff) at index 0, as RoCE uses.
pub const MAX_PKEYS: u16 = 1;
/// 4.096 us * 2^15 ≈ 134 ms, rxe's value.
pub const LOCAL_CA_ACK_DELAY: u8 = 15;
/// Largest message: what the transport accepts (2^30), so a READ at MTU
/// 256 stays well inside the PSN window. perftest `-a` goes to 8 MiB.
pub const MAX_MSG_SZ: u32 = MAX_MSG_SIZE as u32;
/// Largest path MTU (`IBV_MTU_4096`); the active one follows the netdev.
pub const MAX_MTU: u8 = 5;
/// The only port.
pub const PORT_NUM: u8 = 1;
/// Number of GID entries, the same as the device node writes.
pub use transport::verbs::GID_TBL_LEN;
/// `IBV_PORT_CM_SUP`, what rxe reports (and the device node writes).
pub const PORT_CAP_FLAGS: u32 = 1 << 16;

/// `enum ibv_atomic_cap`: IBV_ATOMIC_HCA — atomics are atomic with respect
/// to other atomics through this device (the daemon runs them one at a
/// time on a single thread), not with respect to the CPU.
pub const ATOMIC_HCA: u32 = 1;
