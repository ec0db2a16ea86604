//! Compile-time checks of every hand-written layout against the contract's
//! offset tables (rdma-core 44, x86_64). A wrong field breaks the build.

use std::mem::{offset_of, size_of};

use super::*;

macro_rules! layout {
    ($t:ty, $size:expr $(, $f:ident $(. $g:ident)* = $off:expr)* $(,)?) => {
        const _: () = assert!(size_of::<$t>() == $size, concat!("size of ", stringify!($t)));
        $(const _: () = assert!(
            offset_of!($t, $f $(. $g)*) == $off,
            concat!(stringify!($t), ".", stringify!($f $(. $g)*))
        );)*
    };
}

layout!(
    IbvDevice,
    664,
    node_type = 16,
    transport_type = 20,
    name = 24,
    dev_name = 88,
    dev_path = 152,
    ibdev_path = 408
);
layout!(
    VerbsMatchEnt,
    24,
    modalias = 8,
    vendor = 16,
    device = 18,
    kind = 20
);
layout!(
    VerbsSysfsDev,
    992,
    provider_data = 16,
    match_ = 24,
    flags = 32,
    sysfs_name = 36,
    sysfs_cdev = 104,
    ibdev_name = 112,
    ibdev_path = 176,
    modalias = 432,
    node_guid = 944,
    driver_id = 952,
    node_type = 956,
    ibdev_idx = 960,
    num_ports = 964,
    abi_ver = 968,
    time_created = 976
);
layout!(
    VerbsDeviceOps,
    72,
    match_min_abi_version = 8,
    match_max_abi_version = 12,
    match_table = 16,
    static_providers = 24,
    match_device = 32,
    alloc_context = 40,
    import_context = 48,
    alloc_device = 56,
    uninit_device = 64
);
layout!(
    VerbsDevice,
    712,
    ops = 664,
    refcount = 672,
    entry = 680,
    sysfs = 696,
    core_support = 704
);

layout!(
    IbvContext,
    328,
    ops = 8,
    cmd_fd = 264,
    async_fd = 268,
    num_comp_vectors = 272,
    mutex = 280,
    abi_compat = 320
);
layout!(VerbsContextTail, 336, context = 8);
layout!(
    VerbsContextOps,
    608,
    advise_mr = 0,
    alloc_pd = 40,
    async_event = 56,
    cq_event = 96,
    create_ah = 104,
    create_cq = 120,
    create_cq_ex = 128,
    create_qp = 152,
    create_qp_ex = 160,
    create_srq = 176,
    create_srq_ex = 184,
    dealloc_pd = 208,
    dereg_mr = 224,
    destroy_ah = 232,
    destroy_cq = 248,
    destroy_qp = 272,
    destroy_srq = 288,
    free_context = 312,
    get_srq_num = 328,
    modify_qp = 376,
    modify_srq = 392,
    poll_cq = 424,
    post_recv = 432,
    post_send = 440,
    post_srq_recv = 456,
    query_device_ex = 464,
    query_port = 480,
    query_qp = 488,
    query_qp_data_in_order = 496,
    query_srq = 512,
    reg_mr = 544,
    req_notify_cq = 552,
    rereg_mr = 560,
    resize_cq = 568,
    unimport_pd = 600
);

layout!(IbvPd, 16, handle = 8);
layout!(
    IbvMr,
    48,
    pd = 8,
    addr = 16,
    length = 24,
    handle = 32,
    lkey = 36,
    rkey = 40
);
layout!(VerbsMr, 56, mr_type = 48, access = 52);
layout!(IbvMw, 32, pd = 8, rkey = 16, handle = 20, mw_type = 24);
layout!(
    IbvMwBindInfo,
    32,
    addr = 8,
    length = 16,
    mw_access_flags = 24
);
layout!(IbvMwBind, 48, send_flags = 8, bind_info = 16);
layout!(IbvCompChannel, 16, fd = 8, refcnt = 12);
layout!(
    IbvCq,
    128,
    channel = 8,
    cq_context = 16,
    handle = 24,
    cqe = 28,
    mutex = 32,
    cond = 72,
    comp_events_completed = 120,
    async_events_completed = 124
);
layout!(
    IbvCqEx,
    288,
    comp_mask = 128,
    status = 132,
    wr_id = 136,
    start_poll = 144,
    next_poll = 152,
    end_poll = 160,
    read_opcode = 168,
    read_vendor_err = 176,
    read_byte_len = 184,
    read_imm_data = 192,
    read_qp_num = 200,
    read_src_qp = 208,
    read_wc_flags = 216,
    read_slid = 224,
    read_sl = 232,
    read_dlid_path_bits = 240,
    read_completion_ts = 248,
    read_cvlan = 256,
    read_flow_tag = 264,
    read_tm_info = 272,
    read_completion_wallclock_ns = 280
);
layout!(
    IbvSrq,
    128,
    srq_context = 8,
    pd = 16,
    handle = 24,
    mutex = 32,
    cond = 72,
    events_completed = 120
);
layout!(
    VerbsSrq,
    160,
    srq_type = 128,
    xrcd = 136,
    cq = 144,
    srq_num = 152
);
layout!(
    IbvQp,
    160,
    qp_context = 8,
    pd = 16,
    send_cq = 24,
    recv_cq = 32,
    srq = 40,
    handle = 48,
    qp_num = 52,
    state = 56,
    qp_type = 60,
    mutex = 64,
    cond = 104,
    events_completed = 152
);
layout!(
    IbvQpEx,
    352,
    comp_mask = 160,
    wr_id = 168,
    wr_flags = 176,
    wr_atomic_cmp_swp = 184,
    wr_atomic_fetch_add = 192,
    wr_bind_mw = 200,
    wr_local_inv = 208,
    wr_rdma_read = 216,
    wr_rdma_write = 224,
    wr_rdma_write_imm = 232,
    wr_send = 240,
    wr_send_imm = 248,
    wr_send_inv = 256,
    wr_send_tso = 264,
    wr_set_ud_addr = 272,
    wr_set_xrc_srqn = 280,
    wr_set_inline_data = 288,
    wr_set_inline_data_list = 296,
    wr_set_sge = 304,
    wr_set_sge_list = 312,
    wr_start = 320,
    wr_complete = 328,
    wr_abort = 336,
    wr_atomic_write = 344
);
// Largest verbs_qp (v45+): ibv_qp_ex 360, comp_mask at 360, xrcd at 368.
layout!(VerbsQpArea, 384, tail = 352);
layout!(IbvAh, 24, pd = 8, handle = 16);
layout!(IbvAsyncEvent, 16, event_type = 8);

layout!(
    IbvDeviceAttr,
    232,
    node_guid = 64,
    sys_image_guid = 72,
    max_mr_size = 80,
    page_size_cap = 88,
    vendor_id = 96,
    vendor_part_id = 100,
    hw_ver = 104,
    max_qp = 108,
    max_qp_wr = 112,
    device_cap_flags = 116,
    max_sge = 120,
    max_sge_rd = 124,
    max_cq = 128,
    max_cqe = 132,
    max_mr = 136,
    max_pd = 140,
    max_qp_rd_atom = 144,
    max_ee_rd_atom = 148,
    max_res_rd_atom = 152,
    max_qp_init_rd_atom = 156,
    max_ee_init_rd_atom = 160,
    atomic_cap = 164,
    max_ee = 168,
    max_rdd = 172,
    max_mw = 176,
    max_raw_ipv6_qp = 180,
    max_raw_ethy_qp = 184,
    max_mcast_grp = 188,
    max_mcast_qp_attach = 192,
    max_total_mcast_qp_attach = 196,
    max_ah = 200,
    max_fmr = 204,
    max_map_per_fmr = 208,
    max_srq = 212,
    max_srq_wr = 216,
    max_srq_sge = 220,
    max_pkeys = 224,
    local_ca_ack_delay = 226,
    phys_port_cnt = 227
);
layout!(
    IbvDeviceAttrEx,
    400,
    comp_mask = 232,
    odp_caps = 240,
    completion_timestamp_mask = 264,
    hca_core_clock = 272,
    device_cap_flags_ex = 280,
    tso_caps = 288,
    rss_caps = 296,
    max_wq_type_rq = 328,
    packet_pacing_caps = 332,
    raw_packet_caps = 344,
    tm_caps = 348,
    cq_mod_caps = 368,
    max_dm_size = 376,
    pci_atomic_caps = 384,
    xrc_odp_caps = 392,
    phys_port_cnt_ex = 396
);
layout!(
    IbvPortAttr,
    56,
    max_mtu = 4,
    active_mtu = 8,
    gid_tbl_len = 12,
    port_cap_flags = 16,
    max_msg_sz = 20,
    bad_pkey_cntr = 24,
    qkey_viol_cntr = 28,
    pkey_tbl_len = 32,
    lid = 34,
    sm_lid = 36,
    lmc = 38,
    max_vl_num = 39,
    sm_sl = 40,
    subnet_timeout = 41,
    init_type_reply = 42,
    active_width = 43,
    active_speed = 44,
    phys_state = 45,
    link_layer = 46,
    flags = 47,
    port_cap_flags2 = 48,
    active_speed_ex = 52
);
layout!(
    IbvGlobalRoute,
    24,
    flow_label = 16,
    sgid_index = 20,
    hop_limit = 21,
    traffic_class = 22
);
layout!(
    IbvAhAttr,
    32,
    dlid = 24,
    sl = 26,
    src_path_bits = 27,
    static_rate = 28,
    is_global = 29,
    port_num = 30
);
layout!(
    IbvQpAttr,
    144,
    cap = 36,
    ah_attr = 56,
    alt_ah_attr = 88,
    pkey_index = 120,
    sq_draining = 125,
    max_rd_atomic = 126,
    min_rnr_timer = 128,
    port_num = 129,
    timeout = 130,
    rnr_retry = 132,
    rate_limit = 136
);
layout!(IbvQpInitAttr, 64, cap = 32, qp_type = 52, sq_sig_all = 56);
layout!(
    IbvQpInitAttrEx,
    136,
    comp_mask = 60,
    pd = 64,
    xrcd = 72,
    create_flags = 80,
    max_tso_header = 84,
    rwq_ind_tbl = 88,
    rx_hash_conf = 96,
    source_qpn = 120,
    send_ops_flags = 128
);
layout!(IbvSrqInitAttr, 24, attr = 8);
layout!(
    IbvSrqInitAttrEx,
    64,
    attr = 8,
    comp_mask = 20,
    srq_type = 24,
    pd = 32,
    xrcd = 40,
    cq = 48,
    tm_cap = 56
);
layout!(
    IbvCqInitAttrEx,
    56,
    cq_context = 8,
    channel = 16,
    comp_vector = 24,
    wc_flags = 32,
    comp_mask = 40,
    flags = 44,
    parent_domain = 48
);
layout!(IbvValuesEx, 24, raw_clock = 8);
layout!(
    IbvParentDomainInitAttr,
    48,
    td = 8,
    comp_mask = 16,
    alloc = 24,
    free = 32,
    pd_context = 40
);

layout!(IbvSge, 16, length = 8, lkey = 12);
layout!(IbvDataBuf, 16, length = 8);
layout!(
    IbvWc,
    48,
    status = 8,
    opcode = 12,
    vendor_err = 16,
    byte_len = 20,
    imm_data = 24,
    qp_num = 28,
    src_qp = 32,
    wc_flags = 36,
    pkey_index = 40,
    slid = 42,
    sl = 44,
    dlid_path_bits = 45
);
layout!(
    IbvSendWr,
    128,
    next = 8,
    sg_list = 16,
    num_sge = 24,
    opcode = 28,
    send_flags = 32,
    imm_data = 36,
    wr = 40,
    wr.word1 = 48,
    wr.swap = 56,
    wr.atomic_rkey = 64,
    remote_srqn = 72,
    bind_mw_or_tso = 80
);
layout!(IbvRecvWr, 32, next = 8, sg_list = 16, num_sge = 24);
