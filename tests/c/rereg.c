/*
 * ibv_rereg_mr on one rxu device, two RC QPs of one PD connected to each
 * other (A writes into B's region): IBV_REREG_MR_CHANGE_ACCESS,
 * _CHANGE_PD and _CHANGE_TRANSLATION each take effect for the next
 * access, keep the keys, and the errnos of misuse are the kernel's.
 *
 * usage: rereg <ibdev> [gid index]; exit 0 when every check holds.
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

static struct ibv_mr *mr_a;
static char *buf_a;

static void write_to(uint64_t wr_id, void *va, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)buf_a, 64, mr_a->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)va;
	wr.wr.rdma.rkey = rkey;
	CHECK(!ibv_post_send(qa, &wr, &bad), "post WRITE failed");
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: rereg <ibdev> [gid index]");
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
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd && pd2, "ibv_alloc_pd failed");
	buf_a = calloc(1, 4096);
	char *buf_b = calloc(1, 4096), *buf_c = calloc(1, 8192);
	memset(buf_a, 0x6e, 64);
	mr_a = ibv_reg_mr(pd, buf_a, 4096, IBV_ACCESS_LOCAL_WRITE);
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf_b, 4096, rw);
	CHECK(mr_a && mr, "ibv_reg_mr failed");
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	cq_a = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK(cq_a && cq_b, "ibv_create_cq failed");
	new_pair(0);
	write_to(1, buf_b, mr->rkey);
	expect(cq_a, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);

	/* Access: without REMOTE_WRITE the next WRITE fails. */
	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE),
	      "rereg access failed: %m");
	CHECK(mr->lkey == lkey && mr->rkey == rkey, "rereg changed the keys");
	write_to(2, buf_b, mr->rkey);
	expect(cq_a, 2, IBV_WC_REM_ACCESS_ERR, 0);
	new_pair(0);
	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, rw), "rereg back failed");
	write_to(3, buf_b, mr->rkey);
	expect(cq_a, 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);

	/* PD: a region of another PD is not the QP's. */
	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0), "rereg PD failed");
	CHECK(mr->pd == pd2, "ibv_mr.pd not updated");
	write_to(4, buf_b, mr->rkey);
	expect(cq_a, 4, IBV_WC_REM_ACCESS_ERR, 0);
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "dealloc of a PD holding the region");
	new_pair(0);
	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0), "rereg PD back failed");
	write_to(5, buf_b, mr->rkey);
	expect(cq_a, 5, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);

	/* Translation: the same keys now name buf_c; the old range is gone. */
	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf_c, 8192, 0),
	      "rereg translation failed: %m");
	CHECK(mr->addr == buf_c && mr->length == 8192, "ibv_mr addr/length not updated");
	write_to(6, buf_c + 4096, mr->rkey);
	expect(cq_a, 6, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK(buf_c[4096] == 0x6e && buf_c[4159] == 0x6e, "WRITE did not land in the new range");
	write_to(7, buf_b, mr->rkey);
	expect(cq_a, 7, IBV_WC_REM_ACCESS_ERR, 0);

	/* Misuse: libibverbs' own input checks, then the provider's EINVAL. */
	CHECK(ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT, "unknown flag");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) ==
	      IBV_REREG_MR_ERR_INPUT, "translation without a range");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_CMD && errno == EINVAL,
	      "REMOTE_WRITE without LOCAL_WRITE: errno %d", errno);
	checks += 3;

	CHECK(!ibv_destroy_qp(qa) && !ibv_destroy_qp(qb), "destroy QPs failed");
	CHECK(!ibv_dereg_mr(mr) && !ibv_dereg_mr(mr_a), "dereg_mr failed");
	CHECK(!ibv_destroy_cq(cq_a) && !ibv_destroy_cq(cq_b), "destroy CQs failed");
	CHECK(!ibv_dealloc_pd(pd) && !ibv_dealloc_pd(pd2), "dealloc_pd failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("rereg: ok (%d checks)\n", checks);
	return 0;
}
