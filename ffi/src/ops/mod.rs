//! The verbs ops rxu implements, and the table handed to `verbs_set_ops`.
//!
//! # Whose pointers
//! libibverbs reaches an op only through the ops table of the object's
//! context, and only the contexts this provider opened carry [`OPS`]; the
//! `ibv_wr_*` and `ibv_cq_ex` read callbacks are installed only in the QPs
//! and CQs this provider made. So every object pointer an op receives
//! (context, PD, CQ, QP, SRQ, AH, MR, `ibv_qp_ex`, `ibv_cq_ex`) is one of
//! ours, live until its destroy op returns. That is what the `# Safety`
//! sections of the helpers that turn such a pointer back into our object
//! ask ([`crate::context::state::state`], [`crate::objects::pd_of`],
//! [`crate::objects::rxu_cq`], [`crate::objects::rxu_qp`],
//! [`crate::objects::rxu_srq`], [`crate::objects::client_ah`]); a SAFETY
//! line that says "ours (ops: whose pointers)" refers to it.

pub mod ah;
pub mod clock;
pub mod convert;
pub mod cq;
pub mod cq_ex;
pub mod domain;
pub mod events;
pub mod import;
pub mod mr;
pub mod mw;
pub mod odp;
pub mod pd;
pub mod post;
pub mod qp;
pub mod qp_ex;
pub mod query;
pub mod srq;
pub mod unsupported;

use crate::abi::VerbsContextOps;
use crate::context::close;
use unsupported as un;

/// Every slot is set, so no call falls through to libibverbs' silent
/// placeholders.
pub static OPS: VerbsContextOps = VerbsContextOps {
    advise_mr: Some(odp::advise_mr),
    alloc_dm: Some(un::alloc_dm),
    alloc_mw: Some(mw::alloc_mw),
    alloc_null_mr: Some(un::alloc_null_mr),
    alloc_parent_domain: Some(domain::alloc_parent_domain),
    alloc_pd: Some(pd::alloc_pd),
    alloc_td: Some(un::alloc_td),
    async_event: Some(events::async_event),
    attach_counters_point_flow: Some(un::attach_counters_point_flow),
    attach_mcast: Some(qp::attach_mcast),
    bind_mw: Some(mw::bind_mw),
    close_xrcd: Some(un::close_xrcd),
    cq_event: Some(events::cq_event),
    create_ah: Some(ah::create_ah),
    create_counters: Some(un::create_counters),
    create_cq: Some(cq::create_cq),
    create_cq_ex: Some(cq::create_cq_ex),
    create_flow: Some(un::create_flow),
    create_flow_action_esp: Some(un::create_flow_action_esp),
    create_qp: Some(qp::create_qp),
    create_qp_ex: Some(qp::create_qp_ex),
    create_rwq_ind_table: Some(un::create_rwq_ind_table),
    create_srq: Some(srq::create_srq),
    create_srq_ex: Some(srq::create_srq_ex),
    create_wq: Some(un::create_wq),
    dealloc_mw: Some(mw::dealloc_mw),
    dealloc_pd: Some(pd::dealloc_pd),
    dealloc_td: Some(un::dealloc_td),
    dereg_mr: Some(mr::dereg_mr),
    destroy_ah: Some(ah::destroy_ah),
    destroy_counters: Some(un::destroy_counters),
    destroy_cq: Some(cq::destroy_cq),
    destroy_flow: Some(un::destroy_flow),
    destroy_flow_action: Some(un::destroy_flow_action),
    destroy_qp: Some(qp::destroy_qp),
    destroy_rwq_ind_table: Some(un::destroy_rwq_ind_table),
    destroy_srq: Some(srq::destroy_srq),
    destroy_wq: Some(un::destroy_wq),
    detach_mcast: Some(qp::detach_mcast),
    free_context: Some(close::free_context),
    free_dm: Some(un::free_dm),
    get_srq_num: Some(un::get_srq_num),
    import_dm: Some(un::import_dm),
    import_mr: Some(import::import_mr),
    import_pd: Some(import::import_pd),
    modify_cq: Some(un::modify_cq),
    modify_flow_action_esp: Some(un::modify_flow_action_esp),
    modify_qp: Some(qp::modify_qp),
    modify_qp_rate_limit: Some(un::modify_qp_rate_limit),
    modify_srq: Some(srq::modify_srq),
    modify_wq: Some(un::modify_wq),
    open_qp: Some(un::open_qp),
    open_xrcd: Some(un::open_xrcd),
    poll_cq: Some(cq::poll_cq),
    post_recv: Some(post::post_recv),
    post_send: Some(post::post_send),
    post_srq_ops: Some(un::post_srq_ops),
    post_srq_recv: Some(post::post_srq_recv),
    query_device_ex: Some(query::query_device_ex),
    query_ece: Some(un::query_ece),
    query_port: Some(query::query_port),
    query_qp: Some(qp::query_qp),
    query_qp_data_in_order: Some(un::query_qp_data_in_order),
    query_rt_values: Some(clock::query_rt_values),
    query_srq: Some(srq::query_srq),
    read_counters: Some(un::read_counters),
    reg_dm_mr: Some(un::reg_dm_mr),
    reg_dmabuf_mr: Some(un::reg_dmabuf_mr),
    reg_mr: Some(mr::reg_mr),
    req_notify_cq: Some(cq::req_notify_cq),
    rereg_mr: Some(mr::rereg_mr),
    resize_cq: Some(cq::resize_cq),
    set_ece: Some(un::set_ece),
    unimport_dm: Some(un::unimport_dm),
    unimport_mr: Some(import::unimport_mr),
    unimport_pd: Some(import::unimport_pd),
};
