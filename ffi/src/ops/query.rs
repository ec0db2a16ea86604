//! Device and port queries, answered by rxud.

use std::ffi::{c_char, c_int};
use std::mem::size_of;

use crate::abi::consts::{odp, port};
use crate::abi::{IbvContext, IbvDeviceAttr, IbvDeviceAttrEx, IbvPortAttr, IbvQueryDeviceExInput};
use crate::context::state::state;
use crate::guard::{self, client_err};

fn clamp(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// Copies `src` into a C `char[N]`, NUL-terminated, truncated if needed.
fn c_string<const N: usize>(dst: &mut [c_char; N], src: &str) {
    for (d, s) in dst.iter_mut().zip(src.bytes().take(N - 1)) {
        *d = s as c_char;
    }
}

/// Serves `ibv_query_device` (attr_size 232) and `ibv_query_device_ex`
/// (the application's size): never writes past `attr_size`.
pub unsafe extern "C" fn query_device_ex(
    ctx: *mut IbvContext,
    input: *const IbvQueryDeviceExInput,
    attr: *mut IbvDeviceAttrEx,
    attr_size: usize,
) -> c_int {
    guard::int_op("query_device_ex", || {
        // SAFETY: input is NULL or the caller's.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return Err(libc::EINVAL);
        }
        if attr_size < size_of::<IbvDeviceAttr>() {
            return Err(libc::EINVAL);
        }
        // SAFETY: ctx is ours (ops: whose pointers).
        let st = unsafe { state(ctx)? };
        let d = st
            .client
            .query_device()
            .map_err(client_err("query_device"))?;
        // SAFETY: plain data; all-zero is valid.
        let mut a: IbvDeviceAttrEx = unsafe { std::mem::zeroed() };
        let o = &mut a.orig_attr;
        c_string(&mut o.fw_ver, &d.fw_ver);
        o.node_guid = d.node_guid.to_be();
        o.sys_image_guid = d.sys_image_guid.to_be();
        o.max_mr_size = d.max_mr_size;
        o.page_size_cap = d.page_size_cap;
        o.vendor_id = d.vendor_id;
        o.vendor_part_id = d.vendor_part_id;
        o.hw_ver = d.hw_ver;
        o.max_qp = clamp(d.max_qp);
        o.max_qp_wr = clamp(d.max_qp_wr);
        o.device_cap_flags = d.device_cap_flags;
        o.max_sge = clamp(d.max_sge);
        o.max_sge_rd = clamp(d.max_sge_rd);
        o.max_cq = clamp(d.max_cq);
        o.max_cqe = clamp(d.max_cqe);
        o.max_mr = clamp(d.max_mr);
        o.max_mw = clamp(d.max_mw);
        o.max_pd = clamp(d.max_pd);
        o.max_qp_rd_atom = clamp(d.max_qp_rd_atom);
        o.max_ee_rd_atom = clamp(d.max_ee_rd_atom);
        o.max_res_rd_atom = clamp(d.max_res_rd_atom);
        o.max_qp_init_rd_atom = clamp(d.max_qp_init_rd_atom);
        o.atomic_cap = clamp(d.atomic_cap);
        o.max_ah = clamp(d.max_ah);
        // The transport's multicast limits (a socket per group in rxud).
        let (groups, per_group) = (
            transport::engine::mcast::MAX_GROUPS,
            transport::engine::mcast::MAX_GROUP_QPS,
        );
        o.max_mcast_grp = groups as c_int;
        o.max_mcast_qp_attach = per_group as c_int;
        o.max_total_mcast_qp_attach = (groups * per_group) as c_int;
        o.max_srq = clamp(d.max_srq);
        o.max_srq_wr = clamp(d.max_srq_wr);
        o.max_srq_sge = clamp(d.max_srq_sge);
        o.max_pkeys = d.max_pkeys;
        o.local_ca_ack_delay = d.local_ca_ack_delay;
        o.phys_port_cnt = d.phys_port_cnt;
        // Memory is reached on demand, never pinned (ops::odp), the whole
        // address space too (implicit ODP).
        a.odp_caps.general_caps = odp::SUPPORT | odp::SUPPORT_IMPLICIT;
        let all = odp::SEND | odp::RECV | odp::WRITE | odp::READ | odp::ATOMIC | odp::SRQ_RECV;
        a.odp_caps.rc_odp_caps = all;
        a.odp_caps.uc_odp_caps = odp::SEND | odp::RECV | odp::WRITE | odp::SRQ_RECV;
        a.odp_caps.ud_odp_caps = odp::SEND | odp::RECV | odp::SRQ_RECV;
        // Completion timestamps: 64-bit ns of the HCA clock (rxu_abi::clock).
        a.completion_timestamp_mask = u64::MAX;
        a.hca_core_clock = rxu_abi::clock::HCA_CLOCK_KHZ;
        a.device_cap_flags_ex = u64::from(d.device_cap_flags);
        a.phys_port_cnt_ex = u32::from(d.phys_port_cnt);
        let n = attr_size.min(size_of::<IbvDeviceAttrEx>());
        // SAFETY: the caller's buffer holds attr_size bytes; we write n.
        unsafe { std::ptr::copy_nonoverlapping((&raw const a).cast::<u8>(), attr.cast::<u8>(), n) };
        Ok(())
    })
}

/// Writes the library's `sizeof(struct ibv_port_attr)` bytes, no more
/// (52 before rdma-core 49, 56 from it; the buffer may be the app's own).
pub unsafe extern "C" fn query_port(
    ctx: *mut IbvContext,
    port_num: u8,
    attr: *mut IbvPortAttr,
) -> c_int {
    guard::int_op("query_port", || {
        if port_num != 1 {
            return Err(libc::EINVAL);
        }
        // SAFETY: ctx is ours (ops: whose pointers).
        let st = unsafe { state(ctx)? };
        let p = st
            .client
            .query_port(port_num)
            .map_err(client_err("query_port"))?;
        let a = IbvPortAttr {
            state: p.state.into(),
            max_mtu: p.max_mtu.into(),
            active_mtu: p.active_mtu.into(),
            gid_tbl_len: clamp(p.gid_tbl_len),
            port_cap_flags: p.port_cap_flags,
            max_msg_sz: p.max_msg_sz,
            pkey_tbl_len: p.pkey_tbl_len,
            // One data VL, as rxe.
            max_vl_num: 1,
            active_width: p.active_width,
            active_speed: p.active_speed,
            phys_state: p.phys_state,
            link_layer: p.link_layer,
            flags: if p.link_layer == port::LINK_LAYER_ETHERNET {
                port::FLAG_GRH_REQUIRED
            } else {
                0
            },
            ..Default::default()
        };
        let n = st.lib.port_attr_size.min(size_of::<IbvPortAttr>());
        // SAFETY: the library's buffer holds its own struct size, n bytes.
        unsafe { std::ptr::copy_nonoverlapping((&raw const a).cast::<u8>(), attr.cast::<u8>(), n) };
        Ok(())
    })
}
