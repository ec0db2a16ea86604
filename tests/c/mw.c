/*
 * Memory windows through libibverbs on one rxu device, two RC QPs of one
 * PD connected to each other (A the requester, B owning the memory):
 * query_device's flags, alloc with a bad type, type 1 bound by
 * ibv_bind_mw, type 2 bound by an IBV_WR_BIND_MW work request and by
 * ibv_wr_bind_mw, remote WRITE/READ checked against the window's range and
 * access, SEND_WITH_INV (IBV_WC_WITH_INV and invalidated_rkey at the
 * receiver), LOCAL_INV, and a WRITE through an invalidated window failing
 * with IBV_WC_REM_ACCESS_ERR as on rxe; then the errnos of freeing what a
 * window still holds.
 *
 * usage: mw <ibdev> [gid index]; exit 0 when every check holds.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "line %d: ", __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static int gidx;
static struct ibv_cq *cq_a, *cq_b;
static struct ibv_qp *qa, *qb;
static int checks;

static struct ibv_qp *make_qp(struct ibv_cq *cq, int ex)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD,
	};
	if (ex) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
				    IBV_QP_EX_WITH_RDMA_WRITE;
	}
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
	CHECK(qp, "ibv_create_qp_ex failed: %m");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS), "INIT failed");
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
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			     IBV_QP_MIN_RNR_TIMER), "RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 1;
	a.rnr_retry = 1;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS failed");
}

/* Fresh QPs (an error completion leaves the old ones in ERR). */
static void new_pair(int ex)
{
	if (qa) {
		CHECK(!ibv_destroy_qp(qa) && !ibv_destroy_qp(qb), "destroy QPs failed");
	}
	qa = make_qp(cq_a, 0);
	qb = make_qp(cq_b, ex);
	connect_qp(qa, qb->qp_num);
	connect_qp(qb, qa->qp_num);
}

static struct ibv_wc poll1(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq failed");
		if (n == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK(t.tv_sec - t0.tv_sec < 20, "no completion in 20 s");
	}
}

static void expect(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op)
{
	struct ibv_wc wc = poll1(cq);
	CHECK(wc.wr_id == wr_id && wc.status == st, "wr %llu: got wr %llu status %s, want %s",
	      (unsigned long long)wr_id, (unsigned long long)wc.wr_id,
	      ibv_wc_status_str(wc.status), ibv_wc_status_str(st));
	if (st == IBV_WC_SUCCESS)
		CHECK(wc.opcode == op, "wr %llu: opcode %d, want %d", (unsigned long long)wr_id,
		      wc.opcode, op);
	checks++;
}

static struct ibv_mr *mr_a, *mr_b;
static char *buf_a, *buf_b;

/* A posts one RDMA op of `len` bytes at B's `va` under `rkey`. */
static void rdma(enum ibv_wr_opcode op, uint64_t wr_id, uint64_t va, uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)buf_a, len, mr_a->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = va;
	wr.wr.rdma.rkey = rkey;
	CHECK(!ibv_post_send(qa, &wr, &bad), "post RDMA failed");
}

/* B binds type 2 window `mw` by a work request; returns the new key. */
static uint32_t bind2(struct ibv_mw *mw, uint64_t wr_id, uint64_t off, uint64_t len, int acc)
{
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = { .wr_id = wr_id, .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = key;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){ mr_b, (uintptr_t)buf_b + off, len, acc };
	CHECK(!ibv_post_send(qb, &wr, &bad), "post BIND_MW failed");
	return key;
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: mw <ibdev> [gid index]");
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

	struct ibv_device_attr da;
	CHECK(!ibv_query_device(ctx, &da), "ibv_query_device failed");
	CHECK(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW, "no IBV_DEVICE_MEM_WINDOW");
	CHECK(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, "no IBV_DEVICE_MEM_WINDOW_TYPE_2B");
	CHECK(da.max_mw > 0, "max_mw %d", da.max_mw);

	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd failed");
	errno = 0;
	CHECK(!ibv_alloc_mw(pd, (enum ibv_mw_type)3) && errno == EINVAL, "MW type 3: errno %d", errno);
	buf_a = calloc(1, 4096);
	buf_b = calloc(1, 4096);
	mr_a = ibv_reg_mr(pd, buf_a, 4096, IBV_ACCESS_LOCAL_WRITE);
	mr_b = ibv_reg_mr(pd, buf_b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	CHECK(mr_a && mr_b, "ibv_reg_mr failed");
	cq_a = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK(cq_a && cq_b, "ibv_create_cq failed");
	new_pair(0);
	uint64_t base = (uintptr_t)buf_b;

	/* Type 1: ibv_bind_mw, then A writes and reads through it. */
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw1 && mw1->type == IBV_MW_TYPE_1 && mw1->pd == pd, "ibv_alloc_mw(1) failed");
	uint32_t k0 = mw1->rkey;
	struct ibv_mw_bind b = { .wr_id = 10, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { mr_b, base + 256, 256,
			       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ } };
	CHECK(!ibv_bind_mw(qb, mw1, &b), "ibv_bind_mw failed");
	CHECK(mw1->rkey == ibv_inc_rkey(k0), "ibv_bind_mw left rkey %#x", mw1->rkey);
	expect(cq_b, 10, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	memset(buf_a, 0x3c, 64);
	rdma(IBV_WR_RDMA_WRITE, 1, base + 256, mw1->rkey, 64);
	expect(cq_a, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK(buf_b[256] == 0x3c && buf_b[319] == 0x3c && buf_b[255] == 0, "WRITE did not land");
	rdma(IBV_WR_RDMA_READ, 2, base + 256, mw1->rkey, 16);
	expect(cq_a, 2, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	/* A zero-based type 1 window is refused at once. */
	struct ibv_mw_bind zb = b;
	zb.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
	CHECK(ibv_bind_mw(qb, mw1, &zb) == EINVAL, "zero-based type 1 bind accepted");
	/* Outside the window (inside the region): remote access error. */
	rdma(IBV_WR_RDMA_WRITE, 3, base + 512, mw1->rkey, 8);
	expect(cq_a, 3, IBV_WC_REM_ACCESS_ERR, 0);
	/* The region cannot go while the window is bound to it. */
	CHECK(ibv_dereg_mr(mr_b) == EINVAL, "dereg_mr with a bound window");
	new_pair(0);
	/* Unbinding (length 0) closes it. */
	struct ibv_mw_bind unb = { .wr_id = 11, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { mr_b, 0, 0, 0 } };
	CHECK(!ibv_bind_mw(qb, mw1, &unb), "unbind failed");
	expect(cq_b, 11, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	rdma(IBV_WR_RDMA_WRITE, 4, base + 256, mw1->rkey, 8);
	expect(cq_a, 4, IBV_WC_REM_ACCESS_ERR, 0);
	new_pair(0);

	/* Type 2 by a BIND_MW work request; READ needs REMOTE_READ. */
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw2 && mw2->type == IBV_MW_TYPE_2, "ibv_alloc_mw(2) failed");
	uint32_t k2 = bind2(mw2, 20, 0, 1024, IBV_ACCESS_REMOTE_WRITE);
	expect(cq_b, 20, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	mw2->rkey = k2; /* the application tracks a type 2 window's key */
	rdma(IBV_WR_RDMA_WRITE, 5, base, k2, 128);
	expect(cq_a, 5, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	/* A bound type 2 window does not bind again. */
	bind2(mw2, 21, 0, 8, IBV_ACCESS_REMOTE_WRITE);
	expect(cq_b, 21, IBV_WC_MW_BIND_ERR, 0);
	new_pair(0);
	/* Bound through the old B, which is gone: destroying it freed the
	 * window, so the new B does not answer to the key. */
	rdma(IBV_WR_RDMA_WRITE, 6, base, k2, 8);
	expect(cq_a, 6, IBV_WC_REM_ACCESS_ERR, 0);
	new_pair(0);

	/* SEND_WITH_INV frees it; the receiver learns the key. */
	struct ibv_mw *mw3 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw3, "ibv_alloc_mw(2) failed");
	uint32_t k3 = bind2(mw3, 30, 1024, 1024, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	expect(cq_b, 30, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	mw3->rkey = k3;
	rdma(IBV_WR_RDMA_READ, 7, base + 1024, k3, 64);
	expect(cq_a, 7, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	rdma(IBV_WR_RDMA_READ, 8, base + 1024, k3, 2048);
	expect(cq_a, 8, IBV_WC_REM_ACCESS_ERR, 0);
	new_pair(0);
	/* The window was freed with the QP it was bound through. */
	k3 = bind2(mw3, 33, 1024, 1024, IBV_ACCESS_REMOTE_WRITE);
	expect(cq_b, 33, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	mw3->rkey = k3;
	struct ibv_sge rs = { (uintptr_t)buf_b + 3072, 64, mr_b->lkey };
	struct ibv_recv_wr rw = { .wr_id = 40, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(!ibv_post_recv(qb, &rw, &rbad), "post_recv failed");
	{
		struct ibv_sge sge = { (uintptr_t)buf_a, 16, mr_a->lkey };
		struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND_WITH_INV,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		wr.invalidate_rkey = k3;
		CHECK(!ibv_post_send(qa, &wr, &bad), "post SEND_WITH_INV failed");
	}
	expect(cq_a, 9, IBV_WC_SUCCESS, IBV_WC_SEND);
	{
		struct ibv_wc wc = poll1(cq_b);
		CHECK(wc.wr_id == 40 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV,
		      "SEND_WITH_INV receive: wr %llu status %s", (unsigned long long)wc.wr_id,
		      ibv_wc_status_str(wc.status));
		CHECK(wc.wc_flags & IBV_WC_WITH_INV, "no IBV_WC_WITH_INV");
		CHECK(wc.invalidated_rkey == k3, "invalidated_rkey %#x, want %#x",
		      wc.invalidated_rkey, k3);
		CHECK(wc.byte_len == 16, "byte_len %u", wc.byte_len);
		checks++;
	}
	/* The invalidated window refuses the peer, as on rxe. */
	rdma(IBV_WR_RDMA_WRITE, 12, base + 1024, k3, 8);
	expect(cq_a, 12, IBV_WC_REM_ACCESS_ERR, 0);

	/* ibv_wr_bind_mw and ibv_wr_local_inv on an extended QP. */
	new_pair(1);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qb);
	CHECK(qx, "no ibv_qp_ex");
	uint32_t k4 = ibv_inc_rkey(mw3->rkey);
	struct ibv_mw_bind_info bi = { mr_b, base, 512, IBV_ACCESS_REMOTE_WRITE };
	ibv_wr_start(qx);
	qx->wr_id = 50;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(qx, mw3, k4, &bi);
	CHECK(!ibv_wr_complete(qx), "ibv_wr_complete (bind) failed");
	expect(cq_b, 50, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	mw3->rkey = k4;
	rdma(IBV_WR_RDMA_WRITE, 13, base + 8, k4, 8);
	expect(cq_a, 13, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	ibv_wr_start(qx);
	qx->wr_id = 51;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(qx, k4);
	CHECK(!ibv_wr_complete(qx), "ibv_wr_complete (local inv) failed");
	expect(cq_b, 51, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	rdma(IBV_WR_RDMA_WRITE, 14, base + 8, k4, 8);
	expect(cq_a, 14, IBV_WC_REM_ACCESS_ERR, 0);
	/* LOCAL_INV of a key that is not bound: LOC_QP_OP_ERR. */
	new_pair(0);
	{
		struct ibv_send_wr inv = { .wr_id = 60, .opcode = IBV_WR_LOCAL_INV,
					   .send_flags = IBV_SEND_SIGNALED }, *bad;
		inv.invalidate_rkey = k4;
		CHECK(!ibv_post_send(qb, &inv, &bad), "post LOCAL_INV failed");
		expect(cq_b, 60, IBV_WC_LOC_QP_OP_ERR, 0);
	}

	/* Teardown: a PD with windows is busy; freed windows let go. */
	CHECK(!ibv_destroy_qp(qa) && !ibv_destroy_qp(qb), "destroy QPs failed");
	/* No window is bound any more: the regions go; the windows keep the
	 * PD busy. */
	CHECK(!ibv_dereg_mr(mr_a) && !ibv_dereg_mr(mr_b), "dereg_mr of unbound regions failed");
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc_pd with windows");
	CHECK(!ibv_dealloc_mw(mw1) && !ibv_dealloc_mw(mw2) && !ibv_dealloc_mw(mw3),
	      "ibv_dealloc_mw failed");
	CHECK(!ibv_destroy_cq(cq_a) && !ibv_destroy_cq(cq_b) && !ibv_dealloc_pd(pd),
	      "teardown failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("mw: ok (%d completions checked)\n", checks);
	return 0;
}
