//! The extended CQ and QP (`struct ibv_cq_ex`, `struct ibv_qp_ex`, room
//! for `struct verbs_qp`): a plain object followed by callbacks whose
//! arguments are attribute and work-request structs, so they sit above
//! `objects`, `attrs` and `wr`. Layouts of rdma-core 44; the two that move
//! in other versions sharing the same provider ABI (the
//! `verbs_qp.comp_mask` offset) are handled at run time (`crate::version`).

use std::ffi::{c_int, c_void};

use super::attrs::IbvPollCqAttr;
use super::objects::{IbvAh, IbvCq, IbvMw, IbvMwBindInfo, IbvQp};
use super::wr::{IbvDataBuf, IbvSge};

type CqExFn<R> = Option<unsafe extern "C" fn(*mut IbvCqEx) -> R>;

/// `struct ibv_cq_ex` (288), the same in every rdma-core since 39. Also
/// `struct verbs_cq` (a union of the two CQ structs).
#[repr(C)]
pub struct IbvCqEx {
    pub cq: IbvCq,
    pub comp_mask: u32,
    /// `enum ibv_wc_status` of the current completion.
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut IbvCqEx, *mut IbvPollCqAttr) -> c_int>,
    pub next_poll: CqExFn<c_int>,
    pub end_poll: CqExFn<()>,
    pub read_opcode: CqExFn<c_int>,
    pub read_vendor_err: CqExFn<u32>,
    pub read_byte_len: CqExFn<u32>,
    pub read_imm_data: CqExFn<u32>,
    pub read_qp_num: CqExFn<u32>,
    pub read_src_qp: CqExFn<u32>,
    pub read_wc_flags: CqExFn<u32>,
    pub read_slid: CqExFn<u32>,
    pub read_sl: CqExFn<u8>,
    pub read_dlid_path_bits: CqExFn<u8>,
    pub read_completion_ts: CqExFn<u64>,
    pub read_cvlan: CqExFn<u16>,
    pub read_flow_tag: CqExFn<u32>,
    pub read_tm_info: Option<unsafe extern "C" fn(*mut IbvCqEx, *mut c_void)>,
    pub read_completion_wallclock_ns: CqExFn<u64>,
}

type QpExFn<A> = Option<unsafe extern "C" fn(*mut IbvQpEx, A)>;

/// `struct ibv_qp_ex` as in rdma-core 44 (352; 39..43 end before
/// `wr_atomic_write`, 45+ add `wr_flush` at 352).
#[repr(C)]
pub struct IbvQpEx {
    pub qp_base: IbvQp,
    pub comp_mask: u64,
    pub wr_id: u64,
    /// `ibv_send_flags` for the next builder call.
    pub wr_flags: u32,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u64)>,
    pub wr_bind_mw:
        Option<unsafe extern "C" fn(*mut IbvQpEx, *mut IbvMw, u32, *const IbvMwBindInfo)>,
    pub wr_local_inv: QpExFn<u32>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64)>,
    /// The immediate is `__be32` (network order in memory).
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(*mut IbvQpEx)>,
    pub wr_send_imm: QpExFn<u32>,
    pub wr_send_inv: QpExFn<u32>,
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut IbvQpEx, *mut c_void, u16, u16)>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut IbvQpEx, *mut IbvAh, u32, u32)>,
    pub wr_set_xrc_srqn: QpExFn<u32>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut IbvQpEx, *mut c_void, usize)>,
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut IbvQpEx, usize, *const IbvDataBuf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut IbvQpEx, usize, *const IbvSge)>,
    pub wr_start: Option<unsafe extern "C" fn(*mut IbvQpEx)>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut IbvQpEx) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(*mut IbvQpEx)>,
    /// v44+ only (on 39..43 this offset is `verbs_qp.comp_mask`).
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut IbvQpEx, u32, u64, *const c_void)>,
}

/// `ibv_wr_flush` (v45+, at offset 352 of `ibv_qp_ex`).
pub type WrFlushFn = unsafe extern "C" fn(*mut IbvQpEx, u32, u64, usize, u8, u8);

/// Room for `struct verbs_qp` of any rdma-core 39..56: `ibv_qp_ex` (up to
/// 360 with `wr_flush`), then `comp_mask` (u32) and `xrcd` (pointer) at the
/// offsets the running library uses (344/352/360; `crate::version`).
#[repr(C)]
pub struct VerbsQpArea {
    pub qp_ex: IbvQpEx,
    pub tail: [u64; 4],
}

/// `verbs_qp.comp_mask` bit: `qp_ex` is valid (`ibv_qp_to_qp_ex`).
pub const VERBS_QP_EX: u32 = 2;
