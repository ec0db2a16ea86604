//! Compares the public layouts with the installed `<infiniband/verbs.h>`:
//! compiles a C program that prints `sizeof`/`offsetof` of each field and
//! checks them against Rust's. Skipped (with a note) where no C compiler or
//! header exists.

use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

use rxu_testkit::skip;

use super::*;

/// (C struct, C member designator, Rust offset); member "" is the size.
fn table() -> Vec<(&'static str, &'static str, usize)> {
    macro_rules! t {
        ($c:literal, $t:ty { $($cf:literal => $f:ident $(. $g:ident)*),* $(,)? }) => {
            vec![($c, "", size_of::<$t>()) $(, ($c, $cf, offset_of!($t, $f $(. $g)*)))*]
        };
    }
    [
        t!("ibv_device", IbvDevice { "node_type" => node_type, "name" => name,
            "dev_name" => dev_name, "dev_path" => dev_path, "ibdev_path" => ibdev_path }),
        t!("ibv_context", IbvContext { "ops" => ops, "cmd_fd" => cmd_fd,
            "async_fd" => async_fd, "num_comp_vectors" => num_comp_vectors,
            "mutex" => mutex, "abi_compat" => abi_compat }),
        t!("ibv_pd", IbvPd { "handle" => handle }),
        t!("ibv_mr", IbvMr { "pd" => pd, "addr" => addr, "length" => length,
            "handle" => handle, "lkey" => lkey, "rkey" => rkey }),
        t!("ibv_comp_channel", IbvCompChannel { "fd" => fd, "refcnt" => refcnt }),
        t!("ibv_cq", IbvCq { "channel" => channel, "cq_context" => cq_context,
            "handle" => handle, "cqe" => cqe, "mutex" => mutex, "cond" => cond,
            "comp_events_completed" => comp_events_completed,
            "async_events_completed" => async_events_completed }),
        t!("ibv_cq_ex", IbvCqEx { "comp_mask" => comp_mask, "status" => status,
            "wr_id" => wr_id, "start_poll" => start_poll, "next_poll" => next_poll,
            "end_poll" => end_poll, "read_opcode" => read_opcode,
            "read_imm_data" => read_imm_data, "read_wc_flags" => read_wc_flags,
            "read_sl" => read_sl, "read_tm_info" => read_tm_info,
            "read_completion_wallclock_ns" => read_completion_wallclock_ns }),
        t!("ibv_srq", IbvSrq { "srq_context" => srq_context, "pd" => pd, "handle" => handle,
            "mutex" => mutex, "cond" => cond, "events_completed" => events_completed }),
        t!("ibv_qp", IbvQp { "qp_context" => qp_context, "srq" => srq, "handle" => handle,
            "qp_num" => qp_num, "state" => state, "qp_type" => qp_type, "mutex" => mutex,
            "cond" => cond, "events_completed" => events_completed }),
        t!("ibv_qp_ex", IbvQpEx { "comp_mask" => comp_mask, "wr_id" => wr_id,
            "wr_flags" => wr_flags, "wr_atomic_cmp_swp" => wr_atomic_cmp_swp,
            "wr_rdma_write_imm" => wr_rdma_write_imm, "wr_send" => wr_send,
            "wr_set_ud_addr" => wr_set_ud_addr, "wr_set_inline_data_list" => wr_set_inline_data_list,
            "wr_set_sge" => wr_set_sge, "wr_set_sge_list" => wr_set_sge_list,
            "wr_start" => wr_start, "wr_complete" => wr_complete, "wr_abort" => wr_abort,
            "wr_atomic_write" => wr_atomic_write }),
        t!("ibv_ah", IbvAh { "pd" => pd, "handle" => handle }),
        t!("ibv_async_event", IbvAsyncEvent { "event_type" => event_type }),
        t!("ibv_device_attr", IbvDeviceAttr { "node_guid" => node_guid,
            "vendor_id" => vendor_id, "max_qp" => max_qp, "device_cap_flags" => device_cap_flags,
            "max_qp_rd_atom" => max_qp_rd_atom, "atomic_cap" => atomic_cap,
            "max_ah" => max_ah, "max_srq_sge" => max_srq_sge, "max_pkeys" => max_pkeys,
            "local_ca_ack_delay" => local_ca_ack_delay, "phys_port_cnt" => phys_port_cnt }),
        t!("ibv_device_attr_ex", IbvDeviceAttrEx { "comp_mask" => comp_mask,
            "odp_caps" => odp_caps, "odp_caps.per_transport_caps.rc_odp_caps" => odp_caps.rc_odp_caps,
            "odp_caps.per_transport_caps.ud_odp_caps" => odp_caps.ud_odp_caps,
            "completion_timestamp_mask" => completion_timestamp_mask,
            "hca_core_clock" => hca_core_clock, "device_cap_flags_ex" => device_cap_flags_ex,
            "tso_caps" => tso_caps, "rss_caps" => rss_caps,
            "rss_caps.rx_hash_fields_mask" => rss_caps.rx_hash_fields_mask,
            "rss_caps.rx_hash_function" => rss_caps.rx_hash_function,
            "max_wq_type_rq" => max_wq_type_rq, "packet_pacing_caps" => packet_pacing_caps,
            "raw_packet_caps" => raw_packet_caps, "tm_caps" => tm_caps,
            "cq_mod_caps" => cq_mod_caps, "max_dm_size" => max_dm_size,
            "pci_atomic_caps" => pci_atomic_caps, "xrc_odp_caps" => xrc_odp_caps,
            "phys_port_cnt_ex" => phys_port_cnt_ex }),
        t!("ibv_global_route", IbvGlobalRoute { "flow_label" => flow_label,
            "sgid_index" => sgid_index, "hop_limit" => hop_limit,
            "traffic_class" => traffic_class }),
        t!("ibv_ah_attr", IbvAhAttr { "dlid" => dlid, "sl" => sl,
            "src_path_bits" => src_path_bits, "static_rate" => static_rate,
            "is_global" => is_global, "port_num" => port_num }),
        t!("ibv_qp_cap", IbvQpCap { "max_inline_data" => max_inline_data }),
        t!("ibv_qp_attr", IbvQpAttr { "cur_qp_state" => cur_qp_state, "path_mtu" => path_mtu,
            "path_mig_state" => path_mig_state, "qkey" => qkey, "rq_psn" => rq_psn,
            "sq_psn" => sq_psn, "dest_qp_num" => dest_qp_num,
            "qp_access_flags" => qp_access_flags, "cap" => cap, "ah_attr" => ah_attr,
            "alt_ah_attr" => alt_ah_attr, "pkey_index" => pkey_index,
            "alt_pkey_index" => alt_pkey_index, "en_sqd_async_notify" => en_sqd_async_notify,
            "sq_draining" => sq_draining, "max_rd_atomic" => max_rd_atomic,
            "max_dest_rd_atomic" => max_dest_rd_atomic, "min_rnr_timer" => min_rnr_timer,
            "port_num" => port_num, "timeout" => timeout, "retry_cnt" => retry_cnt,
            "rnr_retry" => rnr_retry, "alt_port_num" => alt_port_num,
            "alt_timeout" => alt_timeout, "rate_limit" => rate_limit }),
        t!("ibv_qp_init_attr", IbvQpInitAttr { "send_cq" => send_cq, "recv_cq" => recv_cq,
            "srq" => srq, "cap" => cap, "qp_type" => qp_type, "sq_sig_all" => sq_sig_all }),
        t!("ibv_qp_init_attr_ex", IbvQpInitAttrEx { "cap" => cap, "qp_type" => qp_type,
            "comp_mask" => comp_mask, "pd" => pd, "xrcd" => xrcd,
            "create_flags" => create_flags, "max_tso_header" => max_tso_header,
            "rwq_ind_tbl" => rwq_ind_tbl, "rx_hash_conf" => rx_hash_conf,
            "rx_hash_conf.rx_hash_key" => rx_hash_conf.rx_hash_key,
            "rx_hash_conf.rx_hash_fields_mask" => rx_hash_conf.rx_hash_fields_mask,
            "source_qpn" => source_qpn, "send_ops_flags" => send_ops_flags }),
        t!("ibv_srq_attr", IbvSrqAttr { "max_sge" => max_sge, "srq_limit" => srq_limit }),
        t!("ibv_srq_init_attr", IbvSrqInitAttr { "attr" => attr }),
        t!("ibv_srq_init_attr_ex", IbvSrqInitAttrEx { "attr" => attr, "comp_mask" => comp_mask,
            "srq_type" => srq_type, "pd" => pd, "xrcd" => xrcd, "cq" => cq,
            "tm_cap" => tm_cap }),
        t!("ibv_cq_init_attr_ex", IbvCqInitAttrEx { "cq_context" => cq_context,
            "channel" => channel, "comp_vector" => comp_vector, "wc_flags" => wc_flags,
            "comp_mask" => comp_mask, "flags" => flags, "parent_domain" => parent_domain }),
        t!("ibv_poll_cq_attr", IbvPollCqAttr {}),
        t!("ibv_values_ex", IbvValuesEx { "comp_mask" => comp_mask, "raw_clock" => raw_clock }),
        t!("ibv_parent_domain_init_attr", IbvParentDomainInitAttr { "pd" => pd, "td" => td,
            "comp_mask" => comp_mask, "alloc" => alloc, "free" => free,
            "pd_context" => pd_context }),
        t!("ibv_query_device_ex_input", IbvQueryDeviceExInput {}),
        t!("ibv_sge", IbvSge { "length" => length, "lkey" => lkey }),
        t!("ibv_data_buf", IbvDataBuf { "length" => length }),
        t!("ibv_wc", IbvWc { "status" => status, "opcode" => opcode,
            "vendor_err" => vendor_err, "byte_len" => byte_len, "imm_data" => imm_data,
            "invalidated_rkey" => imm_data, "qp_num" => qp_num, "src_qp" => src_qp,
            "wc_flags" => wc_flags, "pkey_index" => pkey_index, "slid" => slid, "sl" => sl,
            "dlid_path_bits" => dlid_path_bits }),
        t!("ibv_send_wr", IbvSendWr { "next" => next, "sg_list" => sg_list,
            "num_sge" => num_sge, "opcode" => opcode, "send_flags" => send_flags,
            "imm_data" => imm_data, "invalidate_rkey" => imm_data,
            "wr.rdma.remote_addr" => wr.addr_or_ah, "wr.rdma.rkey" => wr.word1,
            "wr.atomic.remote_addr" => wr.addr_or_ah, "wr.atomic.compare_add" => wr.word1,
            "wr.atomic.swap" => wr.swap, "wr.atomic.rkey" => wr.atomic_rkey,
            "wr.ud.ah" => wr.addr_or_ah, "wr.ud.remote_qpn" => wr.word1,
            "qp_type.xrc.remote_srqn" => remote_srqn, "bind_mw" => bind_mw_or_tso,
            "tso" => bind_mw_or_tso }),
        t!("ibv_recv_wr", IbvRecvWr { "next" => next, "sg_list" => sg_list,
            "num_sge" => num_sge }),
    ]
    .concat()
    .into_iter()
    .chain(port_attr_rows())
    .collect()
}

/// `ibv_port_attr` fields without its size: the installed header may be
/// older (52 bytes) than the Rust struct (the 56-byte superset).
fn port_attr_rows() -> Vec<(&'static str, &'static str, usize)> {
    macro_rules! f {
        ($($f:ident),*) => { vec![$(("ibv_port_attr", stringify!($f), offset_of!(IbvPortAttr, $f))),*] };
    }
    f!(
        state,
        max_mtu,
        active_mtu,
        gid_tbl_len,
        port_cap_flags,
        max_msg_sz,
        bad_pkey_cntr,
        qkey_viol_cntr,
        pkey_tbl_len,
        lid,
        sm_lid,
        lmc,
        max_vl_num,
        sm_sl,
        subnet_timeout,
        init_type_reply,
        active_width,
        active_speed,
        phys_state,
        link_layer,
        flags,
        port_cap_flags2
    )
}

fn c_program(rows: &[(&str, &str, usize)]) -> String {
    let mut s = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void){\n",
    );
    for (st, f, _) in rows {
        if f.is_empty() {
            s += &format!("printf(\"%zu\\n\", sizeof(struct {st}));\n");
        } else {
            s += &format!("printf(\"%zu\\n\", offsetof(struct {st}, {f}));\n");
        }
    }
    s + "return 0;}\n"
}

#[test]
fn public_layouts_match_installed_verbs_h() {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        skip("/usr/include/infiniband/verbs.h not installed (libibverbs-dev)");
        return;
    }
    let rows = table();
    let dir = std::env::temp_dir().join(format!("rxu-ffi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, c_program(&rows)).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = match Command::new(&cc).arg("-o").arg(&exe).arg(&src).output() {
        Ok(o) => o,
        Err(e) => {
            skip(&format!("no C compiler ({cc}: {e})"));
            return;
        }
    };
    assert!(
        built.status.success(),
        "probe did not compile:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let got: Vec<usize> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(got.len(), rows.len());
    let bad: Vec<String> = rows
        .iter()
        .zip(&got)
        .filter(|((_, _, rust), c)| rust != *c)
        .map(|((st, f, rust), c)| format!("{st}.{f}: C {c}, Rust {rust}"))
        .collect();
    assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
}
