/*
 * The C-visible surface of one verbs device, as `key=value` lines: every
 * field a program can read from the device, port, GID and P_Key queries,
 * the caps ibv_create_qp/cq/srq hand back (how requests are rounded),
 * ibv_query_qp in each state, MR key facts, every ibv_wc field of RC and UD
 * completions (through ibv_poll_cq and through ibv_cq_ex), the GRH area of
 * a UD receive, error completions of common mistakes, and the return
 * values and errnos of common misuse. The same program runs on an rxu
 * device and on the kernel's rxe (tests/tests/verbs_surface.rs and the
 * interop phase "surface" compare the two, line by line).
 *
 * What identifies a machine or a run is printed normalised: GUIDs, keys
 * and QP numbers as "zero"/"nonzero" or by name (qpn(rc_b)), GIDs and
 * addresses as "self"/"zero"/kind, timestamps and IP IDs not at all.
 * Output buffers are filled with 0xaa before a call, so a field the
 * provider leaves untouched shows as 0xaa.. instead of a lucky zero.
 *
 * usage: verbs_surface <ibdev> [gid index]; without an index, the first
 * RoCE v2 IPv4 GID. Exit 0 when the device opened (the output is the
 * result); 1 when it could not.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QKEY 0x11111111u
#define BUF (64 * 1024)
#define GRH 40
#define POISON 0xaa
#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_device_attr_ex dev;
static union ibv_gid gid;
static int gidx;
static int max_wr_cap, max_sge_cap;

/* ---- printing --------------------------------------------------------- */

static void out(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static char sbuf[16][256];
static int sidx;
/* A scratch string for one printf argument (16 live at a time). */
static char *scratch(void)
{
	sidx = (sidx + 1) % 16;
	sbuf[sidx][0] = 0;
	return sbuf[sidx];
}

static const char *ename(int e)
{
	const char *n = strerrorname_np(e);
	if (n)
		return n;
	char *s = scratch();
	snprintf(s, 256, "E%d", e);
	return s;
}

/* An int-returning verb's result: 0, a positive errno, or -1 with errno. */
static const char *ret(int r, int e)
{
	char *s = scratch();
	if (r == 0)
		return "0";
	if (r == -1)
		snprintf(s, 256, "-1/errno=%s", ename(e));
	else if (r > 0)
		snprintf(s, 256, "%s", ename(r));
	else
		snprintf(s, 256, "-%s", ename(-r));
	return s;
}
#define RET(call) ({ errno = 0; int r_ = (call); ret(r_, errno); })

/* A pointer-returning verb's failure. */
static const char *nullerr(int e)
{
	char *s = scratch();
	snprintf(s, 256, "null/errno=%s", ename(e));
	return s;
}

struct flag { uint64_t bit; const char *name; };

static const char *flags(uint64_t v, const struct flag *t)
{
	char *s = scratch();
	size_t n = 0;
	for (; t->name; t++)
		if (v & t->bit) {
			n += snprintf(s + n, 256 - n, "%s%s", n ? "|" : "", t->name);
			v &= ~t->bit;
		}
	if (v)
		n += snprintf(s + n, 256 - n, "%s%#llx", n ? "|" : "", (unsigned long long)v);
	if (!n)
		snprintf(s, 256, "0");
	return s;
}

static const struct flag dev_caps[] = {
	{ IBV_DEVICE_RESIZE_MAX_WR, "RESIZE_MAX_WR" }, { IBV_DEVICE_BAD_PKEY_CNTR, "BAD_PKEY_CNTR" },
	{ IBV_DEVICE_BAD_QKEY_CNTR, "BAD_QKEY_CNTR" }, { IBV_DEVICE_RAW_MULTI, "RAW_MULTI" },
	{ IBV_DEVICE_AUTO_PATH_MIG, "AUTO_PATH_MIG" }, { IBV_DEVICE_CHANGE_PHY_PORT, "CHANGE_PHY_PORT" },
	{ IBV_DEVICE_UD_AV_PORT_ENFORCE, "UD_AV_PORT_ENFORCE" },
	{ IBV_DEVICE_CURR_QP_STATE_MOD, "CURR_QP_STATE_MOD" },
	{ IBV_DEVICE_SHUTDOWN_PORT, "SHUTDOWN_PORT" }, { IBV_DEVICE_INIT_TYPE, "INIT_TYPE" },
	{ IBV_DEVICE_PORT_ACTIVE_EVENT, "PORT_ACTIVE_EVENT" },
	{ IBV_DEVICE_SYS_IMAGE_GUID, "SYS_IMAGE_GUID" }, { IBV_DEVICE_RC_RNR_NAK_GEN, "RC_RNR_NAK_GEN" },
	{ IBV_DEVICE_SRQ_RESIZE, "SRQ_RESIZE" }, { IBV_DEVICE_N_NOTIFY_CQ, "N_NOTIFY_CQ" },
	{ IBV_DEVICE_MEM_WINDOW, "MEM_WINDOW" }, { IBV_DEVICE_UD_IP_CSUM, "UD_IP_CSUM" },
	{ IBV_DEVICE_XRC, "XRC" }, { IBV_DEVICE_MEM_MGT_EXTENSIONS, "MEM_MGT_EXTENSIONS" },
	{ IBV_DEVICE_MEM_WINDOW_TYPE_2A, "MEM_WINDOW_TYPE_2A" },
	{ IBV_DEVICE_MEM_WINDOW_TYPE_2B, "MEM_WINDOW_TYPE_2B" },
	{ IBV_DEVICE_RC_IP_CSUM, "RC_IP_CSUM" }, { IBV_DEVICE_RAW_IP_CSUM, "RAW_IP_CSUM" },
	{ IBV_DEVICE_MANAGED_FLOW_STEERING, "MANAGED_FLOW_STEERING" },
	{ IBV_DEVICE_RAW_SCATTER_FCS, "RAW_SCATTER_FCS" },
	{ IBV_DEVICE_PCI_WRITE_END_PADDING, "PCI_WRITE_END_PADDING" }, { 0, NULL } };

static const struct flag port_caps[] = {
	{ IBV_PORT_SM, "SM" }, { IBV_PORT_NOTICE_SUP, "NOTICE" }, { IBV_PORT_TRAP_SUP, "TRAP" },
	{ IBV_PORT_OPT_IPD_SUP, "OPT_IPD" }, { IBV_PORT_AUTO_MIGR_SUP, "AUTO_MIGR" },
	{ IBV_PORT_SL_MAP_SUP, "SL_MAP" }, { IBV_PORT_MKEY_NVRAM, "MKEY_NVRAM" },
	{ IBV_PORT_PKEY_NVRAM, "PKEY_NVRAM" }, { IBV_PORT_LED_INFO_SUP, "LED_INFO" },
	{ IBV_PORT_SYS_IMAGE_GUID_SUP, "SYS_IMAGE_GUID" },
	{ IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP, "PKEY_SW_EXT_PORT_TRAP" },
	{ IBV_PORT_EXTENDED_SPEEDS_SUP, "EXTENDED_SPEEDS" }, { IBV_PORT_CAP_MASK2_SUP, "CAP_MASK2" },
	{ IBV_PORT_CM_SUP, "CM" }, { IBV_PORT_SNMP_TUNNEL_SUP, "SNMP_TUNNEL" },
	{ IBV_PORT_REINIT_SUP, "REINIT" }, { IBV_PORT_DEVICE_MGMT_SUP, "DEVICE_MGMT" },
	{ IBV_PORT_VENDOR_CLASS_SUP, "VENDOR_CLASS" }, { IBV_PORT_DR_NOTICE_SUP, "DR_NOTICE" },
	{ IBV_PORT_CAP_MASK_NOTICE_SUP, "CAP_MASK_NOTICE" }, { IBV_PORT_BOOT_MGMT_SUP, "BOOT_MGMT" },
	{ IBV_PORT_LINK_LATENCY_SUP, "LINK_LATENCY" }, { IBV_PORT_CLIENT_REG_SUP, "CLIENT_REG" },
	{ IBV_PORT_IP_BASED_GIDS, "IP_BASED_GIDS" }, { 0, NULL } };

static const struct flag port_caps2[] = {
	{ IBV_PORT_SET_NODE_DESC_SUP, "SET_NODE_DESC" }, { IBV_PORT_INFO_EXT_SUP, "INFO_EXT" },
	{ IBV_PORT_VIRT_SUP, "VIRT" }, { IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP, "SWITCH_PORT_STATE_TABLE" },
	{ IBV_PORT_LINK_WIDTH_2X_SUP, "LINK_WIDTH_2X" }, { IBV_PORT_LINK_SPEED_HDR_SUP, "LINK_SPEED_HDR" },
	{ IBV_PORT_LINK_SPEED_NDR_SUP, "LINK_SPEED_NDR" }, { 0, NULL } };

static const struct flag access_names[] = {
	{ IBV_ACCESS_LOCAL_WRITE, "LOCAL_WRITE" }, { IBV_ACCESS_REMOTE_WRITE, "REMOTE_WRITE" },
	{ IBV_ACCESS_REMOTE_READ, "REMOTE_READ" }, { IBV_ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC" },
	{ IBV_ACCESS_MW_BIND, "MW_BIND" }, { IBV_ACCESS_ZERO_BASED, "ZERO_BASED" },
	{ IBV_ACCESS_ON_DEMAND, "ON_DEMAND" }, { IBV_ACCESS_HUGETLB, "HUGETLB" },
	{ IBV_ACCESS_RELAXED_ORDERING, "RELAXED_ORDERING" }, { 0, NULL } };

static const struct flag wc_flag_names[] = {
	{ IBV_WC_GRH, "GRH" }, { IBV_WC_WITH_IMM, "WITH_IMM" }, { IBV_WC_IP_CSUM_OK, "IP_CSUM_OK" },
	{ IBV_WC_WITH_INV, "WITH_INV" }, { IBV_WC_TM_SYNC_REQ, "TM_SYNC_REQ" },
	{ IBV_WC_TM_MATCH, "TM_MATCH" }, { IBV_WC_TM_DATA_VALID, "TM_DATA_VALID" }, { 0, NULL } };

static const char *wc_opcode(unsigned op)
{
	static const char *n[] = { "SEND", "RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD",
				   "BIND_MW", "LOCAL_INV", "TSO", "DRIVER1", "ATOMIC_WRITE" };
	char *s = scratch();
	if (op < sizeof(n) / sizeof(n[0]))
		return n[op];
	if (op == IBV_WC_RECV)
		return "RECV";
	if (op == IBV_WC_RECV_RDMA_WITH_IMM)
		return "RECV_RDMA_WITH_IMM";
	snprintf(s, 256, "%#x", op);
	return s;
}

static const char *qp_state(unsigned s)
{
	static const char *n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN" };
	char *b = scratch();
	if (s < 8)
		return n[s];
	snprintf(b, 256, "%#x", s);
	return b;
}

static const char *zero_or_not(uint64_t v)
{
	return v ? "nonzero" : "zero";
}

/* QP numbers and keys by name: relations hold across devices, values not. */
struct named { uint32_t v; const char *name; };
static struct named qpns[512];
static int nqpns;

static void name_qpn(uint32_t v, const char *name)
{
	if (nqpns < 512)
		qpns[nqpns++] = (struct named){ v, name };
}

static const char *lookup(struct named *t, int n, uint32_t v, const char *what)
{
	char *s = scratch();
	if (v == 0)
		return "0";
	for (int i = n - 1; i >= 0; i--)
		if (t[i].v == v) {
			snprintf(s, 256, "%s(%s)", what, t[i].name);
			return s;
		}
	if ((uint8_t)(v >> 24) == POISON && (uint8_t)v == POISON)
		snprintf(s, 256, "%#x", v);
	else
		snprintf(s, 256, "%s(other)", what);
	return s;
}
#define QPN(v) lookup(qpns, nqpns, (v), "qpn")

static const char *gid_kind(const union ibv_gid *g)
{
	static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	uint8_t z[16] = { 0 };
	if (!memcmp(g, &gid, 16))
		return "self";
	if (!memcmp(g, z, 16))
		return "zero";
	if (!memcmp(g->raw, v4, 12))
		return "ipv4-mapped";
	if (g->raw[0] == 0xfe && (g->raw[1] & 0xc0) == 0x80)
		return "link-local";
	for (int i = 0; i < 16; i++)
		if (g->raw[i] != POISON)
			return "other";
	return "0xaa..";
}

static const char *gid_type(uint32_t t)
{
	switch (t) {
	case IBV_GID_TYPE_IB: return "IB";
	case IBV_GID_TYPE_ROCE_V1: return "RoCEv1";
	case IBV_GID_TYPE_ROCE_V2: return "RoCEv2";
	}
	char *s = scratch();
	snprintf(s, 256, "%#x", t);
	return s;
}

/* ---- device, port, GIDs ----------------------------------------------- */

static void device_attrs(void)
{
	struct ibv_device_attr_ex *x = &dev;
	struct ibv_device_attr *a = &dev.orig_attr;
	memset(x, POISON, sizeof(*x));
	int r = ibv_query_device_ex(ctx, NULL, x);
	out("query_device_ex=%s", ret(r, errno));
	struct ibv_device_attr plain;
	memset(&plain, POISON, sizeof(plain));
	out("query_device=%s", RET(ibv_query_device(ctx, &plain)));
	out("query_device.same_as_ex=%s", memcmp(&plain, a, sizeof(plain)) ? "no" : "yes");
	out("device.fw_ver=%.64s", a->fw_ver);
	out("device.node_guid=%s", zero_or_not(a->node_guid));
	out("device.sys_image_guid=%s", a->sys_image_guid == a->node_guid ? "node_guid"
		: zero_or_not(a->sys_image_guid));
	out("device.max_mr_size=%#llx", (unsigned long long)a->max_mr_size);
	out("device.page_size_cap=%#llx", (unsigned long long)a->page_size_cap);
	out("device.vendor_id=%#x", a->vendor_id);
	out("device.vendor_part_id=%#x", a->vendor_part_id);
	out("device.hw_ver=%#x", a->hw_ver);
	out("device.max_qp=%d", a->max_qp);
	out("device.max_qp_wr=%d", a->max_qp_wr);
	out("device.device_cap_flags=%s", flags(a->device_cap_flags, dev_caps));
	out("device.max_sge=%d", a->max_sge);
	out("device.max_sge_rd=%d", a->max_sge_rd);
	out("device.max_cq=%d", a->max_cq);
	out("device.max_cqe=%d", a->max_cqe);
	out("device.max_mr=%d", a->max_mr);
	out("device.max_pd=%d", a->max_pd);
	out("device.max_qp_rd_atom=%d", a->max_qp_rd_atom);
	out("device.max_ee_rd_atom=%d", a->max_ee_rd_atom);
	out("device.max_res_rd_atom=%d", a->max_res_rd_atom);
	out("device.max_qp_init_rd_atom=%d", a->max_qp_init_rd_atom);
	out("device.max_ee_init_rd_atom=%d", a->max_ee_init_rd_atom);
	out("device.atomic_cap=%d", a->atomic_cap);
	out("device.max_ee=%d", a->max_ee);
	out("device.max_rdd=%d", a->max_rdd);
	out("device.max_mw=%d", a->max_mw);
	out("device.max_raw_ipv6_qp=%d", a->max_raw_ipv6_qp);
	out("device.max_raw_ethy_qp=%d", a->max_raw_ethy_qp);
	out("device.max_mcast_grp=%d", a->max_mcast_grp);
	out("device.max_mcast_qp_attach=%d", a->max_mcast_qp_attach);
	out("device.max_total_mcast_qp_attach=%d", a->max_total_mcast_qp_attach);
	out("device.max_ah=%d", a->max_ah);
	out("device.max_fmr=%d", a->max_fmr);
	out("device.max_map_per_fmr=%d", a->max_map_per_fmr);
	out("device.max_srq=%d", a->max_srq);
	out("device.max_srq_wr=%d", a->max_srq_wr);
	out("device.max_srq_sge=%d", a->max_srq_sge);
	out("device.max_pkeys=%u", a->max_pkeys);
	out("device.local_ca_ack_delay=%u", a->local_ca_ack_delay);
	out("device.phys_port_cnt=%u", a->phys_port_cnt);
	out("device_ex.comp_mask=%#x", x->comp_mask);
	out("device_ex.odp_caps.general_caps=%#llx", (unsigned long long)x->odp_caps.general_caps);
	out("device_ex.odp_caps.rc_odp_caps=%#x", x->odp_caps.per_transport_caps.rc_odp_caps);
	out("device_ex.odp_caps.uc_odp_caps=%#x", x->odp_caps.per_transport_caps.uc_odp_caps);
	out("device_ex.odp_caps.ud_odp_caps=%#x", x->odp_caps.per_transport_caps.ud_odp_caps);
	out("device_ex.completion_timestamp_mask=%s", zero_or_not(x->completion_timestamp_mask));
	out("device_ex.hca_core_clock=%s", zero_or_not(x->hca_core_clock));
	out("device_ex.device_cap_flags_ex=%s", flags(x->device_cap_flags_ex, dev_caps));
	out("device_ex.tso_caps.max_tso=%u", x->tso_caps.max_tso);
	out("device_ex.tso_caps.supported_qpts=%#x", x->tso_caps.supported_qpts);
	out("device_ex.rss_caps.supported_qpts=%#x", x->rss_caps.supported_qpts);
	out("device_ex.rss_caps.max_rwq_indirection_tables=%u", x->rss_caps.max_rwq_indirection_tables);
	out("device_ex.rss_caps.max_rwq_indirection_table_size=%u",
	    x->rss_caps.max_rwq_indirection_table_size);
	out("device_ex.rss_caps.rx_hash_fields_mask=%#llx",
	    (unsigned long long)x->rss_caps.rx_hash_fields_mask);
	out("device_ex.rss_caps.rx_hash_function=%#x", x->rss_caps.rx_hash_function);
	out("device_ex.max_wq_type_rq=%u", x->max_wq_type_rq);
	out("device_ex.packet_pacing_caps.qp_rate_limit_min=%u", x->packet_pacing_caps.qp_rate_limit_min);
	out("device_ex.packet_pacing_caps.qp_rate_limit_max=%u", x->packet_pacing_caps.qp_rate_limit_max);
	out("device_ex.packet_pacing_caps.supported_qpts=%#x", x->packet_pacing_caps.supported_qpts);
	out("device_ex.raw_packet_caps=%#x", x->raw_packet_caps);
	out("device_ex.tm_caps.max_rndv_hdr_size=%u", x->tm_caps.max_rndv_hdr_size);
	out("device_ex.tm_caps.max_num_tags=%u", x->tm_caps.max_num_tags);
	out("device_ex.tm_caps.flags=%#x", x->tm_caps.flags);
	out("device_ex.tm_caps.max_ops=%u", x->tm_caps.max_ops);
	out("device_ex.tm_caps.max_sge=%u", x->tm_caps.max_sge);
	out("device_ex.cq_mod_caps.max_cq_count=%u", x->cq_mod_caps.max_cq_count);
	out("device_ex.cq_mod_caps.max_cq_period=%u", x->cq_mod_caps.max_cq_period);
	out("device_ex.max_dm_size=%llu", (unsigned long long)x->max_dm_size);
	out("device_ex.pci_atomic_caps.fetch_add=%#x", x->pci_atomic_caps.fetch_add);
	out("device_ex.pci_atomic_caps.swap=%#x", x->pci_atomic_caps.swap);
	out("device_ex.pci_atomic_caps.compare_swap=%#x", x->pci_atomic_caps.compare_swap);
	out("device_ex.xrc_odp_caps=%#x", x->xrc_odp_caps);
	out("device_ex.phys_port_cnt_ex=%u", x->phys_port_cnt_ex);
	max_wr_cap = a->max_qp_wr;
	max_sge_cap = a->max_sge;
}

static void device_identity(struct ibv_device *d, const char *want)
{
	out("device.name_is_argument=%s", strcmp(ibv_get_device_name(d), want) ? "no" : "yes");
	out("device.guid=%s", ibv_get_device_guid(d) == dev.orig_attr.node_guid ? "node_guid"
		: zero_or_not(ibv_get_device_guid(d)));
	out("device.node_type=%s", ibv_node_type_str(d->node_type));
	out("device.transport_type=%d", d->transport_type);
	out("device.dev_name=%s", strncmp(d->dev_name, "uverbs", 6) ? d->dev_name : "uverbs<N>");
	const char *slash = strrchr(d->ibdev_path, '/');
	out("device.ibdev_path.last=%s", slash && !strcmp(slash + 1, want) ? "<name>" : "other");
	out("device.index=%s", ibv_get_device_index(d) >= 0 ? "nonnegative" : "negative");
	out("context.num_comp_vectors=%d", ctx->num_comp_vectors);
	out("context.device_is_d=%s", ctx->device == d ? "yes" : "no");
	out("context.async_fd=%s", fcntl(ctx->async_fd, F_GETFD) >= 0 ? "open" : "closed");
	int fl = fcntl(ctx->async_fd, F_GETFL);
	out("context.async_fd.accmode=%d", fl & O_ACCMODE);
	out("context.async_fd.nonblock=%s", fl & O_NONBLOCK ? "yes" : "no");
	out("context.async_fd.cloexec=%s", fcntl(ctx->async_fd, F_GETFD) & FD_CLOEXEC ? "yes" : "no");
}

static void port_attrs(void)
{
	struct ibv_port_attr p;
	memset(&p, POISON, sizeof(p));
	out("query_port=%s", RET(ibv_query_port(ctx, 1, &p)));
	out("port.state=%s", ibv_port_state_str(p.state));
	out("port.max_mtu=%d", p.max_mtu);
	out("port.active_mtu=%d", p.active_mtu);
	out("port.gid_tbl_len=%d", p.gid_tbl_len);
	out("port.port_cap_flags=%s", flags(p.port_cap_flags, port_caps));
	out("port.max_msg_sz=%#x", p.max_msg_sz);
	out("port.bad_pkey_cntr=%u", p.bad_pkey_cntr);
	out("port.qkey_viol_cntr=%u", p.qkey_viol_cntr);
	out("port.pkey_tbl_len=%u", p.pkey_tbl_len);
	out("port.lid=%u", p.lid);
	out("port.sm_lid=%u", p.sm_lid);
	out("port.lmc=%u", p.lmc);
	out("port.max_vl_num=%u", p.max_vl_num);
	out("port.sm_sl=%u", p.sm_sl);
	out("port.subnet_timeout=%u", p.subnet_timeout);
	out("port.init_type_reply=%u", p.init_type_reply);
	out("port.active_width=%u", p.active_width);
	out("port.active_speed=%u", p.active_speed);
	out("port.phys_state=%u", p.phys_state);
	out("port.link_layer=%u", p.link_layer);
	out("port.flags=%#x", p.flags);
	out("port.port_cap_flags2=%s", flags(p.port_cap_flags2, port_caps2));
	memset(&p, POISON, sizeof(p));
	out("query_port.port0=%s", RET(ibv_query_port(ctx, 0, &p)));
	out("query_port.port2=%s", RET(ibv_query_port(ctx, 2, &p)));
}

/* The GID of the run: argv's index, or the first RoCE v2 IPv4 entry. */
static void pick_gid(int argc, char **argv)
{
	gidx = -1;
	if (argc > 2) {
		gidx = atoi(argv[2]);
	} else {
		for (int i = 0; i < 64 && gidx < 0; i++) {
			struct ibv_gid_entry e;
			if (ibv_query_gid_ex(ctx, 1, i, &e, 0))
				continue;
			if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && e.gid.raw[10] == 0xff &&
			    e.gid.raw[11] == 0xff && !e.gid.global.subnet_prefix)
				gidx = i;
		}
	}
	if (gidx < 0)
		DIE("no RoCE v2 IPv4 GID on port 1 (give an index)");
	if (ibv_query_gid(ctx, 1, gidx, &gid))
		DIE("ibv_query_gid %d failed", gidx);
}

static void gids(void)
{
	union ibv_gid g;
	struct ibv_port_attr p;
	ibv_query_port(ctx, 1, &p);
	memset(&g, POISON, sizeof(g));
	out("query_gid=%s", RET(ibv_query_gid(ctx, 1, gidx, &g)));
	out("query_gid.gid=%s", gid_kind(&g));
	out("query_gid.beyond_table=%s", RET(ibv_query_gid(ctx, 1, p.gid_tbl_len, &g)));
	struct ibv_gid_entry e;
	memset(&e, POISON, sizeof(e));
	out("query_gid_ex=%s", RET(ibv_query_gid_ex(ctx, 1, gidx, &e, 0)));
	out("query_gid_ex.gid=%s", gid_kind(&e.gid));
	out("query_gid_ex.gid_index_is_asked=%s", e.gid_index == (uint32_t)gidx ? "yes" : "no");
	out("query_gid_ex.port_num=%u", e.port_num);
	out("query_gid_ex.gid_type=%s", gid_type(e.gid_type));
	out("query_gid_ex.ndev_ifindex=%s", zero_or_not(e.ndev_ifindex));
	out("query_gid_ex.beyond_table=%s", RET(ibv_query_gid_ex(ctx, 1, p.gid_tbl_len, &e, 0)));
	out("query_gid_ex.flags1=%s", RET(ibv_query_gid_ex(ctx, 1, gidx, &e, 1)));
	/* An empty entry in the middle of the table (the last index, usually). */
	out("query_gid_ex.last_index=%s", RET(ibv_query_gid_ex(ctx, 1, p.gid_tbl_len - 1, &e, 0)));
	struct ibv_gid_entry t[256];
	memset(t, POISON, sizeof(t));
	ssize_t n = ibv_query_gid_table(ctx, t, 256, 0);
	out("query_gid_table=%s", n >= 0 ? "ok" : ret((int)n, errno));
	int v2v4 = 0;
	for (ssize_t i = 0; i < n; i++) {
		out("gid_table.%zd=index:%s port:%u type:%s gid:%s ndev:%s", i,
		    t[i].gid_index == (uint32_t)gidx ? "asked" : "other", t[i].port_num,
		    gid_type(t[i].gid_type), gid_kind(&t[i].gid), zero_or_not(t[i].ndev_ifindex));
		v2v4 += t[i].gid_type == IBV_GID_TYPE_ROCE_V2 && !memcmp(&t[i].gid, &gid, 16);
	}
	out("gid_table.self_roce_v2_entries=%d", v2v4);
	out("query_gid_table.too_small=%s", ({ errno = 0; ssize_t m = ibv_query_gid_table(ctx, t, 0, 0);
		m >= 0 ? "ok" : ret((int)m, errno); }));
	uint16_t pk;
	memset(&pk, POISON, sizeof(pk));
	out("query_pkey.0=%s", RET(ibv_query_pkey(ctx, 1, 0, &pk)));
	out("pkey.0=%#x", be16toh(pk));
	out("query_pkey.beyond_table=%s", RET(ibv_query_pkey(ctx, 1, p.pkey_tbl_len, &pk)));
	out("get_pkey_index.ffff=%d", ibv_get_pkey_index(ctx, 1, htobe16(0xffff)));
	out("get_pkey_index.7fff=%d", ibv_get_pkey_index(ctx, 1, htobe16(0x7fff)));
	out("get_pkey_index.1234=%d", ibv_get_pkey_index(ctx, 1, htobe16(0x1234)));
}

/* ---- CQs, SRQs, QP creation caps ---------------------------------------- */

static void cq_sizes(void)
{
	int asks[] = { 1, 2, 3, 15, 16, 17, 100, 1000, dev.orig_attr.max_cqe,
		       dev.orig_attr.max_cqe + 1, 0, -1 };
	for (unsigned i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
		char key[32];
		if (i == 8 || i == 9)
			snprintf(key, sizeof(key), "%s", i == 8 ? "max" : "max+1");
		else
			snprintf(key, sizeof(key), "%d", asks[i]);
		errno = 0;
		struct ibv_cq *cq = ibv_create_cq(ctx, asks[i], NULL, NULL, 0);
		if (!cq) {
			out("create_cq.%s=%s", key, nullerr(errno));
			continue;
		}
		out("create_cq.%s.cqe=%d", key, cq->cqe);
		out("create_cq.%s.comp_events_completed=%u", key, cq->comp_events_completed);
		out("create_cq.%s.async_events_completed=%u", key, cq->async_events_completed);
		ibv_destroy_cq(cq);
	}
	/* Which wc_flags ibv_create_cq_ex takes, one at a time. */
	for (int b = 0; b < 12; b++) {
		struct ibv_cq_init_attr_ex a = { .cqe = 16, .wc_flags = 1ull << b };
		errno = 0;
		struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &a);
		out("create_cq_ex.wc_flag_bit%d=%s", b, cq ? "ok" : nullerr(errno));
		if (cq)
			ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	}
	struct ibv_cq_init_attr_ex a = { .cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS, .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED };
	errno = 0;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &a);
	out("create_cq_ex.single_threaded=%s", cq ? "ok" : nullerr(errno));
	if (cq)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	errno = 0;
	cq = ibv_create_cq_ex(ctx, &a);
	out("create_cq_ex.ignore_overrun=%s", cq ? "ok" : nullerr(errno));
	if (cq)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	a.comp_mask = 0;
	a.cqe = 5;
	errno = 0;
	cq = ibv_create_cq_ex(ctx, &a);
	out("create_cq_ex.5.cqe=%s", cq ? ({ char *s = scratch(); snprintf(s, 256, "%d", cq->cqe); s; })
		: nullerr(errno));
	if (cq)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
}

static void srq_attr_print(const char *p, struct ibv_srq_attr *a)
{
	out("%s.max_wr=%u", p, a->max_wr);
	out("%s.max_sge=%u", p, a->max_sge);
	out("%s.srq_limit=%u", p, a->srq_limit);
}

static void srq_sizes(void)
{
	struct { uint32_t wr, sge, limit; const char *name; } asks[] = {
		{ 1, 1, 0, "1x1" }, { 10, 2, 0, "10x2" }, { 100, 3, 5, "100x3_limit5" },
		{ dev.orig_attr.max_srq_wr, dev.orig_attr.max_srq_sge, 0, "max" },
		{ dev.orig_attr.max_srq_wr + 1, 1, 0, "max_wr+1" },
		{ 4, dev.orig_attr.max_srq_sge + 1, 0, "max_sge+1" },
		{ 4, 1, 8, "limit_above_wr" }, { 0, 1, 0, "0x1" },
	};
	for (unsigned i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
		char p[64];
		snprintf(p, sizeof(p), "create_srq.%s", asks[i].name);
		struct ibv_srq_init_attr ia = { .attr = { asks[i].wr, asks[i].sge, asks[i].limit } };
		errno = 0;
		struct ibv_srq *s = ibv_create_srq(pd, &ia);
		if (!s) {
			out("%s=%s", p, nullerr(errno));
			continue;
		}
		srq_attr_print(p, &ia.attr);
		struct ibv_srq_attr q;
		memset(&q, POISON, sizeof(q));
		char qp[80];
		snprintf(qp, sizeof(qp), "query_srq.%s", asks[i].name);
		out("%s=%s", qp, RET(ibv_query_srq(s, &q)));
		srq_attr_print(qp, &q);
		if (i == 1) {
			struct ibv_srq_attr m = { .srq_limit = 5 };
			out("modify_srq.limit5=%s", RET(ibv_modify_srq(s, &m, IBV_SRQ_LIMIT)));
			memset(&q, POISON, sizeof(q));
			ibv_query_srq(s, &q);
			srq_attr_print("modify_srq.limit5.query", &q);
			m.srq_limit = 100000;
			out("modify_srq.limit_above_max_wr=%s", RET(ibv_modify_srq(s, &m, IBV_SRQ_LIMIT)));
			m.max_wr = 40;
			out("modify_srq.max_wr40=%s", RET(ibv_modify_srq(s, &m, IBV_SRQ_MAX_WR)));
			memset(&q, POISON, sizeof(q));
			ibv_query_srq(s, &q);
			srq_attr_print("modify_srq.max_wr40.query", &q);
		}
		out("destroy_srq.%s=%s", asks[i].name, RET(ibv_destroy_srq(s)));
	}
}

static void print_cap(const char *p, struct ibv_qp_cap *c)
{
	out("%s.max_send_wr=%u", p, c->max_send_wr);
	out("%s.max_recv_wr=%u", p, c->max_recv_wr);
	out("%s.max_send_sge=%u", p, c->max_send_sge);
	out("%s.max_recv_sge=%u", p, c->max_recv_sge);
	out("%s.max_inline_data=%u", p, c->max_inline_data);
}

static const char *qpt_name(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC ? "rc" : t == IBV_QPT_UC ? "uc" : t == IBV_QPT_UD ? "ud" : "other";
}

static void qp_sizes(struct ibv_cq *cq)
{
	enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct { uint32_t s, r, ss, rs, inl; const char *name; } asks[] = {
		{ 1, 1, 1, 1, 0, "1_1_1_1_0" },
		{ 10, 10, 3, 3, 100, "10_10_3_3_100" },
		{ 100, 50, 5, 2, 256, "100_50_5_2_256" },
		{ 16, 16, 1, 1, 64, "16_16_1_1_64" },
		{ 4, 4, 1, 1, 1000, "4_4_1_1_1000" },
		{ 0, 0, 0, 0, 0, "0_0_0_0_0" },
		{ max_wr_cap, max_wr_cap, max_sge_cap, max_sge_cap, 0, "max" },
		{ max_wr_cap + 1, 1, 1, 1, 0, "max_send_wr+1" },
		{ 1, max_wr_cap + 1, 1, 1, 0, "max_recv_wr+1" },
		{ 1, 1, max_sge_cap + 1, 1, 0, "max_send_sge+1" },
		{ 1, 1, 1, max_sge_cap + 1, 0, "max_recv_sge+1" },
		{ 1, 1, 1, 1, 65536, "inline_64k" },
	};
	for (unsigned t = 0; t < 3; t++)
		for (unsigned i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
			char p[96];
			snprintf(p, sizeof(p), "create_qp.%s.%s", qpt_name(types[t]), asks[i].name);
			struct ibv_qp_init_attr ia = {
				.send_cq = cq, .recv_cq = cq, .qp_type = types[t],
				.cap = { asks[i].s, asks[i].r, asks[i].ss, asks[i].rs, asks[i].inl },
			};
			errno = 0;
			struct ibv_qp *qp = ibv_create_qp(pd, &ia);
			if (!qp) {
				out("%s=%s", p, nullerr(errno));
				continue;
			}
			print_cap(p, &ia.cap);
			struct ibv_qp_attr a;
			struct ibv_qp_init_attr qi;
			memset(&a, POISON, sizeof(a));
			memset(&qi, POISON, sizeof(qi));
			ibv_query_qp(qp, &a, IBV_QP_CAP, &qi);
			char q[112];
			snprintf(q, sizeof(q), "%s.query_attr", p);
			print_cap(q, &a.cap);
			snprintf(q, sizeof(q), "%s.query_init_attr", p);
			print_cap(q, &qi.cap);
			ibv_destroy_qp(qp);
		}
}

/* ---- QPs through their states -------------------------------------------- */

/* sgid_index: "asked" where the address was set by the program, the
 * number elsewhere (an unset address says 0 on both, whatever was asked). */
static int av_set;

static void print_ah(const char *p, struct ibv_ah_attr *a)
{
	out("%s.dlid=%u", p, a->dlid);
	out("%s.sl=%u", p, a->sl);
	out("%s.src_path_bits=%u", p, a->src_path_bits);
	out("%s.static_rate=%u", p, a->static_rate);
	out("%s.is_global=%u", p, a->is_global);
	out("%s.port_num=%u", p, a->port_num);
	out("%s.grh.dgid=%s", p, gid_kind(&a->grh.dgid));
	out("%s.grh.flow_label=%#x", p, a->grh.flow_label);
	out("%s.grh.sgid_index=%s", p, av_set && a->grh.sgid_index == gidx ? "asked" :
	    ({ char *s = scratch(); snprintf(s, 256, "%u", a->grh.sgid_index); s; }));
	out("%s.grh.hop_limit=%u", p, a->grh.hop_limit);
	out("%s.grh.traffic_class=%#x", p, a->grh.traffic_class);
}

/* ibv_query_qp with every attribute; `av`: the primary address was set. */
static void query_qp(const char *p, struct ibv_qp *qp, int av)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	memset(&a, POISON, sizeof(a));
	memset(&ia, POISON, sizeof(ia));
	char k[128];
	out("%s=%s", p, RET(ibv_query_qp(qp, &a, 0x3fffff, &ia)));
	out("%s.qp_state=%s", p, qp_state(a.qp_state));
	out("%s.cur_qp_state=%s", p, qp_state(a.cur_qp_state));
	out("%s.path_mtu=%d", p, a.path_mtu);
	out("%s.path_mig_state=%d", p, a.path_mig_state);
	out("%s.qkey=%#x", p, a.qkey);
	out("%s.rq_psn=%#x", p, a.rq_psn);
	out("%s.sq_psn=%#x", p, a.sq_psn);
	out("%s.dest_qp_num=%s", p, QPN(a.dest_qp_num));
	out("%s.qp_access_flags=%s", p, flags(a.qp_access_flags, access_names));
	snprintf(k, sizeof(k), "%s.cap", p);
	print_cap(k, &a.cap);
	snprintf(k, sizeof(k), "%s.ah_attr", p);
	av_set = av;
	print_ah(k, &a.ah_attr);
	av_set = 0;
	snprintf(k, sizeof(k), "%s.alt_ah_attr", p);
	print_ah(k, &a.alt_ah_attr);
	out("%s.pkey_index=%u", p, a.pkey_index);
	out("%s.alt_pkey_index=%u", p, a.alt_pkey_index);
	out("%s.en_sqd_async_notify=%u", p, a.en_sqd_async_notify);
	out("%s.sq_draining=%u", p, a.sq_draining);
	out("%s.max_rd_atomic=%u", p, a.max_rd_atomic);
	out("%s.max_dest_rd_atomic=%u", p, a.max_dest_rd_atomic);
	out("%s.min_rnr_timer=%u", p, a.min_rnr_timer);
	out("%s.port_num=%u", p, a.port_num);
	out("%s.timeout=%u", p, a.timeout);
	out("%s.retry_cnt=%u", p, a.retry_cnt);
	out("%s.rnr_retry=%u", p, a.rnr_retry);
	out("%s.alt_port_num=%u", p, a.alt_port_num);
	out("%s.alt_timeout=%u", p, a.alt_timeout);
	out("%s.rate_limit=%u", p, a.rate_limit);
	out("%s.init.qp_type=%s", p, qpt_name(ia.qp_type));
	out("%s.init.sq_sig_all=%d", p, ia.sq_sig_all);
	out("%s.init.send_cq=%s", p, ia.send_cq == qp->send_cq ? "qp's" : "other");
	out("%s.init.recv_cq=%s", p, ia.recv_cq == qp->recv_cq ? "qp's" : "other");
	out("%s.init.srq=%s", p, ia.srq == qp->srq ? "qp's" : "other");
	out("%s.init.qp_context=%s", p, ia.qp_context == qp->qp_context ? "qp's" : "other");
	snprintf(k, sizeof(k), "%s.init.cap", p);
	print_cap(k, &ia.cap);
	out("%s.struct_state=%s", p, qp_state(qp->state));
}

struct side {
	struct ibv_cq *cq;       /* send and receive CQ */
	struct ibv_cq_ex *cqx;   /* when made with ibv_create_cq_ex */
	uint64_t wc_flags;       /* the cq_ex's: only these may be read */
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

static void make_side(struct side *s, enum ibv_qp_type t, int ex, const char *name,
		      uint32_t max_inline)
{
	memset(s, 0, sizeof(*s));
	if (ex) {
		struct ibv_cq_init_attr_ex ca = { .cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS };
		s->cqx = ibv_create_cq_ex(ctx, &ca);
		if (!s->cqx) {
			out("%s.create_cq_ex=%s", name, nullerr(errno));
			ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
				      IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP;
			s->cqx = ibv_create_cq_ex(ctx, &ca);
		}
		if (!s->cqx)
			DIE("ibv_create_cq_ex failed: %m");
		s->wc_flags = ca.wc_flags;
		s->cq = ibv_cq_ex_to_cq(s->cqx);
	} else {
		s->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	}
	if (!s->cq)
		DIE("ibv_create_cq failed: %m");
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = t,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2,
			 .max_inline_data = max_inline },
	};
	s->qp = ibv_create_qp(pd, &ia);
	if (!s->qp)
		DIE("ibv_create_qp %s failed: %m", name);
	name_qpn(s->qp->qp_num, name);
	s->buf = aligned_alloc(4096, BUF);
	memset(s->buf, 0, BUF);
	s->mr = ibv_reg_mr(pd, s->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!s->mr)
		DIE("ibv_reg_mr failed: %m");
}

/* Tears a side down; a destroy that fails is printed (it should not). */
static void free_side(struct side *s)
{
	const char *name = "?";
	for (int i = nqpns - 1; i >= 0; i--)
		if (qpns[i].v == s->qp->qp_num)
			name = qpns[i].name;
	int r;
	if ((r = ibv_destroy_qp(s->qp)))
		out("teardown.%s.destroy_qp=%s", name, ret(r, errno));
	if ((r = ibv_destroy_cq(s->cq)))
		out("teardown.%s.destroy_cq=%s", name, ret(r, errno));
	if ((r = ibv_dereg_mr(s->mr)))
		out("teardown.%s.dereg_mr=%s", name, ret(r, errno));
	free(s->buf);
}

static struct ibv_ah_attr self_ah(void)
{
	return (struct ibv_ah_attr){ .is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 64 } };
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0,
		.qkey = QKEY, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						 IBV_ACCESS_REMOTE_ATOMIC };
	int m = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	m |= qp->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	return ibv_modify_qp(qp, &a, m);
}

static int to_rtr(struct ibv_qp *qp, uint32_t dest, uint8_t rnr_timer)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
		.dest_qp_num = dest, .rq_psn = 0x654321, .max_dest_rd_atomic = 4,
		.min_rnr_timer = rnr_timer, .ah_attr = self_ah() };
	int m = IBV_QP_STATE;
	if (qp->qp_type != IBV_QPT_UD)
		m |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (qp->qp_type == IBV_QPT_RC)
		m |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	return ibv_modify_qp(qp, &a, m);
}

static int to_rts(struct ibv_qp *qp, uint8_t retry, uint8_t rnr_retry)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .sq_psn = 0x654321, .timeout = 14,
		.retry_cnt = retry, .rnr_retry = rnr_retry, .max_rd_atomic = 4 };
	int m = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC)
		m |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	return ibv_modify_qp(qp, &a, m);
}

static void connect_pair(struct side *a, struct side *b, uint8_t rnr_retry)
{
	if (to_init(a->qp) || to_init(b->qp) || to_rtr(a->qp, b->qp->qp_num, 1) ||
	    to_rtr(b->qp, a->qp->qp_num, 1) || to_rts(a->qp, 7, rnr_retry) || to_rts(b->qp, 7, rnr_retry))
		DIE("connecting QPs failed: %m");
}

/* Every state of one QP of each type, queried after each transition. */
static void qp_states(void)
{
	enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	for (int t = 0; t < 3; t++) {
		struct side a, b;
		char na[16], nb[16], p[64];
		snprintf(na, sizeof(na), "%s_a", qpt_name(types[t]));
		snprintf(nb, sizeof(nb), "%s_b", qpt_name(types[t]));
		make_side(&a, types[t], 0, strdup(na), 64);
		make_side(&b, types[t], 0, strdup(nb), 64);
		const char *n = qpt_name(types[t]);
		out("qp.%s.qp_num=%s", n, a.qp->qp_num && a.qp->qp_num < (1u << 24) ? "24-bit nonzero" : "bad");
		out("qp.%s.qp_num_differ=%s", n, a.qp->qp_num != b.qp->qp_num ? "yes" : "no");
		out("qp.%s.handle_differ=%s", n, a.qp->handle != b.qp->handle ? "yes" : "no");
		out("qp.%s.events_completed=%u", n, a.qp->events_completed);
		snprintf(p, sizeof(p), "query_qp.%s.reset", n);
		query_qp(p, a.qp, 0);
		snprintf(p, sizeof(p), "modify_qp.%s.init", n);
		out("%s=%s", p, RET(to_init(a.qp)));
		to_init(b.qp);
		snprintf(p, sizeof(p), "query_qp.%s.init", n);
		query_qp(p, a.qp, 0);
		snprintf(p, sizeof(p), "modify_qp.%s.rtr", n);
		out("%s=%s", p, RET(to_rtr(a.qp, b.qp->qp_num, 12)));
		to_rtr(b.qp, a.qp->qp_num, 12);
		snprintf(p, sizeof(p), "query_qp.%s.rtr", n);
		query_qp(p, a.qp, types[t] != IBV_QPT_UD);
		snprintf(p, sizeof(p), "modify_qp.%s.rts", n);
		out("%s=%s", p, RET(to_rts(a.qp, 7, 7)));
		snprintf(p, sizeof(p), "query_qp.%s.rts", n);
		query_qp(p, a.qp, types[t] != IBV_QPT_UD);
		struct ibv_qp_attr e = { .qp_state = IBV_QPS_SQD };
		snprintf(p, sizeof(p), "modify_qp.%s.sqd", n);
		out("%s=%s", p, RET(ibv_modify_qp(a.qp, &e, IBV_QP_STATE)));
		e.qp_state = IBV_QPS_ERR;
		snprintf(p, sizeof(p), "modify_qp.%s.err", n);
		out("%s=%s", p, RET(ibv_modify_qp(a.qp, &e, IBV_QP_STATE)));
		snprintf(p, sizeof(p), "query_qp.%s.err", n);
		query_qp(p, a.qp, types[t] != IBV_QPT_UD);
		e.qp_state = IBV_QPS_RESET;
		snprintf(p, sizeof(p), "modify_qp.%s.err_to_reset", n);
		out("%s=%s", p, RET(ibv_modify_qp(a.qp, &e, IBV_QP_STATE)));
		snprintf(p, sizeof(p), "query_qp.%s.reset_again", n);
		/* RESET keeps the attributes, the address included. */
		query_qp(p, a.qp, types[t] != IBV_QPT_UD);
		free_side(&a);
		free_side(&b);
	}
}

/* ---- completions ---------------------------------------------------------- */

/* ibv_cq_ex has no pkey_index: not printed for it. */
static int printing_ex;

static void print_wc(const char *p, const struct ibv_wc *w)
{
	out("%s.wr_id=%#llx", p, (unsigned long long)w->wr_id);
	out("%s.status=%s", p, ibv_wc_status_str(w->status));
	out("%s.vendor_err=%#x", p, w->vendor_err);
	/* Only these are defined when the status is an error (ibv_poll_cq(3)). */
	if (w->status != IBV_WC_SUCCESS) {
		out("%s.qp_num=%s", p, QPN(w->qp_num));
		return;
	}
	out("%s.opcode=%s", p, wc_opcode(w->opcode));
	out("%s.byte_len=%u", p, w->byte_len);
	out("%s.imm_data=%#x", p, be32toh(w->imm_data));
	out("%s.qp_num=%s", p, QPN(w->qp_num));
	out("%s.src_qp=%s", p, QPN(w->src_qp));
	out("%s.wc_flags=%s", p, flags(w->wc_flags, wc_flag_names));
	if (!printing_ex)
		out("%s.pkey_index=%u", p, w->pkey_index);
	out("%s.slid=%u", p, w->slid);
	out("%s.sl=%u", p, w->sl);
	out("%s.dlid_path_bits=%u", p, w->dlid_path_bits);
}

/* The next completion of cq (5 s at most); status -1 if none. */
static struct ibv_wc next_wc(struct side *s)
{
	struct ibv_wc w;
	memset(&w, POISON, sizeof(w));
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (s->cqx) {
			struct ibv_poll_cq_attr pa = {};
			int r = ibv_start_poll(s->cqx, &pa);
			if (r == 0) {
				struct ibv_cq_ex *c = s->cqx;
				uint64_t f = s->wc_flags;
				w.wr_id = c->wr_id;
				w.status = c->status;
				w.opcode = ibv_wc_read_opcode(c);
				w.vendor_err = ibv_wc_read_vendor_err(c);
				w.wc_flags = (unsigned)ibv_wc_read_wc_flags(c);
				if (f & IBV_WC_EX_WITH_BYTE_LEN)
					w.byte_len = ibv_wc_read_byte_len(c);
				if (f & IBV_WC_EX_WITH_IMM)
					w.imm_data = ibv_wc_read_imm_data(c);
				if (f & IBV_WC_EX_WITH_QP_NUM)
					w.qp_num = ibv_wc_read_qp_num(c);
				if (f & IBV_WC_EX_WITH_SRC_QP)
					w.src_qp = ibv_wc_read_src_qp(c);
				if (f & IBV_WC_EX_WITH_SLID)
					w.slid = ibv_wc_read_slid(c);
				if (f & IBV_WC_EX_WITH_SL)
					w.sl = ibv_wc_read_sl(c);
				if (f & IBV_WC_EX_WITH_DLID_PATH_BITS)
					w.dlid_path_bits = ibv_wc_read_dlid_path_bits(c);
				ibv_end_poll(c);
				return w;
			}
			if (r != ENOENT) {
				out("start_poll=%s", ename(r));
				break;
			}
		} else {
			int r = ibv_poll_cq(s->cq, 1, &w);
			if (r == 1)
				return w;
			if (r < 0) {
				out("poll_cq=%d", r);
				break;
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > 5000)
			break;
	}
	memset(&w, 0, sizeof(w));
	w.status = (enum ibv_wc_status)-1;
	return w;
}

static void expect_wc(const char *p, struct side *s)
{
	struct ibv_wc w = next_wc(s);
	if ((int)w.status == -1)
		out("%s=none", p);
	else
		print_wc(p, &w);
}

/* After a short wait, how many completions more are there (should be none). */
static void no_more(const char *p, struct side *s)
{
	usleep(50000);
	struct ibv_wc w[8];
	int n = 0;
	if (s->cqx) {
		struct ibv_poll_cq_attr pa = {};
		if (ibv_start_poll(s->cqx, &pa) == 0) {
			n = 1;
			while (ibv_next_poll(s->cqx) == 0)
				n++;
			ibv_end_poll(s->cqx);
		}
	} else {
		n = ibv_poll_cq(s->cq, 8, w);
	}
	out("%s.extra_completions=%d", p, n);
}

static int post_recv(struct side *s, uint32_t off, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)s->buf + off, len, s->mr->lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
	return ibv_post_recv(s->qp, &w, &bad);
}

static int post(struct side *s, enum ibv_wr_opcode op, uint32_t off, uint32_t len, uint64_t id,
		struct side *peer, uint32_t roff, int flags_)
{
	struct ibv_sge sge = { (uintptr_t)s->buf + off, len, s->mr->lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &sge, .num_sge = len ? 1 : 0,
		.opcode = op, .send_flags = flags_, .imm_data = htobe32(0x1234abcd) }, *bad = NULL;
	if (peer) {
		w.wr.rdma.remote_addr = (uintptr_t)peer->buf + roff;
		w.wr.rdma.rkey = peer->mr->rkey;
		if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
			w.wr.atomic.remote_addr = (uintptr_t)peer->buf + roff;
			w.wr.atomic.rkey = peer->mr->rkey;
			w.wr.atomic.compare_add = op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 5 : 0x1111;
			w.wr.atomic.swap = 0x2222;
		}
	}
	return ibv_post_send(s->qp, &w, &bad);
}

/* RC operations between two QPs of this device, both sides' completions. */
static void rc_ops(int ex)
{
	struct side a, b;
	const char *pre = ex ? "wcx" : "wc";
	printing_ex = ex;
	make_side(&a, IBV_QPT_RC, ex, ex ? "rcx_a" : "rc_a", 64);
	make_side(&b, IBV_QPT_RC, ex, ex ? "rcx_b" : "rc_b", 64);
	connect_pair(&a, &b, 7);
	char p[64];
	for (int i = 0; i < 4096; i++)
		a.buf[i] = (char)(i * 13 + 1);

	snprintf(p, sizeof(p), "%s.rc.send", pre);
	post_recv(&b, 0, 4096, 0xb1);
	out("%s.post=%s", p, RET(post(&a, IBV_WR_SEND, 0, 100, 0xa1, NULL, 0, IBV_SEND_SIGNALED)));
	snprintf(p, sizeof(p), "%s.rc.send.requester", pre);
	expect_wc(p, &a);
	snprintf(p, sizeof(p), "%s.rc.send.responder", pre);
	expect_wc(p, &b);
	out("%s.rc.send.data=%s", pre, memcmp(a.buf, b.buf, 100) ? "differ" : "equal");

	snprintf(p, sizeof(p), "%s.rc.send_imm", pre);
	post_recv(&b, 0, 4096, 0xb2);
	out("%s.post=%s", p, RET(post(&a, IBV_WR_SEND_WITH_IMM, 0, 200, 0xa2, NULL, 0, IBV_SEND_SIGNALED)));
	snprintf(p, sizeof(p), "%s.rc.send_imm.requester", pre);
	expect_wc(p, &a);
	snprintf(p, sizeof(p), "%s.rc.send_imm.responder", pre);
	expect_wc(p, &b);

	snprintf(p, sizeof(p), "%s.rc.send_inline", pre);
	post_recv(&b, 0, 4096, 0xb3);
	out("%s.post=%s", p, RET(post(&a, IBV_WR_SEND, 0, 64, 0xa3, NULL, 0,
				      IBV_SEND_SIGNALED | IBV_SEND_INLINE)));
	snprintf(p, sizeof(p), "%s.rc.send_inline.requester", pre);
	expect_wc(p, &a);
	snprintf(p, sizeof(p), "%s.rc.send_inline.responder", pre);
	expect_wc(p, &b);

	snprintf(p, sizeof(p), "%s.rc.send_zero_length", pre);
	post_recv(&b, 0, 4096, 0xb4);
	out("%s.post=%s", p, RET(post(&a, IBV_WR_SEND, 0, 0, 0xa4, NULL, 0, IBV_SEND_SIGNALED)));
	snprintf(p, sizeof(p), "%s.rc.send_zero_length.requester", pre);
	expect_wc(p, &a);
	snprintf(p, sizeof(p), "%s.rc.send_zero_length.responder", pre);
	expect_wc(p, &b);

	snprintf(p, sizeof(p), "%s.rc.send_unsignaled", pre);
	post_recv(&b, 0, 4096, 0xb5);
	out("%s.post=%s", p, RET(post(&a, IBV_WR_SEND, 0, 8, 0xa5, NULL, 0, 0)));
	snprintf(p, sizeof(p), "%s.rc.send_unsignaled.responder", pre);
	expect_wc(p, &b);
	snprintf(p, sizeof(p), "%s.rc.send_unsignaled.requester", pre);
	no_more(p, &a);

	snprintf(p, sizeof(p), "%s.rc.write", pre);
	out("%s.post=%s", p, RET(post(&a, IBV_WR_RDMA_WRITE, 0, 300, 0xa6, &b, 1024, IBV_SEND_SIGNALED)));
	snprintf(p, sizeof(p), "%s.rc.write.requester", pre);
	expect_wc(p, &a);
	out("%s.rc.write.data=%s", pre, memcmp(a.buf, b.buf + 1024, 300) ? "differ" : "equal");
	snprintf(p, sizeof(p), "%s.rc.write.responder", pre);
	no_more(p, &b);

	snprintf(p, sizeof(p), "%s.rc.write_imm", pre);
	post_recv(&b, 0, 16, 0xb7);
	out("%s.post=%s", p, RET(post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 400, 0xa7, &b, 2048,
				      IBV_SEND_SIGNALED)));
	snprintf(p, sizeof(p), "%s.rc.write_imm.requester", pre);
	expect_wc(p, &a);
	snprintf(p, sizeof(p), "%s.rc.write_imm.responder", pre);
	expect_wc(p, &b);

	snprintf(p, sizeof(p), "%s.rc.write_imm_zero_length", pre);
	post_recv(&b, 0, 16, 0xb8);
	out("%s.post=%s", p, RET(post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 0, 0xa8, &b, 2048,
				      IBV_SEND_SIGNALED)));
	snprintf(p, sizeof(p), "%s.rc.write_imm_zero_length.requester", pre);
	expect_wc(p, &a);
	snprintf(p, sizeof(p), "%s.rc.write_imm_zero_length.responder", pre);
	expect_wc(p, &b);

	snprintf(p, sizeof(p), "%s.rc.read", pre);
	out("%s.post=%s", p, RET(post(&a, IBV_WR_RDMA_READ, 8192, 500, 0xa9, &b, 1024, IBV_SEND_SIGNALED)));
	snprintf(p, sizeof(p), "%s.rc.read.requester", pre);
	expect_wc(p, &a);
	out("%s.rc.read.data=%s", pre, memcmp(a.buf + 8192, b.buf + 1024, 300) ? "differ" : "equal");

	uint64_t *target = (uint64_t *)(b.buf + 16384);
	*target = 0x1111;
	snprintf(p, sizeof(p), "%s.rc.fetch_add", pre);
	out("%s.post=%s", p, RET(post(&a, IBV_WR_ATOMIC_FETCH_AND_ADD, 12288, 8, 0xaa, &b, 16384,
				      IBV_SEND_SIGNALED)));
	snprintf(p, sizeof(p), "%s.rc.fetch_add.requester", pre);
	expect_wc(p, &a);
	out("%s.rc.fetch_add.old=%#llx", pre, (unsigned long long)*(uint64_t *)(a.buf + 12288));
	out("%s.rc.fetch_add.new=%#llx", pre, (unsigned long long)*target);

	snprintf(p, sizeof(p), "%s.rc.cmp_swap", pre);
	*target = 0x1111;
	out("%s.post=%s", p, RET(post(&a, IBV_WR_ATOMIC_CMP_AND_SWP, 12296, 8, 0xab, &b, 16384,
				      IBV_SEND_SIGNALED)));
	snprintf(p, sizeof(p), "%s.rc.cmp_swap.requester", pre);
	expect_wc(p, &a);
	out("%s.rc.cmp_swap.old=%#llx", pre, (unsigned long long)*(uint64_t *)(a.buf + 12296));
	out("%s.rc.cmp_swap.new=%#llx", pre, (unsigned long long)*target);
	snprintf(p, sizeof(p), "%s.rc.responder", pre);
	no_more(p, &b);
	free_side(&a);
	free_side(&b);
	printing_ex = 0;
}

/* UC: a SEND and a WRITE_WITH_IMM, both sides' completions. */
static void uc_ops(void)
{
	struct side a, b;
	make_side(&a, IBV_QPT_UC, 0, "ucw_a", 64);
	make_side(&b, IBV_QPT_UC, 0, "ucw_b", 64);
	connect_pair(&a, &b, 7);
	post_recv(&b, 0, 4096, 0xb1);
	out("wc.uc.send.post=%s", RET(post(&a, IBV_WR_SEND, 0, 100, 0xa1, NULL, 0, IBV_SEND_SIGNALED)));
	expect_wc("wc.uc.send.requester", &a);
	expect_wc("wc.uc.send.responder", &b);
	post_recv(&b, 0, 16, 0xb2);
	out("wc.uc.write_imm.post=%s", RET(post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 300, 0xa2, &b, 1024,
						IBV_SEND_SIGNALED)));
	expect_wc("wc.uc.write_imm.requester", &a);
	expect_wc("wc.uc.write_imm.responder", &b);
	out("wc.uc.write_imm.data=%s", memcmp(a.buf, b.buf + 1024, 300) ? "differ" : "equal");
	free_side(&a);
	free_side(&b);
}

static int ipv4_csum_ok(const uint8_t *h)
{
	uint32_t s = 0;
	for (int i = 0; i < 20; i += 2)
		s += (uint32_t)h[i] << 8 | h[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return s == 0xffff;
}

/* UD send/receive through an AH with a GRH; the 40-byte GRH area. */
static void ud_ops(int ex)
{
	struct side a, b;
	const char *pre = ex ? "wcx" : "wc";
	printing_ex = ex;
	make_side(&a, IBV_QPT_UD, ex, ex ? "udx_a" : "ud_a", 64);
	make_side(&b, IBV_QPT_UD, ex, ex ? "udx_b" : "ud_b", 64);
	if (to_init(a.qp) || to_init(b.qp) || to_rtr(a.qp, 0, 0) || to_rtr(b.qp, 0, 0) ||
	    to_rts(a.qp, 0, 0) || to_rts(b.qp, 0, 0))
		DIE("UD QPs to RTS failed: %m");
	struct ibv_ah_attr aa = self_ah();
	aa.grh.traffic_class = 0x48;
	aa.grh.flow_label = 0x12345;
	aa.sl = 3;
	errno = 0;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	char p[64];
	snprintf(p, sizeof(p), "%s.ud.create_ah", pre);
	out("%s=%s", p, ah ? "ok" : nullerr(errno));
	if (!ah)
		goto done;
	for (int i = 0; i < 256; i++)
		a.buf[i] = (char)(i + 7);
	memset(b.buf, POISON, 4096);
	for (int with_imm = 0; with_imm < 2; with_imm++) {
		const char *k = with_imm ? "send_imm" : "send";
		post_recv(&b, 0, GRH + 256, 0xb1);
		struct ibv_sge sge = { (uintptr_t)a.buf, 100, a.mr->lkey };
		struct ibv_send_wr w = { .wr_id = 0xa1, .sg_list = &sge, .num_sge = 1,
			.opcode = with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(0xfeed) }, *bad;
		w.wr.ud.ah = ah;
		w.wr.ud.remote_qpn = b.qp->qp_num;
		w.wr.ud.remote_qkey = QKEY;
		snprintf(p, sizeof(p), "%s.ud.%s.post", pre, k);
		out("%s=%s", p, RET(ibv_post_send(a.qp, &w, &bad)));
		snprintf(p, sizeof(p), "%s.ud.%s.requester", pre, k);
		expect_wc(p, &a);
		snprintf(p, sizeof(p), "%s.ud.%s.responder", pre, k);
		struct ibv_wc rw = next_wc(&b);
		if ((int)rw.status == -1) {
			out("%s=none", p);
			continue;
		}
		print_wc(p, &rw);
		if (with_imm)
			continue;
		out("%s.ud.payload=%s", pre, memcmp(b.buf + GRH, a.buf, 100) ? "differ" : "equal");
		uint8_t *g = (uint8_t *)b.buf, *ip = g + 20;
		char *z = scratch();
		for (int i = 0; i < 20; i++)
			sprintf(z + 2 * i, "%02x", g[i]);
		out("%s.ud.grh.first20=%s", pre, z);
		out("%s.ud.grh.ip.version_ihl=%#x", pre, ip[0]);
		out("%s.ud.grh.ip.tos=%#x", pre, ip[1]);
		out("%s.ud.grh.ip.total_length=%u", pre, ip[2] << 8 | ip[3]);
		out("%s.ud.grh.ip.frag=%#x", pre, ip[6] << 8 | ip[7]);
		out("%s.ud.grh.ip.ttl=%u", pre, ip[8]);
		out("%s.ud.grh.ip.protocol=%u", pre, ip[9]);
		out("%s.ud.grh.ip.checksum=%s", pre, ipv4_csum_ok(ip) ? "valid" : "invalid");
		out("%s.ud.grh.ip.src=%s", pre, memcmp(ip + 12, gid.raw + 12, 4) ? "other" : "self");
		out("%s.ud.grh.ip.dst=%s", pre, memcmp(ip + 16, gid.raw + 12, 4) ? "other" : "self");
		if (!ex) {
			struct ibv_ah_attr from;
			memset(&from, POISON, sizeof(from));
			snprintf(p, sizeof(p), "%s.ud.init_ah_from_wc", pre);
			out("%s=%s", p, RET(ibv_init_ah_from_wc(ctx, 1, &rw, (struct ibv_grh *)g, &from)));
			av_set = 1;
			print_ah(p, &from);
			av_set = 0;
		}
	}
	/* A receive buffer without room for the GRH: a local length error. */
	snprintf(p, sizeof(p), "%s.ud.short_recv", pre);
	post_recv(&b, 0, 64, 0xb2);
	struct ibv_sge sge = { (uintptr_t)a.buf, 100, a.mr->lkey };
	struct ibv_send_wr w = { .wr_id = 0xa2, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = b.qp->qp_num;
	w.wr.ud.remote_qkey = QKEY;
	out("%s.post=%s", p, RET(ibv_post_send(a.qp, &w, &bad)));
	snprintf(p, sizeof(p), "%s.ud.short_recv.requester", pre);
	expect_wc(p, &a);
	snprintf(p, sizeof(p), "%s.ud.short_recv.responder", pre);
	expect_wc(p, &b);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ibv_query_qp(b.qp, &qa, IBV_QP_STATE, &qi);
	out("%s.ud.short_recv.after.state=%s", pre, qp_state(qa.qp_state));
	ibv_destroy_ah(ah);
done:
	free_side(&a);
	free_side(&b);
	printing_ex = 0;
}

/* ---- error completions ----------------------------------------------------- */

static void error_case(const char *name)
{
	struct side a, b;
	char p[96];
	char na[32], nb[32];
	snprintf(na, sizeof(na), "%s_a", name);
	snprintf(nb, sizeof(nb), "%s_b", name);
	make_side(&a, IBV_QPT_RC, 0, strdup(na), 64);
	make_side(&b, IBV_QPT_RC, 0, strdup(nb), 64);
	int rnr = !strcmp(name, "rnr");
	connect_pair(&a, &b, rnr ? 0 : 7);
	if (!strcmp(name, "bad_rkey")) {
		struct ibv_mr *gone = ibv_reg_mr(pd, b.buf, 4096, IBV_ACCESS_LOCAL_WRITE |
						 IBV_ACCESS_REMOTE_WRITE);
		uint32_t rkey = gone->rkey;
		ibv_dereg_mr(gone);
		post_recv(&b, 0, 64, 0xb1);
		struct ibv_sge sge = { (uintptr_t)a.buf, 64, a.mr->lkey };
		struct ibv_send_wr w = { .wr_id = 0xa1, .sg_list = &sge, .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
		w.wr.rdma.remote_addr = (uintptr_t)b.buf;
		w.wr.rdma.rkey = rkey;
		out("err.bad_rkey.post=%s", RET(ibv_post_send(a.qp, &w, &bad)));
	} else if (!strcmp(name, "bad_lkey")) {
		struct ibv_sge sge = { (uintptr_t)a.buf, 64, a.mr->lkey ^ 0x5a5a00 };
		struct ibv_send_wr w = { .wr_id = 0xa1, .sg_list = &sge, .num_sge = 1,
			.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		post_recv(&b, 0, 64, 0xb1);
		out("err.bad_lkey.post=%s", RET(ibv_post_send(a.qp, &w, &bad)));
	} else if (!strcmp(name, "short_recv")) {
		post_recv(&b, 0, 8, 0xb1);
		out("err.short_recv.post=%s", RET(post(&a, IBV_WR_SEND, 0, 64, 0xa1, NULL, 0,
							 IBV_SEND_SIGNALED)));
	} else if (!strcmp(name, "rnr")) {
		out("err.rnr.post=%s", RET(post(&a, IBV_WR_SEND, 0, 64, 0xa1, NULL, 0, IBV_SEND_SIGNALED)));
	} else if (!strcmp(name, "misaligned_atomic")) {
		post_recv(&b, 0, 64, 0xb1);
		out("err.misaligned_atomic.post=%s", RET(post(&a, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, 0xa1,
							      &b, 4, IBV_SEND_SIGNALED)));
	} else if (!strcmp(name, "read_beyond_mr")) {
		post_recv(&b, 0, 64, 0xb1);
		out("err.read_beyond_mr.post=%s", RET(post(&a, IBV_WR_RDMA_READ, 0, 256, 0xa1, &b,
							    BUF - 128, IBV_SEND_SIGNALED)));
	}
	snprintf(p, sizeof(p), "err.%s.requester", name);
	expect_wc(p, &a);
	/* A WR posted after the error is flushed. */
	snprintf(p, sizeof(p), "err.%s.post_after", name);
	out("%s=%s", p, RET(post(&a, IBV_WR_SEND, 0, 8, 0xa2, NULL, 0, IBV_SEND_SIGNALED)));
	snprintf(p, sizeof(p), "err.%s.requester_after", name);
	expect_wc(p, &a);
	snprintf(p, sizeof(p), "err.%s.responder", name);
	if (rnr || !strcmp(name, "bad_lkey"))
		no_more(p, &b);
	else
		expect_wc(p, &b);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ibv_query_qp(a.qp, &qa, IBV_QP_STATE, &qi);
	out("err.%s.requester_state=%s", name, qp_state(qa.qp_state));
	ibv_query_qp(b.qp, &qa, IBV_QP_STATE, &qi);
	out("err.%s.responder_state=%s", name, qp_state(qa.qp_state));
	free_side(&a);
	free_side(&b);
}

/* ---- MRs --------------------------------------------------------------------- */

static void mrs(void)
{
	char *buf = aligned_alloc(4096, 3 * 4096);
	struct { int acc; const char *name; } asks[] = {
		{ 0, "none" }, { IBV_ACCESS_LOCAL_WRITE, "local_write" },
		{ IBV_ACCESS_REMOTE_READ, "remote_read" },
		{ IBV_ACCESS_REMOTE_WRITE, "remote_write_alone" },
		{ IBV_ACCESS_REMOTE_ATOMIC, "remote_atomic_alone" },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC, "all_remote" },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, "mw_bind" },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED, "zero_based" },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND, "on_demand" },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB, "hugetlb" },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING, "relaxed_ordering" },
		{ IBV_ACCESS_LOCAL_WRITE | (1 << 25), "unknown_bit25" },
	};
	uint32_t prev = 0;
	for (unsigned i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
		errno = 0;
		struct ibv_mr *mr = ibv_reg_mr(pd, buf + 100, 5000, asks[i].acc);
		if (!mr) {
			out("reg_mr.%s=%s", asks[i].name, nullerr(errno));
			continue;
		}
		out("reg_mr.%s=ok", asks[i].name);
		out("reg_mr.%s.lkey=%s", asks[i].name, zero_or_not(mr->lkey));
		out("reg_mr.%s.rkey=%s", asks[i].name, mr->rkey == mr->lkey ? "lkey" : zero_or_not(mr->rkey));
		out("reg_mr.%s.addr=%s", asks[i].name, mr->addr == buf + 100 ? "buf" : "other");
		out("reg_mr.%s.length=%zu", asks[i].name, mr->length);
		out("reg_mr.%s.pd=%s", asks[i].name, mr->pd == pd ? "pd" : "other");
		out("reg_mr.%s.context=%s", asks[i].name, mr->context == ctx ? "ctx" : "other");
		out("reg_mr.%s.lkey_differs_from_previous=%s", asks[i].name, mr->lkey != prev ? "yes" : "no");
		prev = mr->lkey;
		ibv_dereg_mr(mr);
	}
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE);
	out("reg_mr.length0=%s", mr ? "ok" : nullerr(errno));
	if (mr)
		ibv_dereg_mr(mr);
	errno = 0;
	mr = ibv_reg_mr(pd, NULL, 4096, IBV_ACCESS_LOCAL_WRITE);
	out("reg_mr.null_addr=%s", mr ? "ok" : nullerr(errno));
	if (mr)
		ibv_dereg_mr(mr);
	errno = 0;
	mr = ibv_reg_mr_iova(pd, buf, 4096, 0x100000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	out("reg_mr_iova=%s", mr ? "ok" : nullerr(errno));
	if (mr) {
		out("reg_mr_iova.addr=%s", mr->addr == buf ? "buf" : mr->addr == (void *)0x100000 ? "iova" : "other");
		ibv_dereg_mr(mr);
	}
	errno = 0;
	mr = ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 3, IBV_ACCESS_LOCAL_WRITE);
	out("reg_dmabuf_mr=%s", mr ? "ok" : nullerr(errno));
	if (mr)
		ibv_dereg_mr(mr);
	free(buf);
}

/* ---- misuse and unsupported verbs -------------------------------------------- */

/* One modify_qp attempt on a fresh RC QP brought to `pre` first: its
 * result and the state the QP is left in. */
static void try_modify(const char *name, enum ibv_qp_state pre, struct ibv_qp_attr *a, int mask)
{
	struct side s, peer;
	make_side(&s, IBV_QPT_RC, 0, "modify", 64);
	make_side(&peer, IBV_QPT_RC, 0, "modify_peer", 64);
	if (pre >= IBV_QPS_INIT)
		to_init(s.qp);
	if (pre >= IBV_QPS_RTR)
		to_rtr(s.qp, peer.qp->qp_num, 1);
	if (pre >= IBV_QPS_RTS)
		to_rts(s.qp, 7, 7);
	if (mask & IBV_QP_DEST_QPN)
		a->dest_qp_num = peer.qp->qp_num;
	out("misuse.modify_qp.%s=%s", name, RET(ibv_modify_qp(s.qp, a, mask)));
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	memset(&q, POISON, sizeof(q));
	ibv_query_qp(s.qp, &q, IBV_QP_STATE | IBV_QP_PATH_MTU, &qi);
	out("misuse.modify_qp.%s.state=%s", name, qp_state(q.qp_state));
	free_side(&s);
	free_side(&peer);
}

static void misuse_modify(void)
{
	struct ibv_port_attr port;
	ibv_query_port(ctx, 1, &port);
	const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	const int rts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	try_modify("reset_to_rtr", IBV_QPS_RESET, &a, IBV_QP_STATE);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS };
	try_modify("reset_to_rts", IBV_QPS_RESET, &a, IBV_QP_STATE);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT };
	try_modify("init_without_port", IBV_QPS_RESET, &a, IBV_QP_STATE);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 2 };
	try_modify("init_port2", IBV_QPS_RESET, &a, init);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = port.pkey_tbl_len };
	try_modify("init_pkey_index_beyond_table", IBV_QPS_RESET, &a, init);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1 };
	try_modify("init_qkey_on_rc", IBV_QPS_RESET, &a, init | IBV_QP_QKEY);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS };
	try_modify("init_to_rts", IBV_QPS_INIT, &a, IBV_QP_STATE);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	try_modify("rtr_state_only", IBV_QPS_INIT, &a, IBV_QP_STATE);
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
		.max_dest_rd_atomic = 4, .min_rnr_timer = 1, .ah_attr = self_ah() };
	a = r;
	try_modify("rtr_ok", IBV_QPS_INIT, &a, rtr);
	a = r;
	a.max_dest_rd_atomic = 200;
	try_modify("rtr_max_dest_rd_atomic200", IBV_QPS_INIT, &a, rtr);
	a = r;
	a.ah_attr.grh.sgid_index = port.gid_tbl_len - 1;
	try_modify("rtr_sgid_index_empty", IBV_QPS_INIT, &a, rtr);
	a = r;
	a.ah_attr.grh.sgid_index = port.gid_tbl_len;
	try_modify("rtr_sgid_index_beyond_table", IBV_QPS_INIT, &a, rtr);
	a = r;
	a.ah_attr.is_global = 0;
	try_modify("rtr_no_grh", IBV_QPS_INIT, &a, rtr);
	a = r;
	a.ah_attr.port_num = 2;
	try_modify("rtr_ah_port2", IBV_QPS_INIT, &a, rtr);
	a = r;
	a.path_mtu = 6;
	try_modify("rtr_path_mtu6", IBV_QPS_INIT, &a, rtr);
	a = r;
	a.path_mtu = IBV_MTU_4096;
	try_modify("rtr_path_mtu4096", IBV_QPS_INIT, &a, rtr);
	a = r;
	try_modify("rtr_without_path_mtu", IBV_QPS_INIT, &a, rtr & ~IBV_QP_PATH_MTU);
	struct ibv_qp_attr t = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
		.max_rd_atomic = 1 };
	a = t;
	try_modify("rts_ok", IBV_QPS_RTR, &a, rts);
	a = t;
	a.max_rd_atomic = 200;
	try_modify("rts_max_rd_atomic200", IBV_QPS_RTR, &a, rts);
	a = t;
	a.retry_cnt = 8;
	try_modify("rts_retry_cnt8", IBV_QPS_RTR, &a, rts);
	a = t;
	a.rnr_retry = 8;
	try_modify("rts_rnr_retry8", IBV_QPS_RTR, &a, rts);
	a = t;
	a.timeout = 32;
	try_modify("rts_timeout32", IBV_QPS_RTR, &a, rts);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .min_rnr_timer = 3 };
	try_modify("rts_to_rts_min_rnr_timer", IBV_QPS_RTS, &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .path_mtu = IBV_MTU_512 };
	try_modify("rts_to_rts_path_mtu", IBV_QPS_RTS, &a, IBV_QP_STATE | IBV_QP_PATH_MTU);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT };
	try_modify("rts_to_init", IBV_QPS_RTS, &a, IBV_QP_STATE);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RESET };
	try_modify("rts_to_reset", IBV_QPS_RTS, &a, IBV_QP_STATE);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_ERR };
	try_modify("reset_to_err", IBV_QPS_RESET, &a, IBV_QP_STATE);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .cur_qp_state = IBV_QPS_RTR };
	try_modify("cur_state_wrong", IBV_QPS_RTS, &a, IBV_QP_STATE | IBV_QP_CUR_STATE);
	a = (struct ibv_qp_attr){ .qp_state = 9 };
	try_modify("state9", IBV_QPS_INIT, &a, IBV_QP_STATE);
}

/* Posts that break the rules: on a QP not ready, above its reported caps,
 * with an unknown opcode. */
static void misuse_posts(void)
{
	struct side a, b;
	make_side(&a, IBV_QPT_RC, 0, "misuse_a", 64);
	make_side(&b, IBV_QPT_RC, 0, "misuse_b", 64);
	struct ibv_sge sge = { (uintptr_t)a.buf, 8, a.mr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *rbad = NULL;
	out("misuse.post_send.reset=%s", RET(ibv_post_send(a.qp, &w, &bad)));
	out("misuse.post_send.reset.bad_wr=%s", bad == &w ? "wr" : bad ? "other" : "null");
	out("misuse.post_recv.reset=%s", RET(ibv_post_recv(a.qp, &rw, &rbad)));
	out("misuse.post_recv.reset.bad_wr=%s", rbad == &rw ? "wr" : rbad ? "other" : "null");
	to_init(a.qp);
	bad = NULL;
	out("misuse.post_send.init=%s", RET(ibv_post_send(a.qp, &w, &bad)));
	out("misuse.post_recv.init=%s", RET(ibv_post_recv(a.qp, &rw, &rbad)));
	to_init(b.qp);
	to_rtr(a.qp, b.qp->qp_num, 1);
	to_rtr(b.qp, a.qp->qp_num, 1);
	bad = NULL;
	out("misuse.post_send.rtr=%s", RET(ibv_post_send(a.qp, &w, &bad)));
	to_rts(a.qp, 7, 7);
	to_rts(b.qp, 7, 7);
	/* Reported caps, and one more than them. */
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	ibv_query_qp(a.qp, &q, IBV_QP_CAP, &qi);
	struct ibv_sge many[64];
	for (int i = 0; i < 64; i++)
		many[i] = sge;
	struct ibv_send_wr m = w;
	m.sg_list = many;
	m.num_sge = q.cap.max_send_sge < 64 ? q.cap.max_send_sge + 1 : 64;
	bad = NULL;
	out("misuse.post_send.num_sge_cap_plus_1=%s", RET(ibv_post_send(a.qp, &m, &bad)));
	out("misuse.post_send.num_sge_cap_plus_1.bad_wr=%s", bad == &m ? "wr" : bad ? "other" : "null");
	struct ibv_recv_wr mr = rw;
	mr.sg_list = many;
	mr.num_sge = q.cap.max_recv_sge < 64 ? q.cap.max_recv_sge + 1 : 64;
	out("misuse.post_recv.num_sge_cap_plus_1=%s", RET(ibv_post_recv(a.qp, &mr, &rbad)));
	struct ibv_sge big = { (uintptr_t)a.buf, q.cap.max_inline_data + 1, a.mr->lkey };
	m = w;
	m.sg_list = &big;
	m.send_flags = IBV_SEND_INLINE;
	out("misuse.post_send.inline_cap_plus_1=%s", RET(ibv_post_send(a.qp, &m, &bad)));
	free_side(&a);
	free_side(&b);

	/* More WRs in one list than the queues hold: how many are taken. The
	 * peer has no receive posted, so the first SEND waits on RNR NAKs
	 * (retried for ever) and nothing completes. */
	make_side(&a, IBV_QPT_RC, 0, "list_a", 64);
	make_side(&b, IBV_QPT_RC, 0, "list_b", 64);
	connect_pair(&a, &b, 7);
	ibv_query_qp(a.qp, &q, IBV_QP_CAP, &qi);
	enum { N = 200 };
	static struct ibv_send_wr list[N];
	static struct ibv_recv_wr rlist[N];
	for (int i = 0; i < N; i++) {
		list[i] = w;
		list[i].wr_id = 1000 + i;
		list[i].send_flags = 0;
		list[i].next = i < N - 1 ? &list[i + 1] : NULL;
		rlist[i] = (struct ibv_recv_wr){ .wr_id = 2000 + i, .sg_list = &sge, .num_sge = 1,
						 .next = i < N - 1 ? &rlist[i + 1] : NULL };
	}
	bad = NULL;
	out("misuse.post_send.list_beyond_cap=%s", RET(ibv_post_send(a.qp, list, &bad)));
	out("misuse.post_send.list_beyond_cap.taken_minus_cap=%ld",
	    bad ? (long)(bad - list) - (long)q.cap.max_send_wr : -1L);
	/* a's receive queue: nothing is sent to a. */
	rbad = NULL;
	out("misuse.post_recv.list_beyond_cap=%s", RET(ibv_post_recv(a.qp, rlist, &rbad)));
	out("misuse.post_recv.list_beyond_cap.taken_minus_cap=%ld",
	    rbad ? (long)(rbad - rlist) - (long)q.cap.max_recv_wr : -1L);
	free_side(&a);
	free_side(&b);

	/* An unknown opcode, on a fresh pair: refused at the post or completed in error. */
	make_side(&a, IBV_QPT_RC, 0, "opcode_a", 64);
	make_side(&b, IBV_QPT_RC, 0, "opcode_b", 64);
	connect_pair(&a, &b, 7);
	post_recv(&b, 0, 64, 0xb1);
	m = w;
	m.opcode = 77;
	m.wr_id = 0xa7;
	bad = NULL;
	int r = ibv_post_send(a.qp, &m, &bad);
	out("misuse.post_send.bad_opcode=%s", ret(r, errno));
	out("misuse.post_send.bad_opcode.bad_wr=%s", bad == &m ? "wr" : bad ? "other" : "null");
	if (!r)
		expect_wc("misuse.post_send.bad_opcode.wc", &a);
	free_side(&a);
	free_side(&b);

	/* An SRQ's QP: its receive caps, and a post to its own RQ. */
	struct ibv_srq_init_attr si = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .srq = srq,
		.qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct ibv_qp *sq = srq && cq ? ibv_create_qp(pd, &ia) : NULL;
	if (sq) {
		name_qpn(sq->qp_num, "srq_qp");
		out("srq_qp.cap.max_recv_wr=%u", ia.cap.max_recv_wr);
		out("srq_qp.cap.max_recv_sge=%u", ia.cap.max_recv_sge);
		to_init(sq);
		rw.sg_list = &sge;
		rw.num_sge = 1;
		rw.next = NULL;
		out("misuse.post_recv.qp_with_srq=%s", RET(ibv_post_recv(sq, &rw, &rbad)));
		query_qp("query_qp.srq_qp.init", sq, 0);
		ibv_destroy_qp(sq);
	} else {
		out("srq_qp=%s", nullerr(errno));
	}
	if (srq)
		ibv_destroy_srq(srq);
	if (cq)
		ibv_destroy_cq(cq);
}

/* UD: RC-only opcodes, a message above the MTU, AHs that cannot be. */
static void misuse_ud(void)
{
	struct ibv_port_attr port;
	ibv_query_port(ctx, 1, &port);
	struct side u;
	make_side(&u, IBV_QPT_UD, 0, "misuse_ud", 64);
	to_init(u.qp);
	to_rtr(u.qp, 0, 0);
	to_rts(u.qp, 0, 0);
	struct ibv_ah_attr aa = self_ah();
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	struct ibv_sge us = { (uintptr_t)u.buf, 8, u.mr->lkey };
	struct ibv_send_wr uw = { .wr_id = 0xc1, .sg_list = &us, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
	uw.wr.ud.ah = ah;
	uw.wr.ud.remote_qpn = u.qp->qp_num;
	uw.wr.ud.remote_qkey = QKEY;
	int r = ibv_post_send(u.qp, &uw, &bad);
	out("misuse.post_send.ud_rdma_write=%s", ret(r, errno));
	if (!r)
		expect_wc("misuse.post_send.ud_rdma_write.wc", &u);
	/* Above any MTU, on a fresh QP (an error completion above leaves
	 * the first in ERR). */
	free_side(&u);
	make_side(&u, IBV_QPT_UD, 0, "misuse_ud2", 64);
	to_init(u.qp);
	to_rtr(u.qp, 0, 0);
	to_rts(u.qp, 0, 0);
	us = (struct ibv_sge){ (uintptr_t)u.buf, 8, u.mr->lkey };
	uw.wr.ud.remote_qpn = u.qp->qp_num;
	uw.opcode = IBV_WR_SEND;
	uw.wr_id = 0xc2;
	us.length = 8192;
	r = ibv_post_send(u.qp, &uw, &bad);
	out("misuse.post_send.ud_above_mtu=%s", ret(r, errno));
	if (!r)
		expect_wc("misuse.post_send.ud_above_mtu.wc", &u);
	if (ah)
		ibv_destroy_ah(ah);
	struct { const char *name; int global, sgid, port; } bad_ahs[] = {
		{ "no_grh", 0, gidx, 1 },
		{ "sgid_index_empty", 1, port.gid_tbl_len - 1, 1 },
		{ "sgid_index_beyond_table", 1, port.gid_tbl_len, 1 },
		{ "port2", 1, gidx, 2 },
		{ "port0", 1, gidx, 0 },
	};
	for (unsigned i = 0; i < sizeof(bad_ahs) / sizeof(bad_ahs[0]); i++) {
		aa = self_ah();
		aa.is_global = bad_ahs[i].global;
		aa.grh.sgid_index = bad_ahs[i].sgid;
		aa.port_num = bad_ahs[i].port;
		errno = 0;
		ah = ibv_create_ah(pd, &aa);
		out("misuse.create_ah.%s=%s", bad_ahs[i].name, ah ? "ok" : nullerr(errno));
		if (ah)
			ibv_destroy_ah(ah);
	}
	/* The GID of an IPv4 group, as librdmacm makes it: IPv4-mapped. */
	union ibv_gid mgid = { .raw = { [10] = 0xff, [11] = 0xff, 239, 1, 2, 3 } };
	out("attach_mcast.ud=%s", RET(ibv_attach_mcast(u.qp, &mgid, 0)));
	out("attach_mcast.ud_again=%s", RET(ibv_attach_mcast(u.qp, &mgid, 0)));
	out("detach_mcast.ud=%s", RET(ibv_detach_mcast(u.qp, &mgid, 0)));
	out("detach_mcast.ud_again=%s", RET(ibv_detach_mcast(u.qp, &mgid, 0)));
	union ibv_gid v6 = { .raw = { 0xff, 0x0e, [15] = 1 } };
	int r6 = ibv_attach_mcast(u.qp, &v6, 0);
	out("attach_mcast.ud_ipv6_group=%s", ret(r6, errno));
	if (!r6)
		ibv_detach_mcast(u.qp, &v6, 0);
	struct side c;
	make_side(&c, IBV_QPT_RC, 0, "mcast_rc", 64);
	out("attach_mcast.rc=%s", RET(ibv_attach_mcast(c.qp, &mgid, 0)));
	free_side(&c);
	free_side(&u);
}

static void unsupported(void)
{
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					 .fd = -1, .oflags = O_CREAT };
	errno = 0;
	struct ibv_xrcd *x = ibv_open_xrcd(ctx, &xa);
	out("open_xrcd=%s", x ? "ok" : nullerr(errno));
	if (x)
		ibv_close_xrcd(x);
	errno = 0;
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	out("alloc_mw.type1=%s", mw ? "ok" : nullerr(errno));
	if (mw)
		ibv_dealloc_mw(mw);
	errno = 0;
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	out("alloc_mw.type2=%s", mw ? "ok" : nullerr(errno));
	if (mw)
		ibv_dealloc_mw(mw);
	struct ibv_td_init_attr ta = {};
	errno = 0;
	struct ibv_td *td = ibv_alloc_td(ctx, &ta);
	out("alloc_td=%s", td ? "ok" : nullerr(errno));
	if (td)
		ibv_dealloc_td(td);
	struct ibv_parent_domain_init_attr pa = { .pd = pd };
	errno = 0;
	struct ibv_pd *par = ibv_alloc_parent_domain(ctx, &pa);
	out("alloc_parent_domain=%s", par ? "ok" : nullerr(errno));
	if (par)
		ibv_dealloc_pd(par);
	struct ibv_alloc_dm_attr da = { .length = 4096 };
	errno = 0;
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	out("alloc_dm=%s", dm ? "ok" : nullerr(errno));
	if (dm)
		ibv_free_dm(dm);
	struct ibv_counters_init_attr ca = {};
	errno = 0;
	struct ibv_counters *c = ibv_create_counters(ctx, &ca);
	out("create_counters=%s", c ? "ok" : nullerr(errno));
	if (c)
		ibv_destroy_counters(c);
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	out("query_rt_values_ex=%s", RET(ibv_query_rt_values_ex(ctx, &v)));
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_wq_init_attr wa = { .wq_type = IBV_WQT_RQ, .max_wr = 4, .max_sge = 1, .pd = pd,
				       .cq = cq };
	errno = 0;
	struct ibv_wq *wq = ibv_create_wq(ctx, &wa);
	out("create_wq=%s", wq ? "ok" : nullerr(errno));
	if (wq)
		ibv_destroy_wq(wq);
	out("resize_cq.32=%s", RET(ibv_resize_cq(cq, 32)));
	out("resize_cq.32.cqe=%d", cq->cqe);
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (qp) {
		struct ibv_ece ece;
		memset(&ece, 0, sizeof(ece));
		out("query_ece=%s", RET(ibv_query_ece(qp, &ece)));
		out("set_ece=%s", RET(ibv_set_ece(qp, &ece)));
		out("query_qp_data_in_order.write=%d",
		    ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0));
		struct ibv_qp_rate_limit_attr rl = { .rate_limit = 1000 };
		out("modify_qp_rate_limit=%s", RET(ibv_modify_qp_rate_limit(qp, &rl)));
		ibv_destroy_qp(qp);
	}
	struct ibv_qp_init_attr_ex iax = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS, .pd = pd,
		.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB };
	errno = 0;
	qp = ibv_create_qp_ex(ctx, &iax);
	out("create_qp_ex.block_self_mcast_lb=%s", qp ? "ok" : nullerr(errno));
	if (qp)
		ibv_destroy_qp(qp);
	iax.create_flags = 0;
	iax.qp_type = IBV_QPT_DRIVER;
	errno = 0;
	qp = ibv_create_qp_ex(ctx, &iax);
	out("create_qp_ex.driver=%s", qp ? "ok" : nullerr(errno));
	if (qp)
		ibv_destroy_qp(qp);
	iax.qp_type = IBV_QPT_RAW_PACKET;
	errno = 0;
	qp = ibv_create_qp_ex(ctx, &iax);
	out("create_qp_ex.raw_packet=%s", qp ? "ok" : nullerr(errno));
	if (qp)
		ibv_destroy_qp(qp);
	iax.qp_type = IBV_QPT_XRC_SEND;
	iax.comp_mask = IBV_QP_INIT_ATTR_PD;
	errno = 0;
	qp = ibv_create_qp_ex(ctx, &iax);
	out("create_qp_ex.xrc_send=%s", qp ? "ok" : nullerr(errno));
	if (qp)
		ibv_destroy_qp(qp);
	iax.qp_type = IBV_QPT_RC;
	iax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	iax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	errno = 0;
	qp = ibv_create_qp_ex(ctx, &iax);
	out("create_qp_ex.send_ops=%s", qp ? "ok" : nullerr(errno));
	if (qp)
		ibv_destroy_qp(qp);
	for (int bit = 0; bit < 16; bit++) {
		iax.send_ops_flags = 1ull << bit;
		errno = 0;
		qp = ibv_create_qp_ex(ctx, &iax);
		out("create_qp_ex.send_ops_bit%d=%s", bit, qp ? "ok" : nullerr(errno));
		if (qp)
			ibv_destroy_qp(qp);
	}
	ibv_destroy_cq(cq);
}

static void comp_channel(void)
{
	errno = 0;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	out("create_comp_channel=%s", ch ? "ok" : nullerr(errno));
	if (!ch)
		return;
	int fl = fcntl(ch->fd, F_GETFL);
	out("comp_channel.fd=%s", fl >= 0 && ch->fd > 2 ? "open" : "bad");
	out("comp_channel.accmode=%d", fl & O_ACCMODE);
	out("comp_channel.nonblock=%s", fl & O_NONBLOCK ? "yes" : "no");
	out("comp_channel.cloexec=%s", fcntl(ch->fd, F_GETFD) & FD_CLOEXEC ? "yes" : "no");
	out("comp_channel.refcnt=%d", ch->refcnt);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	struct side a, b;
	memset(&a, 0, sizeof(a));
	make_side(&a, IBV_QPT_RC, 0, "chan_a", 64);
	make_side(&b, IBV_QPT_RC, 0, "chan_b", 64);
	connect_pair(&a, &b, 7);
	/* b's CQ on the channel. */
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, (void *)0x77, ch, 0);
	out("comp_channel.create_cq=%s", cq ? "ok" : nullerr(errno));
	if (!cq)
		goto out;
	out("comp_channel.cq.channel=%s", cq->channel == ch ? "ch" : "other");
	out("comp_channel.refcnt_with_cq=%d", ch->refcnt);
	out("comp_channel.fl_after_create_cq.nonblock=%s",
	    fcntl(ch->fd, F_GETFL) & O_NONBLOCK ? "yes" : "no");
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	/* Never block: a channel fd that lost O_NONBLOCK is not read. */
	if (fcntl(ch->fd, F_GETFL) & O_NONBLOCK)
		out("comp_channel.get_cq_event.empty=%s", RET(ibv_get_cq_event(ch, &ev_cq, &ev_ctx)));
	else
		out("comp_channel.get_cq_event.empty=(fd blocks: not called)");
	/* A QP whose receive CQ is on the channel. */
	struct ibv_qp_init_attr ia = { .send_cq = b.cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *rq = ibv_create_qp(pd, &ia);
	if (!rq)
		DIE("create_qp on a channel CQ failed: %m");
	name_qpn(rq->qp_num, "chan_rq");
	ibv_destroy_qp(b.qp);
	b.qp = rq;
	struct ibv_qp_attr e = { .qp_state = IBV_QPS_RESET };
	ibv_modify_qp(a.qp, &e, IBV_QP_STATE);
	connect_pair(&a, &b, 7);
	out("comp_channel.req_notify=%s", RET(ibv_req_notify_cq(cq, 0)));
	post_recv(&b, 0, 64, 0xb1);
	post(&a, IBV_WR_SEND, 0, 8, 0xa1, NULL, 0, IBV_SEND_SIGNALED);
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	int ready = poll(&pfd, 1, 5000);
	out("comp_channel.poll_fd=%s", ready == 1 ? "readable" : ready == 0 ? "timeout" : ename(errno));
	int got = ready == 1 ? ibv_get_cq_event(ch, &ev_cq, &ev_ctx) : -1;
	out("comp_channel.get_cq_event=%s", ready != 1 ? "(not called)" : got ? ret(got, errno) : "0");
	out("comp_channel.event.cq=%s", ev_cq == cq ? "cq" : "other");
	out("comp_channel.event.cq_context=%s", ev_ctx == (void *)0x77 ? "given" : "other");
	if (!got)
		ibv_ack_cq_events(cq, 1);
	struct ibv_wc w;
	memset(&w, POISON, sizeof(w));
	out("comp_channel.poll=%d", ibv_poll_cq(cq, 1, &w));
	int busy = ibv_destroy_comp_channel(ch);
	out("comp_channel.destroy_channel.in_use=%s", ret(busy, errno));
	if (!busy)
		ch = NULL;
	ibv_destroy_qp(b.qp);
	b.qp = NULL;
	ibv_destroy_cq(cq);
out:
	if (b.qp)
		ibv_destroy_qp(b.qp);
	ibv_destroy_qp(a.qp);
	ibv_destroy_cq(a.cq);
	ibv_destroy_cq(b.cq);
	ibv_dereg_mr(a.mr);
	ibv_dereg_mr(b.mr);
	if (ch)
		out("destroy_comp_channel=%s", RET(ibv_destroy_comp_channel(ch)));
}

/* Destroying what is still in use (last: a provider that lets it happen
 * leaves objects behind that nothing may touch again). */
static void in_use(void)
{
	struct ibv_pd *p = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	char *buf = aligned_alloc(4096, 4096);
	struct ibv_mr *mr = p ? ibv_reg_mr(p, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_srq_init_attr si = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = p ? ibv_create_srq(p, &si) : NULL;
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = p && cq && srq ? ibv_create_qp(p, &ia) : NULL;
	if (!qp || !mr)
		DIE("in_use: setup failed: %m");
	/* A destroy that should fail and did not: stop (the object is gone). */
#define BUSY(key, call) do { errno = 0; int r_ = (call); out("in_use.%s=%s", key, ret(r_, errno)); \
		if (!r_) { out("in_use.stopped_at=%s", key); return; } } while (0)
	BUSY("destroy_cq", ibv_destroy_cq(cq));
	BUSY("destroy_srq", ibv_destroy_srq(srq));
	BUSY("dealloc_pd", ibv_dealloc_pd(p));
	out("in_use.destroy_qp=%s", RET(ibv_destroy_qp(qp)));
	out("in_use.destroy_srq_after_qp=%s", RET(ibv_destroy_srq(srq)));
	out("in_use.destroy_cq_after_qp=%s", RET(ibv_destroy_cq(cq)));
	BUSY("dealloc_pd_with_mr", ibv_dealloc_pd(p));
	out("in_use.dereg_mr=%s", RET(ibv_dereg_mr(mr)));
	struct ibv_ah_attr aa = self_ah();
	struct ibv_ah *ah = ibv_create_ah(p, &aa);
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!ah || !cq2)
		DIE("in_use: create_ah/create_cq failed: %m");
	BUSY("dealloc_pd_with_ah", ibv_dealloc_pd(p));
	out("in_use.destroy_ah=%s", RET(ibv_destroy_ah(ah)));
	/* A UD QP attached to a multicast group. */
	struct ibv_qp_init_attr ua = { .send_cq = cq2, .recv_cq = cq2, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *uq = ibv_create_qp(p, &ua);
	if (!uq)
		DIE("in_use: UD QP: %m");
	union ibv_gid mgid = { .raw = { [10] = 0xff, [11] = 0xff, 239, 1, 2, 4 } };
	out("in_use.attach_mcast=%s", RET(ibv_attach_mcast(uq, &mgid, 0)));
	BUSY("destroy_qp_attached", ibv_destroy_qp(uq));
	out("in_use.detach_mcast=%s", RET(ibv_detach_mcast(uq, &mgid, 0)));
	out("in_use.destroy_qp_detached=%s", RET(ibv_destroy_qp(uq)));
	out("in_use.destroy_cq2=%s", RET(ibv_destroy_cq(cq2)));
	out("in_use.dealloc_pd_after_ah=%s", RET(ibv_dealloc_pd(p)));
#undef BUSY
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		DIE("usage: verbs_surface <ibdev> [gid index]");
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l)
		DIE("no device list: %m");
	struct ibv_device *d = NULL;
	for (int i = 0; l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), argv[1]))
			d = l[i];
	if (!d)
		DIE("device %s not found", argv[1]);
	ctx = ibv_open_device(d);
	if (!ctx)
		DIE("ibv_open_device failed: %m");
	pick_gid(argc, argv);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		DIE("ibv_alloc_pd failed: %m");
	device_attrs();
	device_identity(d, argv[1]);
	port_attrs();
	gids();
	cq_sizes();
	srq_sizes();
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	qp_sizes(cq);
	ibv_destroy_cq(cq);
	qp_states();
	rc_ops(0);
	rc_ops(1);
	uc_ops();
	ud_ops(0);
	ud_ops(1);
	const char *errs[] = { "bad_rkey", "bad_lkey", "short_recv", "rnr", "misaligned_atomic",
			       "read_beyond_mr" };
	for (unsigned i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		error_case(errs[i]);
	mrs();
	misuse_modify();
	misuse_posts();
	misuse_ud();
	unsupported();
	comp_channel();
	in_use();
	out("dealloc_pd=%s", RET(ibv_dealloc_pd(pd)));
	out("close_device=%s", RET(ibv_close_device(ctx)));
	ibv_free_device_list(l);
	out("end=ok");
	return 0;
}
