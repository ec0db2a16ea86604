/*
 * Parent domains (ibv_alloc_parent_domain) with custom allocators: the
 * rings (rxu's queue buffers) of a CQ, two RC QPs and an SRQ created on the
 * parent domain live in memory the allocator hands out (asked for with the
 * page size as alignment, resource types 1 CQ, 2 SQ, 3 RQ, 4 SRQ), SEND and
 * RDMA WRITE work through them, and each buffer comes back to free()
 * zeroed once its object is destroyed. Also: IBV_ALLOCATOR_USE_DEFAULT, an
 * allocator that fails (ENOMEM), a parent domain without allocators, and
 * the errnos of misuse (EINVAL) and of deallocation in use (EBUSY).
 *
 * usage: parent_domain <ibdev> [gid index]; exit 0 on success.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)
#define MAXBUF 16
#define LEN 256

static struct ibv_context *ctx;
static union ibv_gid gid;
static int gidx;

/* The allocator's book: what it handed out, and what came back. */
struct book {
	int mode; /* 0 memory, 1 USE_DEFAULT, 2 fail */
	int allocs, frees, bad_align;
	int by_type[5];
	struct { void *p; size_t len; uint64_t type; int freed; } buf[MAXBUF];
};

static void *my_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
		      uint64_t resource_type)
{
	struct book *b = pd_context;
	if (b->mode == 1)
		return IBV_ALLOCATOR_USE_DEFAULT;
	if (b->mode == 2)
		return NULL;
	if (alignment != (size_t)sysconf(_SC_PAGESIZE) || size % alignment)
		b->bad_align++;
	CHECK(b->allocs < MAXBUF, "too many allocations");
	void *p = NULL;
	CHECK(!posix_memalign(&p, alignment, size), "posix_memalign failed");
	memset(p, 0, size);
	b->buf[b->allocs].p = p;
	b->buf[b->allocs].len = size;
	b->buf[b->allocs].type = resource_type;
	if (resource_type < 5)
		b->by_type[resource_type]++;
	b->allocs++;
	return p;
}

static void my_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	struct book *b = pd_context;
	for (int i = 0; i < b->allocs; i++)
		if (b->buf[i].p == ptr) {
			CHECK(!b->buf[i].freed && b->buf[i].type == resource_type,
			      "free of buffer %d: freed %d, type %llu", i, b->buf[i].freed,
			      (unsigned long long)resource_type);
			for (size_t k = 0; k < b->buf[i].len; k++)
				CHECK(!((char *)ptr)[k], "buffer %d came back with byte %zu set", i, k);
			b->buf[i].freed = 1;
			b->frees++;
			free(ptr);
			return;
		}
	CHECK(0, "free of a pointer never allocated");
}

/* Whether the allocator's buffer i holds something (a ring header). */
static int in_use(struct book *b, int i)
{
	for (size_t k = 0; k < b->buf[i].len; k++)
		if (((char *)b->buf[i].p)[k])
			return 1;
	return 0;
}

static struct ibv_pd *parent(struct ibv_pd *pd, struct book *b)
{
	struct ibv_parent_domain_init_attr a = {
		.pd = pd, .comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
				       IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = my_alloc, .free = my_free, .pd_context = b,
	};
	struct ibv_pd *p = ibv_alloc_parent_domain(ctx, &a);
	CHECK(p, "ibv_alloc_parent_domain failed: %m");
	CHECK(p->context == ctx && p->handle == pd->handle, "parent domain fields");
	return p;
}

static struct ibv_cq_ex *cq_on(struct ibv_pd *pdom)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = pdom,
	};
	return ibv_create_cq_ex(ctx, &ca);
}

static struct ibv_qp *rc_qp(struct ibv_pd *pdom, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	return ibv_create_qp(pdom, &ia);
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS), "INIT failed");
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

/* Polls n successful completions (10 s at most) through the extended CQ. */
static void collect(struct ibv_cq_ex *cq, int n)
{
	struct ibv_poll_cq_attr pa = {};
	time_t end = time(NULL) + 10;
	int have = 0;
	while (have < n) {
		CHECK(time(NULL) < end, "%d of %d completions after 10 s", have, n);
		if (ibv_start_poll(cq, &pa))
			continue;
		do {
			CHECK(cq->status == IBV_WC_SUCCESS, "wr_id %lu: %s", (unsigned long)cq->wr_id,
			      ibv_wc_status_str(cq->status));
			have++;
		} while (have < n && !ibv_next_poll(cq));
		ibv_end_poll(cq);
	}
}

/* SEND a->b (received through b's SRQ), SEND b->a, RDMA WRITE a->b. */
static void traffic(struct ibv_pd *pdom, struct ibv_cq_ex *cq, struct ibv_qp *a, struct ibv_qp *b,
		    struct ibv_srq *srq)
{
	char *buf = calloc(1, 4 * LEN);
	struct ibv_mr *mr = ibv_reg_mr(pdom, buf, 4 * LEN, IBV_ACCESS_LOCAL_WRITE |
					IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr, "ibv_reg_mr on the parent domain failed: %m");
	CHECK(mr->pd == pdom, "mr->pd is not the parent domain");
	struct ibv_sge rs = { (uintptr_t)(buf + LEN), LEN, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(!ibv_post_srq_recv(srq, &rw, &rbad), "ibv_post_srq_recv failed");
	struct ibv_sge ra = { (uintptr_t)(buf + 3 * LEN), LEN, mr->lkey };
	struct ibv_recv_wr rwa = { .wr_id = 2, .sg_list = &ra, .num_sge = 1 };
	CHECK(!ibv_post_recv(a, &rwa, &rbad), "ibv_post_recv failed");
	memset(buf, 'a', LEN);
	memset(buf + 2 * LEN, 'b', LEN);
	struct ibv_sge sa = { (uintptr_t)buf, LEN, mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 3, .sg_list = &sa, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sbad;
	CHECK(!ibv_post_send(a, &sw, &sbad), "post SEND a->b failed");
	struct ibv_sge sb = { (uintptr_t)(buf + 2 * LEN), LEN, mr->lkey };
	struct ibv_send_wr sw2 = { .wr_id = 4, .sg_list = &sb, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	CHECK(!ibv_post_send(b, &sw2, &sbad), "post SEND b->a failed");
	collect(cq, 4);
	CHECK(!memcmp(buf + LEN, buf, LEN) && !memcmp(buf + 3 * LEN, buf + 2 * LEN, LEN),
	      "SEND data differs");
	memset(buf, 'w', LEN);
	struct ibv_send_wr ww = { .wr_id = 5, .sg_list = &sa, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	ww.wr.rdma.remote_addr = (uintptr_t)(buf + LEN);
	ww.wr.rdma.rkey = mr->rkey;
	CHECK(!ibv_post_send(a, &ww, &sbad), "post WRITE failed");
	collect(cq, 1);
	CHECK(!memcmp(buf + LEN, buf, LEN), "WRITE data differs");
	CHECK(!ibv_dereg_mr(mr), "ibv_dereg_mr failed");
	free(buf);
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: parent_domain <ibdev> [gid index]");
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
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd failed");

	/* Misuse: EINVAL. */
	struct ibv_parent_domain_init_attr bad = { .pd = NULL };
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &bad) && errno == EINVAL, "no pd: errno %d", errno);
	bad.pd = pd;
	bad.comp_mask = 1 << 2;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &bad) && errno == EINVAL, "comp_mask: errno %d", errno);
	bad.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS; /* without callbacks */
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &bad) && errno == EINVAL, "no callbacks: errno %d",
	      errno);
	struct ibv_cq_init_attr_ex ca = { .cqe = 4, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
					  .parent_domain = pd };
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EINVAL, "CQ on a plain PD: errno %d", errno);

	/* Custom allocators hold every ring. */
	struct book bk = { 0 };
	struct ibv_pd *pdom = parent(pd, &bk);
	struct ibv_parent_domain_init_attr nest = { .pd = pdom };
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &nest) && errno == EINVAL, "nested: errno %d", errno);
	struct ibv_cq_ex *cq = cq_on(pdom);
	CHECK(cq, "ibv_create_cq_ex on the parent domain failed: %m");
	CHECK(bk.allocs == 1 && bk.by_type[1] == 1, "CQ: %d allocations", bk.allocs);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pdom, &sa);
	CHECK(srq, "ibv_create_srq on the parent domain failed: %m");
	CHECK(bk.by_type[4] == 1, "SRQ ring not from the allocator");
	struct ibv_qp *a = rc_qp(pdom, ibv_cq_ex_to_cq(cq), NULL);
	struct ibv_qp *b = rc_qp(pdom, ibv_cq_ex_to_cq(cq), srq);
	CHECK(a && b, "ibv_create_qp on the parent domain failed: %m");
	CHECK(a->pd == pdom, "qp->pd is not the parent domain");
	/* a: SQ + RQ; b: SQ only (its receives go to the SRQ). */
	CHECK(bk.by_type[2] == 2 && bk.by_type[3] == 1 && bk.allocs == 5,
	      "QPs: %d SQ and %d RQ buffers, %d in all", bk.by_type[2], bk.by_type[3], bk.allocs);
	CHECK(!bk.bad_align, "a buffer asked with an alignment other than the page size");
	for (int i = 0; i < bk.allocs; i++)
		CHECK(in_use(&bk, i), "buffer %d (type %llu) holds no ring", i,
		      (unsigned long long)bk.buf[i].type);
	connect_qp(a, b->qp_num);
	connect_qp(b, a->qp_num);
	traffic(pdom, cq, a, b, srq);

	/* Deallocation in use: EBUSY. */
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "PD with a parent domain deallocated");
	CHECK(ibv_dealloc_pd(pdom) == EBUSY, "parent domain with objects deallocated");
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "ibv_destroy_qp failed");
	CHECK(bk.frees == 3, "%d buffers back after the QPs", bk.frees);
	CHECK(!ibv_destroy_srq(srq) && !ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), "teardown failed");
	CHECK(bk.frees == bk.allocs, "%d of %d buffers back", bk.frees, bk.allocs);
	CHECK(!ibv_dealloc_pd(pdom), "ibv_dealloc_pd(parent domain) failed");

	/* IBV_ALLOCATOR_USE_DEFAULT and a failing allocator. */
	struct book def = { .mode = 1 };
	pdom = parent(pd, &def);
	cq = cq_on(pdom);
	CHECK(cq, "CQ with USE_DEFAULT failed: %m");
	a = rc_qp(pdom, ibv_cq_ex_to_cq(cq), NULL);
	CHECK(a, "QP with USE_DEFAULT failed: %m");
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), "teardown failed");
	CHECK(def.frees == 0, "free called for default buffers");
	CHECK(!ibv_dealloc_pd(pdom), "ibv_dealloc_pd failed");
	struct book fail = { .mode = 2 };
	pdom = parent(pd, &fail);
	errno = 0;
	CHECK(!cq_on(pdom) && errno == ENOMEM, "CQ with a failing allocator: errno %d", errno);
	struct ibv_cq *plain = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	CHECK(plain, "ibv_create_cq failed");
	errno = 0;
	CHECK(!rc_qp(pdom, plain, NULL) && errno == ENOMEM, "QP with a failing allocator: errno %d",
	      errno);
	CHECK(!ibv_dealloc_pd(pdom), "ibv_dealloc_pd failed");

	/* No allocators: a parent domain is the PD it stands for. */
	struct ibv_parent_domain_init_attr plain_attr = { .pd = pd };
	pdom = ibv_alloc_parent_domain(ctx, &plain_attr);
	CHECK(pdom, "ibv_alloc_parent_domain without allocators failed: %m");
	cq = cq_on(pdom);
	CHECK(cq, "CQ on a parent domain without allocators failed: %m");
	a = rc_qp(pdom, ibv_cq_ex_to_cq(cq), NULL);
	b = rc_qp(pd, ibv_cq_ex_to_cq(cq), NULL);
	CHECK(a && b, "QPs failed: %m");
	struct ibv_srq *srq2 = ibv_create_srq(pdom, &sa);
	CHECK(srq2, "SRQ failed: %m");
	CHECK(!ibv_destroy_srq(srq2), "ibv_destroy_srq failed");
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b) && !ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) &&
	      !ibv_destroy_cq(plain), "teardown failed");
	CHECK(!ibv_dealloc_pd(pdom) && !ibv_dealloc_pd(pd), "ibv_dealloc_pd failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("parent_domain: ok (%d buffers from the allocator, all given back zeroed)\n",
	       bk.allocs);
	return 0;
}
