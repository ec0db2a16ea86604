//! Verbs objects the provider allocates and the library or application
//! reads: PD, MR, CQ, SRQ, QP, AH, completion channel, async event
//! (layouts of rdma-core 44). Attribute structs and work requests point at
//! these; the extended CQ and QP, whose callbacks take attribute and WR
//! structs, are in `extended.rs`.

use std::ffi::{c_int, c_void};

use super::context::IbvContext;

/// `struct ibv_pd` (16).
#[repr(C)]
pub struct IbvPd {
    pub context: *mut IbvContext,
    pub handle: u32,
}

/// `struct ibv_mr` (48).
#[repr(C)]
pub struct IbvMr {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw` (32).
#[repr(C)]
pub struct IbvMw {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub mw_type: c_int,
}

/// `struct ibv_mw_bind_info` (32).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvMwBindInfo {
    pub mr: *mut IbvMr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: u32,
}

/// `struct ibv_mw_bind` (48): `ibv_bind_mw`'s argument.
#[repr(C)]
pub struct IbvMwBind {
    pub wr_id: u64,
    pub send_flags: u32,
    pub bind_info: IbvMwBindInfo,
}

/// `struct verbs_mr` (56): every MR must be one (`ibv_dereg_mr` reads it).
#[repr(C)]
pub struct VerbsMr {
    pub ibv_mr: IbvMr,
    /// `enum ibv_mr_type`: 0 = IBV_MR_TYPE_MR.
    pub mr_type: c_int,
    pub access: c_int,
}

/// `struct ibv_comp_channel` (16).
#[repr(C)]
pub struct IbvCompChannel {
    pub context: *mut IbvContext,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq` (128).
#[repr(C)]
pub struct IbvCq {
    pub context: *mut IbvContext,
    pub channel: *mut IbvCompChannel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_srq` (128).
#[repr(C)]
pub struct IbvSrq {
    pub context: *mut IbvContext,
    pub srq_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub handle: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct verbs_srq` (160): every SRQ must be one.
#[repr(C)]
pub struct VerbsSrq {
    pub srq: IbvSrq,
    /// `enum ibv_srq_type`: 0 = basic.
    pub srq_type: c_int,
    pub xrcd: *mut c_void,
    pub cq: *mut IbvCq,
    pub srq_num: u32,
}

/// `struct ibv_qp` (160).
#[repr(C)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub handle: u32,
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: c_int,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_ah` (24).
#[repr(C)]
pub struct IbvAh {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub handle: u32,
}

/// `struct ibv_async_event` (16).
#[repr(C)]
pub struct IbvAsyncEvent {
    /// Union of the cq/qp/srq/wq pointer and `int port_num`.
    pub element: usize,
    /// `enum ibv_event_type`.
    pub event_type: c_int,
}
