/*
 * UD round trip inside one process that answers with an address handle
 * made by ibv_create_ah_from_wc: libibverbs builds it from the GRH the
 * device wrote into the receive buffer (IPv4 header in its last 20 bytes,
 * checksum verified) and from the sysfs GID table. Also exercises the
 * extended CQ (ibv_start_poll/next_poll/end_poll, ibv_wc_read_*).
 *
 * usage: ah_from_wc <ibdev> [gid index]; exit 0 on success.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QKEY 0x11111111
#define LEN 64
#define GRH 40

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

struct side {
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

static void setup(struct ibv_context *ctx, struct ibv_pd *pd, struct side *s)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 16,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
			    IBV_WC_EX_WITH_IMM,
	};
	s->cq = ibv_create_cq_ex(ctx, &ca);
	CHECK(s->cq, "ibv_create_cq_ex failed");
	struct ibv_qp_init_attr ia = {
		.send_cq = ibv_cq_ex_to_cq(s->cq),
		.recv_cq = ibv_cq_ex_to_cq(s->cq),
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
		.sq_sig_all = 1,
	};
	s->qp = ibv_create_qp(pd, &ia);
	CHECK(s->qp, "ibv_create_qp failed");
	s->buf = calloc(1, 2 * (LEN + GRH));
	s->mr = ibv_reg_mr(pd, s->buf, 2 * (LEN + GRH), IBV_ACCESS_LOCAL_WRITE);
	CHECK(s->mr, "ibv_reg_mr failed");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = QKEY };
	CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
	      "INIT failed");
	a.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE), "RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "RTS failed");
	struct ibv_sge sge = { (uintptr_t)s->buf, LEN + GRH, s->mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(!ibv_post_recv(s->qp, &rw, &bad), "ibv_post_recv failed");
}

static void send_to(struct side *s, struct ibv_ah *ah, uint32_t qpn, uint32_t imm)
{
	struct ibv_sge sge = { (uintptr_t)s->buf + LEN + GRH, LEN, s->mr->lkey };
	struct ibv_send_wr w = {
		.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
		.imm_data = htobe32(imm),
	}, *bad;
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = qpn;
	w.wr.ud.remote_qkey = QKEY;
	CHECK(!ibv_post_send(s->qp, &w, &bad), "ibv_post_send failed");
}

/* Waits (bounded) for a receive completion on s; returns it as ibv_wc. */
static struct ibv_wc wait_recv(struct side *s)
{
	struct ibv_poll_cq_attr pa = {};
	struct ibv_wc wc = {};
	time_t end = time(NULL) + 10;
	while (time(NULL) < end) {
		if (ibv_start_poll(s->cq, &pa) != 0)
			continue;
		int got = 0;
		do {
			enum ibv_wc_opcode op = ibv_wc_read_opcode(s->cq);
			CHECK(s->cq->status == IBV_WC_SUCCESS, "completion status %s",
			      ibv_wc_status_str(s->cq->status));
			if (op == IBV_WC_RECV) {
				wc.wr_id = s->cq->wr_id;
				wc.status = s->cq->status;
				wc.opcode = op;
				wc.byte_len = ibv_wc_read_byte_len(s->cq);
				wc.qp_num = ibv_wc_read_qp_num(s->cq);
				wc.src_qp = ibv_wc_read_src_qp(s->cq);
				wc.wc_flags = ibv_wc_read_wc_flags(s->cq);
				wc.imm_data = ibv_wc_read_imm_data(s->cq);
				got = 1;
			}
		} while (!got && ibv_next_poll(s->cq) == 0);
		ibv_end_poll(s->cq);
		if (got)
			return wc;
	}
	CHECK(0, "no receive completion within 10 s");
	return wc;
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: ah_from_wc <ibdev> [gid index]");
	int gidx = argc > 2 ? atoi(argv[2]) : 0;
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
	setup(ctx, pd, &a);
	setup(ctx, pd, &b);

	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), "ibv_query_gid failed");
	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 64 },
	};
	struct ibv_ah *to_b = ibv_create_ah(pd, &aa);
	CHECK(to_b, "ibv_create_ah failed");
	send_to(&a, to_b, b.qp->qp_num, 0x1234);
	struct ibv_wc wc = wait_recv(&b);
	CHECK(wc.wc_flags & IBV_WC_GRH, "receive completion without IBV_WC_GRH");
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM && be32toh(wc.imm_data) == 0x1234, "bad immediate");
	CHECK(wc.src_qp == a.qp->qp_num && wc.qp_num == b.qp->qp_num, "bad QP numbers");
	CHECK(wc.byte_len == LEN + GRH, "byte_len %u, expected %u", wc.byte_len, LEN + GRH);

	struct ibv_ah_attr got;
	CHECK(!ibv_init_ah_from_wc(ctx, 1, &wc, (struct ibv_grh *)b.buf, &got),
	      "ibv_init_ah_from_wc failed: %m");
	CHECK(got.is_global && got.grh.sgid_index == gidx &&
	      !memcmp(&got.grh.dgid, &gid, sizeof(gid)),
	      "ibv_init_ah_from_wc: is_global %d sgid_index %d", got.is_global, got.grh.sgid_index);
	struct ibv_ah *back = ibv_create_ah_from_wc(pd, &wc, (struct ibv_grh *)b.buf, 1);
	CHECK(back, "ibv_create_ah_from_wc failed: %m");
	send_to(&b, back, wc.src_qp, 0x5678);
	wc = wait_recv(&a);
	CHECK(be32toh(wc.imm_data) == 0x5678 && wc.src_qp == b.qp->qp_num, "bad reply");

	CHECK(!ibv_destroy_ah(back) && !ibv_destroy_ah(to_b), "ibv_destroy_ah failed");
	struct side *s[2] = { &a, &b };
	for (int i = 0; i < 2; i++) {
		CHECK(!ibv_destroy_qp(s[i]->qp), "ibv_destroy_qp failed");
		CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(s[i]->cq)), "ibv_destroy_cq failed");
		CHECK(!ibv_dereg_mr(s[i]->mr), "ibv_dereg_mr failed");
	}
	CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("ah_from_wc: ok (GRH sgid_index %d, hop_limit %d)\n", got.grh.sgid_index, got.grh.hop_limit);
	return 0;
}
