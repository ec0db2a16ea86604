//! `struct verbs_context_ops` (76 slots, 608 bytes, sorted by name; the
//! same in rdma-core 39..58). `verbs_set_ops` copies every non-NULL slot.
//! Object types rxu never creates are `*mut c_void`.

use std::ffi::{c_int, c_void};

use super::attrs::{
    IbvAhAttr, IbvCqInitAttrEx, IbvDeviceAttrEx, IbvGid, IbvParentDomainInitAttr, IbvPortAttr,
    IbvQpAttr, IbvQpInitAttr, IbvQpInitAttrEx, IbvQueryDeviceExInput, IbvSrqAttr, IbvSrqInitAttr,
    IbvSrqInitAttrEx, IbvValuesEx,
};
use super::context::IbvContext;
use super::extended::IbvCqEx;
use super::objects::{
    IbvAh, IbvAsyncEvent, IbvCompChannel, IbvCq, IbvMr, IbvMw, IbvMwBind, IbvPd, IbvQp, IbvSrq,
    VerbsMr,
};
use super::wr::{IbvRecvWr, IbvSendWr, IbvSge, IbvWc};

type V = *mut c_void;
type Ctx = *mut IbvContext;
type F<T> = Option<T>;

#[repr(C)]
pub struct VerbsContextOps {
    pub advise_mr: F<unsafe extern "C" fn(*mut IbvPd, c_int, u32, *mut IbvSge, u32) -> c_int>,
    pub alloc_dm: F<unsafe extern "C" fn(Ctx, V) -> V>,
    pub alloc_mw: F<unsafe extern "C" fn(*mut IbvPd, c_int) -> *mut IbvMw>,
    pub alloc_null_mr: F<unsafe extern "C" fn(*mut IbvPd) -> *mut IbvMr>,
    pub alloc_parent_domain:
        F<unsafe extern "C" fn(Ctx, *mut IbvParentDomainInitAttr) -> *mut IbvPd>,
    pub alloc_pd: F<unsafe extern "C" fn(Ctx) -> *mut IbvPd>,
    pub alloc_td: F<unsafe extern "C" fn(Ctx, V) -> V>,
    pub async_event: F<unsafe extern "C" fn(Ctx, *mut IbvAsyncEvent)>,
    pub attach_counters_point_flow: F<unsafe extern "C" fn(V, V, V) -> c_int>,
    pub attach_mcast: F<unsafe extern "C" fn(*mut IbvQp, *const IbvGid, u16) -> c_int>,
    pub bind_mw: F<unsafe extern "C" fn(*mut IbvQp, *mut IbvMw, *mut IbvMwBind) -> c_int>,
    pub close_xrcd: F<unsafe extern "C" fn(V) -> c_int>,
    pub cq_event: F<unsafe extern "C" fn(*mut IbvCq)>,
    pub create_ah: F<unsafe extern "C" fn(*mut IbvPd, *mut IbvAhAttr) -> *mut IbvAh>,
    pub create_counters: F<unsafe extern "C" fn(Ctx, V) -> V>,
    pub create_cq: F<unsafe extern "C" fn(Ctx, c_int, *mut IbvCompChannel, c_int) -> *mut IbvCq>,
    pub create_cq_ex: F<unsafe extern "C" fn(Ctx, *mut IbvCqInitAttrEx) -> *mut IbvCqEx>,
    pub create_flow: F<unsafe extern "C" fn(*mut IbvQp, V) -> V>,
    pub create_flow_action_esp: F<unsafe extern "C" fn(Ctx, V) -> V>,
    pub create_qp: F<unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp>,
    pub create_qp_ex: F<unsafe extern "C" fn(Ctx, *mut IbvQpInitAttrEx) -> *mut IbvQp>,
    pub create_rwq_ind_table: F<unsafe extern "C" fn(Ctx, V) -> V>,
    pub create_srq: F<unsafe extern "C" fn(*mut IbvPd, *mut IbvSrqInitAttr) -> *mut IbvSrq>,
    pub create_srq_ex: F<unsafe extern "C" fn(Ctx, *mut IbvSrqInitAttrEx) -> *mut IbvSrq>,
    pub create_wq: F<unsafe extern "C" fn(Ctx, V) -> V>,
    pub dealloc_mw: F<unsafe extern "C" fn(*mut IbvMw) -> c_int>,
    pub dealloc_pd: F<unsafe extern "C" fn(*mut IbvPd) -> c_int>,
    pub dealloc_td: F<unsafe extern "C" fn(V) -> c_int>,
    pub dereg_mr: F<unsafe extern "C" fn(*mut VerbsMr) -> c_int>,
    pub destroy_ah: F<unsafe extern "C" fn(*mut IbvAh) -> c_int>,
    pub destroy_counters: F<unsafe extern "C" fn(V) -> c_int>,
    pub destroy_cq: F<unsafe extern "C" fn(*mut IbvCq) -> c_int>,
    pub destroy_flow: F<unsafe extern "C" fn(V) -> c_int>,
    pub destroy_flow_action: F<unsafe extern "C" fn(V) -> c_int>,
    pub destroy_qp: F<unsafe extern "C" fn(*mut IbvQp) -> c_int>,
    pub destroy_rwq_ind_table: F<unsafe extern "C" fn(V) -> c_int>,
    pub destroy_srq: F<unsafe extern "C" fn(*mut IbvSrq) -> c_int>,
    pub destroy_wq: F<unsafe extern "C" fn(V) -> c_int>,
    pub detach_mcast: F<unsafe extern "C" fn(*mut IbvQp, *const IbvGid, u16) -> c_int>,
    pub free_context: F<unsafe extern "C" fn(Ctx)>,
    pub free_dm: F<unsafe extern "C" fn(V) -> c_int>,
    pub get_srq_num: F<unsafe extern "C" fn(*mut IbvSrq, *mut u32) -> c_int>,
    pub import_dm: F<unsafe extern "C" fn(Ctx, u32) -> V>,
    pub import_mr: F<unsafe extern "C" fn(*mut IbvPd, u32) -> *mut IbvMr>,
    pub import_pd: F<unsafe extern "C" fn(Ctx, u32) -> *mut IbvPd>,
    pub modify_cq: F<unsafe extern "C" fn(V, V) -> c_int>,
    pub modify_flow_action_esp: F<unsafe extern "C" fn(V, V) -> c_int>,
    pub modify_qp: F<unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int>,
    pub modify_qp_rate_limit: F<unsafe extern "C" fn(*mut IbvQp, V) -> c_int>,
    pub modify_srq: F<unsafe extern "C" fn(*mut IbvSrq, *mut IbvSrqAttr, c_int) -> c_int>,
    pub modify_wq: F<unsafe extern "C" fn(V, V) -> c_int>,
    pub open_qp: F<unsafe extern "C" fn(Ctx, V) -> V>,
    pub open_xrcd: F<unsafe extern "C" fn(Ctx, V) -> V>,
    pub poll_cq: F<unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int>,
    pub post_recv:
        F<unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int>,
    pub post_send:
        F<unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int>,
    pub post_srq_ops: F<unsafe extern "C" fn(*mut IbvSrq, V, *mut V) -> c_int>,
    pub post_srq_recv:
        F<unsafe extern "C" fn(*mut IbvSrq, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int>,
    pub query_device_ex: F<
        unsafe extern "C" fn(
            Ctx,
            *const IbvQueryDeviceExInput,
            *mut IbvDeviceAttrEx,
            usize,
        ) -> c_int,
    >,
    pub query_ece: F<unsafe extern "C" fn(*mut IbvQp, V) -> c_int>,
    pub query_port: F<unsafe extern "C" fn(Ctx, u8, *mut IbvPortAttr) -> c_int>,
    pub query_qp:
        F<unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int, *mut IbvQpInitAttr) -> c_int>,
    pub query_qp_data_in_order: F<unsafe extern "C" fn(*mut IbvQp, c_int, u32) -> c_int>,
    pub query_rt_values: F<unsafe extern "C" fn(Ctx, *mut IbvValuesEx) -> c_int>,
    pub query_srq: F<unsafe extern "C" fn(*mut IbvSrq, *mut IbvSrqAttr) -> c_int>,
    pub read_counters: F<unsafe extern "C" fn(V, *mut u64, u32, u32) -> c_int>,
    pub reg_dm_mr: F<unsafe extern "C" fn(*mut IbvPd, V, u64, usize, u32) -> V>,
    pub reg_dmabuf_mr: F<unsafe extern "C" fn(*mut IbvPd, u64, usize, u64, c_int, c_int) -> V>,
    pub reg_mr: F<unsafe extern "C" fn(*mut IbvPd, V, usize, u64, c_int) -> *mut IbvMr>,
    pub req_notify_cq: F<unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int>,
    pub rereg_mr:
        F<unsafe extern "C" fn(*mut VerbsMr, c_int, *mut IbvPd, V, usize, c_int) -> c_int>,
    pub resize_cq: F<unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int>,
    pub set_ece: F<unsafe extern "C" fn(*mut IbvQp, V) -> c_int>,
    pub unimport_dm: F<unsafe extern "C" fn(V)>,
    pub unimport_mr: F<unsafe extern "C" fn(*mut IbvMr)>,
    pub unimport_pd: F<unsafe extern "C" fn(*mut IbvPd)>,
}
