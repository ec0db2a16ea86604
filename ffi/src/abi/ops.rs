//! `struct verbs_context_ops` as in rdma-core 36..58 (76 slots, 608 bytes,
//! sorted by name): the provider's own table, by name. The table handed to
//! `verbs_set_ops` is built from it for the running release
//! (`crate::version::layouts`), which may lack some of these members or
//! have more. `verbs_set_ops` copies every non-NULL slot. Object types rxu
//! never creates are `*mut c_void`.

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

/// Declares the struct and [`VerbsContextOps::slots`] from one member list.
macro_rules! ops_table {
    ($($name:ident : $ty:ty,)*) => {
        #[repr(C)]
        pub struct VerbsContextOps {
            $(pub $name: $ty,)*
        }

        impl VerbsContextOps {
            /// Every member's C name and address (0 for NULL), in order.
            pub fn slots(&self) -> Vec<(&'static str, usize)> {
                vec![$((stringify!($name), self.$name.map_or(0, |f| f as usize)),)*]
            }
        }
    };
}

ops_table! {
    advise_mr: F<unsafe extern "C" fn(*mut IbvPd, c_int, u32, *mut IbvSge, u32) -> c_int>,
    alloc_dm: F<unsafe extern "C" fn(Ctx, V) -> V>,
    alloc_mw: F<unsafe extern "C" fn(*mut IbvPd, c_int) -> *mut IbvMw>,
    alloc_null_mr: F<unsafe extern "C" fn(*mut IbvPd) -> *mut IbvMr>,
    alloc_parent_domain:
        F<unsafe extern "C" fn(Ctx, *mut IbvParentDomainInitAttr) -> *mut IbvPd>,
    alloc_pd: F<unsafe extern "C" fn(Ctx) -> *mut IbvPd>,
    alloc_td: F<unsafe extern "C" fn(Ctx, V) -> V>,
    async_event: F<unsafe extern "C" fn(Ctx, *mut IbvAsyncEvent)>,
    attach_counters_point_flow: F<unsafe extern "C" fn(V, V, V) -> c_int>,
    attach_mcast: F<unsafe extern "C" fn(*mut IbvQp, *const IbvGid, u16) -> c_int>,
    bind_mw: F<unsafe extern "C" fn(*mut IbvQp, *mut IbvMw, *mut IbvMwBind) -> c_int>,
    close_xrcd: F<unsafe extern "C" fn(V) -> c_int>,
    cq_event: F<unsafe extern "C" fn(*mut IbvCq)>,
    create_ah: F<unsafe extern "C" fn(*mut IbvPd, *mut IbvAhAttr) -> *mut IbvAh>,
    create_counters: F<unsafe extern "C" fn(Ctx, V) -> V>,
    create_cq: F<unsafe extern "C" fn(Ctx, c_int, *mut IbvCompChannel, c_int) -> *mut IbvCq>,
    create_cq_ex: F<unsafe extern "C" fn(Ctx, *mut IbvCqInitAttrEx) -> *mut IbvCqEx>,
    create_flow: F<unsafe extern "C" fn(*mut IbvQp, V) -> V>,
    create_flow_action_esp: F<unsafe extern "C" fn(Ctx, V) -> V>,
    create_qp: F<unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp>,
    create_qp_ex: F<unsafe extern "C" fn(Ctx, *mut IbvQpInitAttrEx) -> *mut IbvQp>,
    create_rwq_ind_table: F<unsafe extern "C" fn(Ctx, V) -> V>,
    create_srq: F<unsafe extern "C" fn(*mut IbvPd, *mut IbvSrqInitAttr) -> *mut IbvSrq>,
    create_srq_ex: F<unsafe extern "C" fn(Ctx, *mut IbvSrqInitAttrEx) -> *mut IbvSrq>,
    create_wq: F<unsafe extern "C" fn(Ctx, V) -> V>,
    dealloc_mw: F<unsafe extern "C" fn(*mut IbvMw) -> c_int>,
    dealloc_pd: F<unsafe extern "C" fn(*mut IbvPd) -> c_int>,
    dealloc_td: F<unsafe extern "C" fn(V) -> c_int>,
    dereg_mr: F<unsafe extern "C" fn(*mut VerbsMr) -> c_int>,
    destroy_ah: F<unsafe extern "C" fn(*mut IbvAh) -> c_int>,
    destroy_counters: F<unsafe extern "C" fn(V) -> c_int>,
    destroy_cq: F<unsafe extern "C" fn(*mut IbvCq) -> c_int>,
    destroy_flow: F<unsafe extern "C" fn(V) -> c_int>,
    destroy_flow_action: F<unsafe extern "C" fn(V) -> c_int>,
    destroy_qp: F<unsafe extern "C" fn(*mut IbvQp) -> c_int>,
    destroy_rwq_ind_table: F<unsafe extern "C" fn(V) -> c_int>,
    destroy_srq: F<unsafe extern "C" fn(*mut IbvSrq) -> c_int>,
    destroy_wq: F<unsafe extern "C" fn(V) -> c_int>,
    detach_mcast: F<unsafe extern "C" fn(*mut IbvQp, *const IbvGid, u16) -> c_int>,
    free_context: F<unsafe extern "C" fn(Ctx)>,
    free_dm: F<unsafe extern "C" fn(V) -> c_int>,
    get_srq_num: F<unsafe extern "C" fn(*mut IbvSrq, *mut u32) -> c_int>,
    import_dm: F<unsafe extern "C" fn(Ctx, u32) -> V>,
    import_mr: F<unsafe extern "C" fn(*mut IbvPd, u32) -> *mut IbvMr>,
    import_pd: F<unsafe extern "C" fn(Ctx, u32) -> *mut IbvPd>,
    modify_cq: F<unsafe extern "C" fn(V, V) -> c_int>,
    modify_flow_action_esp: F<unsafe extern "C" fn(V, V) -> c_int>,
    modify_qp: F<unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int>,
    modify_qp_rate_limit: F<unsafe extern "C" fn(*mut IbvQp, V) -> c_int>,
    modify_srq: F<unsafe extern "C" fn(*mut IbvSrq, *mut IbvSrqAttr, c_int) -> c_int>,
    modify_wq: F<unsafe extern "C" fn(V, V) -> c_int>,
    open_qp: F<unsafe extern "C" fn(Ctx, V) -> V>,
    open_xrcd: F<unsafe extern "C" fn(Ctx, V) -> V>,
    poll_cq: F<unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int>,
    post_recv:
        F<unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int>,
    post_send:
        F<unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int>,
    post_srq_ops: F<unsafe extern "C" fn(*mut IbvSrq, V, *mut V) -> c_int>,
    post_srq_recv:
        F<unsafe extern "C" fn(*mut IbvSrq, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int>,
    query_device_ex: F<
        unsafe extern "C" fn(
            Ctx,
            *const IbvQueryDeviceExInput,
            *mut IbvDeviceAttrEx,
            usize,
        ) -> c_int,
    >,
    query_ece: F<unsafe extern "C" fn(*mut IbvQp, V) -> c_int>,
    query_port: F<unsafe extern "C" fn(Ctx, u8, *mut IbvPortAttr) -> c_int>,
    query_qp:
        F<unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int, *mut IbvQpInitAttr) -> c_int>,
    query_qp_data_in_order: F<unsafe extern "C" fn(*mut IbvQp, c_int, u32) -> c_int>,
    query_rt_values: F<unsafe extern "C" fn(Ctx, *mut IbvValuesEx) -> c_int>,
    query_srq: F<unsafe extern "C" fn(*mut IbvSrq, *mut IbvSrqAttr) -> c_int>,
    read_counters: F<unsafe extern "C" fn(V, *mut u64, u32, u32) -> c_int>,
    reg_dm_mr: F<unsafe extern "C" fn(*mut IbvPd, V, u64, usize, u32) -> V>,
    reg_dmabuf_mr: F<unsafe extern "C" fn(*mut IbvPd, u64, usize, u64, c_int, c_int) -> V>,
    reg_mr: F<unsafe extern "C" fn(*mut IbvPd, V, usize, u64, c_int) -> *mut IbvMr>,
    req_notify_cq: F<unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int>,
    rereg_mr:
        F<unsafe extern "C" fn(*mut VerbsMr, c_int, *mut IbvPd, V, usize, c_int) -> c_int>,
    resize_cq: F<unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int>,
    set_ece: F<unsafe extern "C" fn(*mut IbvQp, V) -> c_int>,
    unimport_dm: F<unsafe extern "C" fn(V)>,
    unimport_mr: F<unsafe extern "C" fn(*mut IbvMr)>,
    unimport_pd: F<unsafe extern "C" fn(*mut IbvPd)>,
}
