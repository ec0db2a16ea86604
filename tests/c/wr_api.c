/*
 * The ibv_wr_* interface (QPs made with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS):
 * RDMA WRITE (one SGE), WRITE with immediate (SGE list), SEND with inline
 * data, SEND with immediate and an inline list, RDMA READ, compare-and-swap
 * and fetch-and-add in one batch each over RC, a UD send with
 * ibv_wr_set_ud_addr, ibv_wr_abort posting nothing, and a setter without a
 * builder failing ibv_wr_complete. Every byte moved is checked.
 *
 * usage: wr_api <ibdev> [gid index]; exit 0 on success.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUF (64 * 1024)
#define QKEY 0x11111111
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static int gidx;

static struct ibv_qp *make_qp(struct ibv_cq *cq, enum ibv_qp_type t, uint64_t ops)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = t, .sq_sig_all = 0,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2,
			 .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd, .send_ops_flags = ops,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
	CHECK(qp, "ibv_create_qp_ex failed: %m");
	CHECK(ibv_qp_to_qp_ex(qp), "ibv_qp_to_qp_ex returned NULL");
	CHECK(ia.cap.max_inline_data >= 64, "max_inline_data %u", ia.cap.max_inline_data);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };
	int m = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	m |= t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	CHECK(!ibv_modify_qp(qp, &a, m), "INIT failed");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
		.max_dest_rd_atomic = 4, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 64 } },
	};
	int rtr = IBV_QP_STATE, rts = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		rtr |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		rts |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	CHECK(!ibv_modify_qp(qp, &a, rtr), "RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(qp, &a, rts), "RTS failed");
}

/* Collects `n` completions of `cq` (10 s at most) into wc. */
static void collect(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	time_t end = time(NULL) + 10;
	int have = 0;
	while (have < n) {
		CHECK(time(NULL) < end, "%d of %d completions after 10 s", have, n);
		int got = ibv_poll_cq(cq, n - have, wc + have);
		CHECK(got >= 0, "ibv_poll_cq failed");
		for (int i = have; i < have + got; i++)
			CHECK(wc[i].status == IBV_WC_SUCCESS, "wr_id %lu: %s", (unsigned long)wc[i].wr_id,
			      ibv_wc_status_str(wc[i].status));
		have += got;
	}
}

static struct ibv_wc *by_id(struct ibv_wc *wc, int n, uint64_t id)
{
	for (int i = 0; i < n; i++)
		if (wc[i].wr_id == id)
			return &wc[i];
	CHECK(0, "no completion for wr_id %lu", (unsigned long)id);
	return NULL;
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *at, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)at, len, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(!ibv_post_recv(qp, &rw, &bad), "ibv_post_recv failed");
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: wr_api <ibdev> [gid index]");
	gidx = argc > 2 ? atoi(argv[2]) : 0;
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l, "no device list");
	struct ibv_device *d = NULL;
	for (int i = 0; l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), argv[1]))
			d = l[i];
	CHECK(d, "device %s not found", argv[1]);
	ctx = ibv_open_device(d);
	CHECK(ctx, "ibv_open_device failed");
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), "ibv_query_gid failed");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd failed");
	char *a = aligned_alloc(4096, BUF), *b = aligned_alloc(4096, BUF);
	for (int i = 0; i < BUF; i++) {
		a[i] = (char)(i * 7 + 1);
		b[i] = 0;
	}
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_mr *ma = ibv_reg_mr(pd, a, BUF, acc), *mb = ibv_reg_mr(pd, b, BUF, acc);
	CHECK(ma && mb, "ibv_reg_mr failed");
	struct ibv_cq *cqa = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cqa && cqb, "ibv_create_cq failed");
	uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
		       IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
		       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	struct ibv_qp *qa = make_qp(cqa, IBV_QPT_RC, ops), *qb = make_qp(cqb, IBV_QPT_RC, ops);
	connect_qp(qa, qb->qp_num);
	connect_qp(qb, qa->qp_num);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qa);
	struct ibv_wc wc[16];

	/* Batch 1: WRITE, WRITE_IMM (SGE list), SEND inline, SEND_IMM inline list. */
	post_recv(qb, mb, b + 30000, 256, 91);
	post_recv(qb, mb, b + 31000, 256, 92);
	post_recv(qb, mb, b + 32000, 256, 93);
	char hello[] = "hello inline", p1[] = "part one/", p2[] = "part two";
	struct ibv_data_buf parts[2] = { { p1, strlen(p1) }, { p2, strlen(p2) } };
	struct ibv_sge two[2] = { { (uintptr_t)a + 1000, 10, ma->lkey }, { (uintptr_t)a + 2000, 20, ma->lkey } };
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, mb->rkey, (uintptr_t)b);
	ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a, 100);
	x->wr_id = 2;
	ibv_wr_rdma_write_imm(x, mb->rkey, (uintptr_t)b + 200, htobe32(0xabc));
	ibv_wr_set_sge_list(x, 2, two);
	x->wr_id = 3;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, hello, sizeof(hello));
	x->wr_id = 4;
	ibv_wr_send_imm(x, htobe32(7));
	ibv_wr_set_inline_data_list(x, 2, parts);
	memset(hello, 'X', sizeof(hello)); /* inline data was copied at the call */
	CHECK(ibv_wr_complete(x) == 0, "ibv_wr_complete (batch 1) failed");
	collect(cqa, 4, wc);
	collect(cqb, 3, wc + 4);
	CHECK(!memcmp(b, a, 100), "RDMA WRITE data differ");
	CHECK(!memcmp(b + 200, a + 1000, 10) && !memcmp(b + 210, a + 2000, 20), "WRITE_IMM data differ");
	struct ibv_wc *w = by_id(wc + 4, 3, 91);
	CHECK(w->opcode == IBV_WC_RECV_RDMA_WITH_IMM && be32toh(w->imm_data) == 0xabc,
	      "WRITE_IMM completion: opcode %d imm %#x", w->opcode, be32toh(w->imm_data));
	w = by_id(wc + 4, 3, 92);
	CHECK(w->opcode == IBV_WC_RECV && w->byte_len == 13 && !strcmp(b + 31000, "hello inline"),
	      "inline SEND: len %u data %.16s", w->byte_len, b + 31000);
	w = by_id(wc + 4, 3, 93);
	CHECK(w->wc_flags & IBV_WC_WITH_IMM && be32toh(w->imm_data) == 7 && w->byte_len == 17 &&
	      !memcmp(b + 32000, "part one/part two", 17), "inline list SEND_IMM");

	/* Batch 2: READ, CMP_SWP, FETCH_ADD. */
	uint64_t *target = (uint64_t *)(b + 8192);
	*target = 0;
	ibv_wr_start(x);
	x->wr_id = 5;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(x, mb->rkey, (uintptr_t)b + 200);
	ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a + 3000, 30);
	x->wr_id = 6;
	ibv_wr_atomic_cmp_swp(x, mb->rkey, (uintptr_t)target, 0, 0x1122);
	ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a + 4000, 8);
	x->wr_id = 7;
	ibv_wr_atomic_fetch_add(x, mb->rkey, (uintptr_t)target, 5);
	ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a + 4008, 8);
	CHECK(ibv_wr_complete(x) == 0, "ibv_wr_complete (batch 2) failed");
	collect(cqa, 3, wc);
	CHECK(by_id(wc, 3, 5)->opcode == IBV_WC_RDMA_READ, "READ opcode");
	CHECK(!memcmp(a + 3000, b + 200, 30), "READ data differ");
	CHECK(*(uint64_t *)(a + 4000) == 0 && *(uint64_t *)(a + 4008) == 0x1122 && *target == 0x1127,
	      "atomics: old %#lx %#lx, now %#lx", (unsigned long)*(uint64_t *)(a + 4000),
	      (unsigned long)*(uint64_t *)(a + 4008), (unsigned long)*target);

	/* Abort posts nothing; a setter without a builder fails the batch. */
	ibv_wr_start(x);
	x->wr_id = 8;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a, 8);
	ibv_wr_abort(x);
	ibv_wr_start(x);
	ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a, 8);
	CHECK(ibv_wr_complete(x) == EINVAL, "a setter without a builder was accepted");
	usleep(200000);
	CHECK(ibv_poll_cq(cqa, 16, wc) == 0 && ibv_poll_cq(cqb, 16, wc) == 0, "aborted WRs completed");

	/* UD through ibv_wr_set_ud_addr. */
	struct ibv_qp *ua = make_qp(cqa, IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
	struct ibv_qp *ub = make_qp(cqb, IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
	connect_qp(ua, 0);
	connect_qp(ub, 0);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 64 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "ibv_create_ah failed");
	post_recv(ub, mb, b + 40000, 40 + 64, 94);
	struct ibv_qp_ex *ux = ibv_qp_to_qp_ex(ua);
	ibv_wr_start(ux);
	ux->wr_id = 9;
	ux->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(ux);
	ibv_wr_set_ud_addr(ux, ah, ub->qp_num, QKEY);
	ibv_wr_set_sge(ux, ma->lkey, (uintptr_t)a + 5000, 64);
	CHECK(ibv_wr_complete(ux) == 0, "ibv_wr_complete (UD) failed");
	collect(cqa, 1, wc);
	collect(cqb, 1, wc + 1);
	CHECK(wc[1].byte_len == 40 + 64 && wc[1].src_qp == ua->qp_num && !memcmp(b + 40040, a + 5000, 64),
	      "UD receive: len %u src_qp %u", wc[1].byte_len, wc[1].src_qp);

	CHECK(!ibv_destroy_ah(ah), "ibv_destroy_ah failed");
	struct ibv_qp *qps[4] = { qa, qb, ua, ub };
	for (int i = 0; i < 4; i++)
		CHECK(!ibv_destroy_qp(qps[i]), "ibv_destroy_qp failed");
	CHECK(!ibv_destroy_cq(cqa) && !ibv_destroy_cq(cqb), "ibv_destroy_cq failed");
	CHECK(!ibv_dereg_mr(ma) && !ibv_dereg_mr(mb) && !ibv_dealloc_pd(pd), "teardown failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("wr_api: ok\n");
	return 0;
}
