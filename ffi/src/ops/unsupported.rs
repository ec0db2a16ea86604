//! Verbs rxu does not offer: each says so in the log (once per process)
//! and fails with EOPNOTSUPP, the code libibverbs' own placeholders use.
//! One is a real answer rather than a refusal: `query_qp_data_in_order`
//! (0: no in-order guarantee promised).

use std::ffi::{c_int, c_void};

use crate::abi::{IbvContext, IbvMr, IbvPd, IbvQp, IbvSrq};
use crate::guard::set_errno;
use crate::log::unsupported;

type V = *mut c_void;
type Ctx = *mut IbvContext;

/// Defines stubs: `int` ones return EOPNOTSUPP, pointer ones NULL with
/// errno EOPNOTSUPP, void ones just log.
macro_rules! stubs {
    ($( $kind:ident $name:ident ( $($t:ty),* ) ; )*) => { $(
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name($(_: $t),*) -> stubs!(@ret $kind) {
            unsupported(stringify!($name));
            stubs!(@val $kind)
        }
    )* };
    (@ret int) => { c_int };
    (@ret ptr) => { V };
    (@ret void) => { () };
    (@val int) => { libc::EOPNOTSUPP };
    (@val ptr) => {{ set_errno(libc::EOPNOTSUPP); std::ptr::null_mut() }};
    (@val void) => { () };
}

stubs! {
    ptr alloc_dm(Ctx, V);
    ptr alloc_td(Ctx, V);
    int attach_counters_point_flow(V, V, V);
    int close_xrcd(V);
    ptr create_counters(Ctx, V);
    ptr create_flow(*mut IbvQp, V);
    ptr create_flow_action_esp(Ctx, V);
    ptr create_rwq_ind_table(Ctx, V);
    ptr create_wq(Ctx, V);
    int dealloc_td(V);
    int destroy_counters(V);
    int destroy_flow(V);
    int destroy_flow_action(V);
    int destroy_rwq_ind_table(V);
    int destroy_wq(V);
    int free_dm(V);
    int get_srq_num(*mut IbvSrq, *mut u32);
    ptr import_dm(Ctx, u32);
    int modify_cq(V, V);
    int modify_flow_action_esp(V, V);
    int modify_qp_rate_limit(*mut IbvQp, V);
    int modify_wq(V, V);
    ptr open_qp(Ctx, V);
    ptr open_xrcd(Ctx, V);
    int query_ece(*mut IbvQp, V);
    int read_counters(V, *mut u64, u32, u32);
    ptr reg_dm_mr(*mut IbvPd, V, u64, usize, u32);
    ptr reg_dmabuf_mr(*mut IbvPd, u64, usize, u64, c_int, c_int);
    int set_ece(*mut IbvQp, V);
    void unimport_dm(V);
}

pub unsafe extern "C" fn alloc_null_mr(_pd: *mut IbvPd) -> *mut IbvMr {
    unsupported("alloc_null_mr");
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_post_srq_ops` (tag matching): the first op is the bad one.
pub unsafe extern "C" fn post_srq_ops(_srq: *mut IbvSrq, op: V, bad: *mut V) -> c_int {
    unsupported("post_srq_ops");
    if !bad.is_null() {
        // SAFETY: the caller's out-parameter.
        unsafe { *bad = op };
    }
    libc::EOPNOTSUPP
}

pub unsafe extern "C" fn query_qp_data_in_order(_qp: *mut IbvQp, _op: c_int, _flags: u32) -> c_int {
    0
}
