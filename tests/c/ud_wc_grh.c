/*
 * What a UD receive shows an application, field by field, as kernel rxe
 * fills it (rxe_resp.c do_complete and execute, rxe_comp.c make_send_cqe):
 *  - struct ibv_wc of the receive: opcode RECV, byte_len = 40 + payload,
 *    wc_flags exactly IBV_WC_GRH | IBV_WC_WITH_IMM, src_qp, qp_num, the
 *    immediate, and pkey_index, slid, dlid_path_bits, vendor_err all 0;
 *    sl is where rxu departs from rxe (which reports 0): the RoCE packet
 *    type as ConnectX reports it, 0xA for IPv4 and 0x9 for IPv6 (UDP bit,
 *    L3 type), which UCX reads to find the address in the GRH area; the
 *    same through ibv_wc_read_* of an extended CQ;
 *  - the sender's completion: opcode SEND, byte_len, wc_flags WITH_IMM;
 *  - the 40 bytes in front of the payload: for IPv4 20 zero bytes, then the
 *    IPv4 header (version 4, IHL 5, TOS 0, total length, DF, TTL 64, UDP,
 *    valid checksum, the two GIDs' addresses); for IPv6 the whole header
 *    (version 6, traffic class 0, flow label 0, payload length, UDP, hop
 *    limit 64, the two GIDs);
 *  - an AH whose flow label has all 32 bits set (UCX does this) sends;
 *  - a receive queue takes exactly cap.max_recv_wr receives, then ENOMEM.
 *
 * usage: ud_wc_grh <ibdev> <gid index>; exit 0 on success.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QKEY 0x11111111
#define LEN 100
#define GRH 40
#define IMM 0xa1b2c3d4u
/* BTH + DETH + ImmDt, pad to 4 bytes, ICRC: the UDP payload around LEN. */
#define ROCE_BYTES (12 + 8 + 4 + LEN + ((4 - LEN % 4) % 4) + 4)

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

struct side {
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	unsigned char *buf;
};

static void setup(struct ibv_context *ctx, struct ibv_pd *pd, struct side *s, int recv_wr)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 16,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
			    IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
			    IBV_WC_EX_WITH_DLID_PATH_BITS,
	};
	s->cq = ibv_create_cq_ex(ctx, &ca);
	CHECK(s->cq, "ibv_create_cq_ex failed");
	struct ibv_qp_init_attr ia = {
		.send_cq = ibv_cq_ex_to_cq(s->cq),
		.recv_cq = ibv_cq_ex_to_cq(s->cq),
		.cap = { .max_send_wr = 4, .max_recv_wr = recv_wr, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
		.sq_sig_all = 1,
	};
	s->qp = ibv_create_qp(pd, &ia);
	CHECK(s->qp, "ibv_create_qp failed");
	s->buf = calloc(1, 4 * (LEN + GRH));
	s->mr = ibv_reg_mr(pd, s->buf, 4 * (LEN + GRH), IBV_ACCESS_LOCAL_WRITE);
	CHECK(s->mr, "ibv_reg_mr failed");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = QKEY };
	CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
	      "INIT failed");
	a.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE), "RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "RTS failed");
}

/* Posts receive `i` (buffer i of the side); returns ibv_post_recv's errno. */
static int post_recv(struct side *s, int i)
{
	struct ibv_sge sge = { (uintptr_t)s->buf + i * (LEN + GRH), LEN + GRH, s->mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(s->qp, &rw, &bad);
}

static void send_to(struct side *s, struct ibv_ah *ah, uint32_t qpn, uint64_t wr_id)
{
	unsigned char *p = s->buf + 3 * (LEN + GRH);
	for (int i = 0; i < LEN; i++)
		p[i] = (unsigned char)(i * 7 + wr_id);
	struct ibv_sge sge = { (uintptr_t)p, LEN, s->mr->lkey };
	struct ibv_send_wr w = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
		.imm_data = htobe32(IMM),
	}, *bad;
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = qpn;
	w.wr.ud.remote_qkey = QKEY;
	CHECK(!ibv_post_send(s->qp, &w, &bad), "ibv_post_send failed: %m");
}

/* The next completion of s's CQ through ibv_poll_cq (bounded wait). */
static struct ibv_wc poll_one(struct side *s)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 10;
	while (time(NULL) < end) {
		int n = ibv_poll_cq(ibv_cq_ex_to_cq(s->cq), 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq failed");
		if (n == 1)
			return wc;
	}
	CHECK(0, "no completion within 10 s");
	return wc;
}

/* The next completion of s's CQ through the extended poll API, as ibv_wc. */
static struct ibv_wc poll_one_ex(struct side *s)
{
	struct ibv_poll_cq_attr pa = {};
	struct ibv_wc wc;
	memset(&wc, 0xee, sizeof(wc));
	time_t end = time(NULL) + 10;
	while (time(NULL) < end) {
		if (ibv_start_poll(s->cq, &pa) != 0)
			continue;
		struct ibv_cq_ex *c = s->cq;
		wc.wr_id = c->wr_id;
		wc.status = c->status;
		wc.opcode = ibv_wc_read_opcode(c);
		wc.vendor_err = ibv_wc_read_vendor_err(c);
		wc.byte_len = ibv_wc_read_byte_len(c);
		wc.imm_data = ibv_wc_read_imm_data(c);
		wc.qp_num = ibv_wc_read_qp_num(c);
		wc.src_qp = ibv_wc_read_src_qp(c);
		wc.wc_flags = ibv_wc_read_wc_flags(c);
		wc.pkey_index = 0; /* no reader in the extended API */
		wc.slid = ibv_wc_read_slid(c);
		wc.sl = ibv_wc_read_sl(c);
		wc.dlid_path_bits = ibv_wc_read_dlid_path_bits(c);
		ibv_end_poll(c);
		return wc;
	}
	CHECK(0, "no completion within 10 s");
	return wc;
}

static void check_send_wc(const char *how, struct ibv_wc w, struct side *a, uint64_t wr_id)
{
	CHECK(w.status == IBV_WC_SUCCESS, "%s: send status %s", how, ibv_wc_status_str(w.status));
	CHECK(w.wr_id == wr_id && w.opcode == IBV_WC_SEND && w.byte_len == LEN &&
	      w.qp_num == a->qp->qp_num && w.wc_flags == IBV_WC_WITH_IMM,
	      "%s: send completion wr_id %llu opcode %d byte_len %u qp_num %u wc_flags %#x "
	      "(rxe: SEND, %u, WITH_IMM)", how, (unsigned long long)w.wr_id, w.opcode, w.byte_len,
	      w.qp_num, w.wc_flags, LEN);
}

static void check_recv_wc(const char *how, struct ibv_wc w, struct side *a, struct side *b, int i,
			  uint8_t sl)
{
	CHECK(w.status == IBV_WC_SUCCESS, "%s: receive status %s", how, ibv_wc_status_str(w.status));
	CHECK(w.wr_id == (uint64_t)(100 + i), "%s: wr_id %llu", how, (unsigned long long)w.wr_id);
	CHECK(w.opcode == IBV_WC_RECV, "%s: opcode %d", how, w.opcode);
	CHECK(w.vendor_err == 0, "%s: vendor_err %u", how, w.vendor_err);
	CHECK(w.byte_len == GRH + LEN, "%s: byte_len %u, expected %u", how, w.byte_len, GRH + LEN);
	CHECK(be32toh(w.imm_data) == IMM, "%s: imm %#x", how, be32toh(w.imm_data));
	CHECK(w.qp_num == b->qp->qp_num && w.src_qp == a->qp->qp_num,
	      "%s: qp_num %u src_qp %u, expected %u %u", how, w.qp_num, w.src_qp, b->qp->qp_num,
	      a->qp->qp_num);
	CHECK(w.wc_flags == (IBV_WC_GRH | IBV_WC_WITH_IMM),
	      "%s: wc_flags %#x, expected GRH | WITH_IMM", how, w.wc_flags);
	CHECK(w.pkey_index == 0 && w.slid == 0 && w.dlid_path_bits == 0,
	      "%s: pkey_index %u slid %u dlid_path_bits %u, rxe reports 0 each", how,
	      w.pkey_index, w.slid, w.dlid_path_bits);
	CHECK(w.sl == sl, "%s: sl %#x, expected the RoCE packet type %#x", how, w.sl, sl);
}

static uint16_t be16at(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* One's complement sum of an IPv4 header with its checksum in place. */
static uint16_t ip_sum(const unsigned char *h)
{
	uint32_t s = 0;
	for (int i = 0; i < 20; i += 2)
		s += be16at(h + i);
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

static const unsigned char v4_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

static void check_grh(const unsigned char *g, const union ibv_gid *src, const union ibv_gid *dst,
		      int i)
{
	int v4 = !memcmp(src->raw, v4_prefix, 12);
	if (v4) {
		static const unsigned char zero[20];
		const unsigned char *h = g + 20;
		CHECK(!memcmp(g, zero, 20), "message %d: GRH bytes 0..20 not zero", i);
		CHECK(h[0] == 0x45 && h[1] == 0, "message %d: IPv4 version/IHL %#x TOS %#x", i, h[0],
		      h[1]);
		CHECK(be16at(h + 2) == 20 + 8 + ROCE_BYTES, "message %d: IPv4 total length %u, expected %u",
		      i, be16at(h + 2), 20 + 8 + ROCE_BYTES);
		CHECK(be16at(h + 6) == 0x4000, "message %d: IPv4 flags/fragment %#x, expected DF", i,
		      be16at(h + 6));
		CHECK(h[8] == 64 && h[9] == 17, "message %d: TTL %u protocol %u", i, h[8], h[9]);
		CHECK(ip_sum(h) == 0xffff, "message %d: IPv4 header checksum wrong", i);
		CHECK(!memcmp(h + 12, src->raw + 12, 4) && !memcmp(h + 16, dst->raw + 12, 4),
		      "message %d: IPv4 addresses are not the GIDs'", i);
	} else {
		CHECK(g[0] == 0x60 && g[1] == 0 && g[2] == 0 && g[3] == 0,
		      "message %d: IPv6 version/class/flow %02x%02x%02x%02x, expected 60000000", i,
		      g[0], g[1], g[2], g[3]);
		CHECK(be16at(g + 4) == 8 + ROCE_BYTES, "message %d: IPv6 payload length %u, expected %u",
		      i, be16at(g + 4), 8 + ROCE_BYTES);
		CHECK(g[6] == 17 && g[7] == 64, "message %d: next header %u hop limit %u", i, g[6], g[7]);
		CHECK(!memcmp(g + 8, src->raw, 16) && !memcmp(g + 24, dst->raw, 16),
		      "message %d: IPv6 addresses are not the GIDs", i);
	}
	for (int k = 0; k < LEN; k++)
		CHECK(g[GRH + k] == (unsigned char)(k * 7 + i), "message %d: payload byte %d", i, k);
}

int main(int argc, char **argv)
{
	CHECK(argc == 3, "usage: ud_wc_grh <ibdev> <gid index>");
	int gidx = atoi(argv[2]);
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l, "no device list");
	struct ibv_device *d = NULL;
	for (int i = 0; l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), argv[1]))
			d = l[i];
	CHECK(d, "device %s not found", argv[1]);
	struct ibv_context *ctx = ibv_open_device(d);
	CHECK(ctx, "ibv_open_device failed");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd failed");
	struct side a, b;
	setup(ctx, pd, &a, 4);
	setup(ctx, pd, &b, 3);

	/* The receive queue: exactly cap.max_recv_wr, then ENOMEM. */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(!ibv_query_qp(b.qp, &qa, IBV_QP_CAP, &qi), "ibv_query_qp failed");
	int max_recv = (int)qa.cap.max_recv_wr;
	CHECK(max_recv >= 3 && max_recv <= 16, "max_recv_wr %d", max_recv);
	for (int i = 0; i < max_recv; i++)
		CHECK(post_recv(&b, i % 3) == 0, "receive %d of %d refused", i, max_recv);
	int e = post_recv(&b, 0);
	CHECK(e == ENOMEM, "receive %d past max_recv_wr %d: %s, expected ENOMEM", max_recv + 1,
	      max_recv, e ? strerror(e) : "accepted");

	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), "ibv_query_gid failed");
	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 64, .flow_label = 0xffffffff },
	};
	struct ibv_ah *to_b = ibv_create_ah(pd, &aa);
	CHECK(to_b, "ibv_create_ah with flow label 0xffffffff failed: %m");

	/* Message 0 polled with ibv_poll_cq, message 1 with ibv_start_poll. */
	for (int i = 0; i < 2; i++) {
		const char *how = i ? "ibv_wc_read_*" : "ibv_poll_cq";
		send_to(&a, to_b, b.qp->qp_num, i);
		struct ibv_wc s = i ? poll_one_ex(&a) : poll_one(&a);
		check_send_wc(how, s, &a, i);
		struct ibv_wc w = i ? poll_one_ex(&b) : poll_one(&b);
		check_recv_wc(how, w, &a, &b, i, memcmp(gid.raw, v4_prefix, 12) ? 0x9 : 0xA);
		check_grh(b.buf + i * (LEN + GRH), &gid, &gid, i);
	}

	CHECK(!ibv_destroy_ah(to_b), "ibv_destroy_ah failed");
	struct side *s[2] = { &a, &b };
	for (int i = 0; i < 2; i++) {
		CHECK(!ibv_destroy_qp(s[i]->qp), "ibv_destroy_qp failed");
		CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(s[i]->cq)), "ibv_destroy_cq failed");
		CHECK(!ibv_dereg_mr(s[i]->mr), "ibv_dereg_mr failed");
	}
	CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	char str[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, gid.raw, str, sizeof(str));
	printf("ud_wc_grh: ok (GID %s, max_recv_wr %d)\n", str, max_recv);
	return 0;
}
