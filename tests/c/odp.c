/*
 * On-demand paging. rxu pins nothing: IBV_ACCESS_ON_DEMAND regions are
 * registered without looking at the memory (a range with an unmapped page
 * registers; without ON_DEMAND it is EFAULT), the implicit region
 * ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND) covers the address space, and
 * an access to memory that is not mapped is an access error, not a crash:
 * a remote WRITE gets IBV_WC_REM_ACCESS_ERR, a SEND from such memory
 * IBV_WC_LOC_PROT_ERR, and the device goes on serving new QPs.
 * ibv_advise_mr: synchronous prefetch advice with mlx5's errnos
 * (EOPNOTSUPP, EINVAL, ENOENT, EFAULT), asynchronous as rxe's (0 for any
 * region of the PD with local write, EINVAL for other keys). odp_caps: as a kernel device with ODP reports them.
 *
 * usage: odp <ibdev> [gid index]; exit 0 on success.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)
#define LEN 4096
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid gid;
static int gidx;

static struct ibv_qp *rc_qp(void)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp failed: %m");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = RW };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS), "INIT failed");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr r = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 64 } },
	};
	CHECK(!ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "RTR failed");
	r.qp_state = IBV_QPS_RTS;
	r.timeout = 14;
	r.retry_cnt = 7;
	r.rnr_retry = 7;
	r.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS failed");
}

static void pair(struct ibv_qp **a, struct ibv_qp **b)
{
	*a = rc_qp();
	*b = rc_qp();
	connect_qp(*a, (*b)->qp_num);
	connect_qp(*b, (*a)->qp_num);
}

/* The next completion (10 s at most). */
static struct ibv_wc next_wc(void)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 10;
	while (time(NULL) < end)
		if (ibv_poll_cq(cq, 1, &wc) == 1)
			return wc;
	CHECK(0, "no completion within 10 s");
	return wc;
}

static void expect(uint64_t wr_id, enum ibv_wc_status st)
{
	struct ibv_wc wc = next_wc();
	CHECK(wc.wr_id == wr_id && wc.status == st, "wr_id %lu: %s, expected wr_id %lu: %s",
	      (unsigned long)wc.wr_id, ibv_wc_status_str(wc.status), (unsigned long)wr_id,
	      ibv_wc_status_str(st));
}

static void post(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, void *at, uint32_t len,
		 uint32_t lkey, void *remote, uint32_t rkey)
{
	struct ibv_sge s = { (uintptr_t)at, len, lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.rdma.remote_addr = (uintptr_t)remote;
	w.wr.rdma.rkey = rkey;
	CHECK(!ibv_post_send(qp, &w, &bad), "ibv_post_send failed");
}

static int advise(int advice, uint32_t flags, void *at, uint32_t len, uint32_t lkey, uint32_t n)
{
	struct ibv_sge s = { (uintptr_t)at, len, lkey };
	return ibv_advise_mr(pd, advice, flags, &s, n);
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: odp <ibdev> [gid index]");
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

	struct ibv_device_attr_ex ax;
	CHECK(!ibv_query_device_ex(ctx, NULL, &ax), "ibv_query_device_ex failed");
	CHECK(ax.odp_caps.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT),
	      "general_caps %#llx", (unsigned long long)ax.odp_caps.general_caps);
	uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		      IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	CHECK(ax.odp_caps.per_transport_caps.rc_odp_caps == rc, "rc_odp_caps %#x",
	      ax.odp_caps.per_transport_caps.rc_odp_caps);
	CHECK(ax.odp_caps.per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND, "ud_odp_caps");

	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK(pd && cq, "PD/CQ failed");
	long page = sysconf(_SC_PAGESIZE);

	/* Implicit ODP: the whole address space, any buffer. */
	errno = 0;
	CHECK(!ibv_reg_mr_iova(pd, NULL, SIZE_MAX, 4096, IBV_ACCESS_ON_DEMAND) && errno == EINVAL,
	      "implicit ODP at a nonzero iova: errno %d", errno);
	errno = 0;
	CHECK(!ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
	      "a pinned registration of the whole address space: errno %d", errno);
	struct ibv_mr *imr = ibv_reg_mr(pd, NULL, SIZE_MAX, RW | IBV_ACCESS_ON_DEMAND);
	CHECK(imr, "implicit ODP registration failed: %m");
	CHECK(imr->addr == NULL && imr->length == SIZE_MAX, "implicit MR addr %p length %zu",
	      imr->addr, imr->length);
	char *abuf = calloc(1, 2 * LEN), *bbuf = calloc(1, 2 * LEN);
	struct ibv_mr *amr = ibv_reg_mr(pd, abuf, 2 * LEN, RW | IBV_ACCESS_ON_DEMAND);
	struct ibv_mr *ro = ibv_reg_mr(pd, abuf, LEN, IBV_ACCESS_ON_DEMAND);
	struct ibv_mr *pinned = ibv_reg_mr(pd, abuf, LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(amr && ro && pinned, "ibv_reg_mr failed: %m");

	/* Every QP (and so every ring mapping) before the hole is made, so
	 * that no mapping of this process lands in it. */
	struct ibv_qp *a, *b, *c, *e, *f, *g;
	pair(&a, &b);
	pair(&c, &e);
	pair(&f, &g);
	/* WRITE and READ through the implicit rkey, SEND through the implicit lkey. */
	memset(abuf, 'w', LEN);
	post(a, 1, IBV_WR_RDMA_WRITE, abuf, LEN, amr->lkey, bbuf, imr->rkey);
	expect(1, IBV_WC_SUCCESS);
	CHECK(!memcmp(bbuf, abuf, LEN), "WRITE through the implicit rkey: data differs");
	memset(bbuf + LEN, 'r', LEN);
	post(a, 2, IBV_WR_RDMA_READ, abuf + LEN, LEN, amr->lkey, bbuf + LEN, imr->rkey);
	expect(2, IBV_WC_SUCCESS);
	CHECK(!memcmp(abuf + LEN, bbuf + LEN, LEN), "READ through the implicit rkey: data differs");
	struct ibv_sge rs = { (uintptr_t)abuf, LEN, amr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 3, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(!ibv_post_recv(a, &rw, &rbad), "ibv_post_recv failed");
	memset(bbuf, 's', LEN);
	post(b, 4, IBV_WR_SEND, bbuf, LEN, imr->lkey, NULL, 0);
	struct ibv_wc w1 = next_wc(), w2 = next_wc();
	CHECK(w1.status == IBV_WC_SUCCESS && w2.status == IBV_WC_SUCCESS && w1.wr_id + w2.wr_id == 7,
	      "SEND through the implicit lkey: %s / %s", ibv_wc_status_str(w1.status),
	      ibv_wc_status_str(w2.status));
	CHECK(!memcmp(abuf, bbuf, LEN), "SEND data differs");

	/* Three pages, the middle one unmapped: only ODP registers it. */
	char *hole = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(hole != MAP_FAILED, "mmap failed");
	CHECK(!munmap(hole + page, page), "munmap failed");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, hole, 3 * page, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
	      "a pinned registration over a hole: errno %d", errno);
	struct ibv_mr *holey = ibv_reg_mr(pd, hole, 3 * page, IBV_ACCESS_LOCAL_WRITE |
					  IBV_ACCESS_ON_DEMAND);
	CHECK(holey, "ODP registration over a hole failed: %m");

	/* ibv_advise_mr. */
	enum { PF = IBV_ADVISE_MR_ADVICE_PREFETCH, PFW = IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
	       NOF = IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, SYNC = IBV_ADVISE_MR_FLAG_FLUSH };
	for (int adv = PF; adv <= NOF; adv++)
		for (uint32_t f = 0; f <= SYNC; f++) {
			CHECK(!advise(adv, f, abuf, LEN, amr->lkey, 1), "advice %d flags %u", adv, f);
			CHECK(!advise(adv, f, bbuf, LEN, imr->lkey, 1), "implicit: advice %d flags %u",
			      adv, f);
		}
	int r = advise(PF, SYNC, hole + page, 64, holey->lkey, 1);
	CHECK(r == EFAULT, "sync prefetch of a hole: %d", r);
	CHECK(advise(PF, SYNC, hole + page, 64, imr->lkey, 1) == EFAULT, "implicit: of a hole");
	CHECK(!advise(PF, 0, hole + page, 64, holey->lkey, 1), "async prefetch of a hole fails");
	CHECK(!advise(NOF, SYNC, hole + page, 64, holey->lkey, 1), "no-fault prefetch of a hole");
	CHECK(!advise(PF, SYNC, hole, 64, holey->lkey, 1), "sync prefetch of the mapped page");
	CHECK(advise(PF, SYNC, abuf + 2 * LEN, 64, amr->lkey, 1) == EFAULT, "outside the region");
	CHECK(advise(3, SYNC, abuf, LEN, amr->lkey, 1) == EOPNOTSUPP, "advice 3");
	CHECK(advise(PF, 2, abuf, LEN, amr->lkey, 1) == EINVAL, "unknown flag");
	CHECK(advise(PF, SYNC, abuf, LEN, amr->lkey, 0) == EINVAL, "no SGE");
	CHECK(advise(PF, SYNC, abuf, LEN, pinned->lkey, 1) == ENOENT, "sync: a pinned region");
	/* Asynchronous advice as rxe: best-effort on any region of the PD
	 * with local write, ordinary ones too; EINVAL for other keys. */
	for (int adv = PF; adv <= NOF; adv++) {
		CHECK(!advise(adv, 0, abuf, LEN, pinned->lkey, 1), "async %d: a pinned region", adv);
		CHECK(advise(adv, 0, abuf, LEN, ro->lkey, 1) == EINVAL, "async %d: read-only", adv);
		CHECK(advise(adv, 0, abuf, LEN, 0x1234567, 1) == EINVAL, "async %d: no lkey", adv);
	}
	CHECK(advise(PF, SYNC, abuf, LEN, 0x1234567, 1) == ENOENT, "sync: no such lkey");
	CHECK(advise(PFW, SYNC, abuf, LEN, ro->lkey, 1) == ENOENT, "PREFETCH_WRITE, read-only");
	CHECK(!advise(PF, SYNC, abuf, LEN, ro->lkey, 1), "PREFETCH of a read-only region");

	/* A remote WRITE into the hole: a remote access error for the writer. */
	post(a, 5, IBV_WR_RDMA_WRITE, abuf, 64, amr->lkey, hole + page, imr->rkey);
	expect(5, IBV_WC_REM_ACCESS_ERR);
	/* A SEND from the hole: a local protection error. */
	post(c, 6, IBV_WR_SEND, hole + page, 64, holey->lkey, NULL, 0);
	expect(6, IBV_WC_LOC_PROT_ERR);
	/* The device serves on: a new pair writes through the implicit rkey. */
	memset(abuf, 'z', 64);
	post(f, 7, IBV_WR_RDMA_WRITE, abuf, 64, amr->lkey, bbuf, imr->rkey);
	struct ibv_wc wc;
	do
		wc = next_wc();
	while (wc.wr_id != 7); /* flushes of the failed QPs come first */
	CHECK(wc.status == IBV_WC_SUCCESS && !memcmp(bbuf, abuf, 64), "WRITE after the errors: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(!ibv_query_device_ex(ctx, NULL, &ax), "the device stopped answering");

	struct ibv_qp *qps[] = { a, b, c, e, f, g };
	for (int i = 0; i < 6; i++)
		CHECK(!ibv_destroy_qp(qps[i]), "ibv_destroy_qp failed");
	struct ibv_mr *mrs[] = { holey, imr, amr, ro, pinned };
	for (int i = 0; i < 5; i++)
		CHECK(!ibv_dereg_mr(mrs[i]), "ibv_dereg_mr failed");
	CHECK(!ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd), "teardown failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("odp: ok\n");
	return 0;
}
