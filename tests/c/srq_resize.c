/*
 * ibv_modify_srq on one rxu device: an RC QP on an SRQ receives from
 * another RC QP. IBV_SRQ_MAX_WR grows the SRQ while receives are posted
 * and sends are arriving (the daemon consuming receives meanwhile); every
 * receive is consumed, in posting order, with its data. Shrinking below
 * what is posted, below an armed limit, to 0 or above max_srq_wr is
 * EINVAL; shrinking to exactly what is posted works; IBV_SRQ_LIMIT alone
 * and together with MAX_WR; ibv_query_srq shows each change; the armed
 * limit raises IBV_EVENT_SRQ_LIMIT_REACHED. An SRQ takes max_wr receives
 * outstanding (posted, not yet used by a message), then ENOMEM, however
 * long the daemon had to take them in, as rxe's SRQ queue.
 *
 * usage: srq_resize <ibdev> [gid index]; exit 0 when every check holds.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "line %d: ", __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

#define MSG 64
#define TOTAL 40

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static int gidx;
static struct ibv_cq *cq_a, *cq_b;
static struct ibv_qp *qa, *qb;
static struct ibv_srq *srq;
static struct ibv_mr *mr_a, *mr_b;
static unsigned char *buf_a, *buf_b;
static int checks;

static struct ibv_qp *make_qp(struct ibv_cq *cq, struct ibv_srq *s)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .srq = s, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = TOTAL, .max_recv_wr = s ? 0 : 1, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp failed: %m");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS), "INIT failed");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	/* A send that finds no receive is retried after an RNR NAK, for ever
	 * (rnr_retry 7), so sends may run ahead of the receives. */
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 64 } },
	};
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			     IBV_QP_MIN_RNR_TIMER), "RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS failed");
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

/* Receive i lands in slot i of B's buffer. */
static void post_recvs(int from, int to)
{
	for (int i = from; i < to; i++) {
		struct ibv_sge sge = { (uintptr_t)(buf_b + i * MSG), MSG, mr_b->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_srq_recv(srq, &wr, &bad), "post receive %d failed", i);
	}
}

/* Receive i does not fit: max_wr receives are outstanding. The daemon
 * first gets time to take the posted ones into the transport. */
static void expect_full(int i)
{
	usleep(100000);
	struct ibv_sge sge = { (uintptr_t)(buf_b + i * MSG), MSG, mr_b->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
	int rc = ibv_post_srq_recv(srq, &wr, &bad);
	CHECK(rc == ENOMEM && bad == &wr, "receive %d beyond max_wr: returned %d (%s)", i, rc,
	      strerror(rc));
	checks++;
}

/* Message i carries MSG bytes of value i + 1. */
static void post_sends(int from, int to)
{
	for (int i = from; i < to; i++) {
		memset(buf_a + i * MSG, i + 1, MSG);
		struct ibv_sge sge = { (uintptr_t)(buf_a + i * MSG), MSG, mr_a->lkey };
		struct ibv_send_wr wr = { .wr_id = 1000 + i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		CHECK(!ibv_post_send(qa, &wr, &bad), "post send %d failed", i);
	}
}

/* Receives from..to-1 complete in order, each holding its message. */
static void expect_recvs(int from, int to)
{
	for (int i = from; i < to; i++) {
		struct ibv_wc wc = poll1(cq_b);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV,
		      "receive %d: status %s opcode %d", i, ibv_wc_status_str(wc.status), wc.opcode);
		CHECK(wc.wr_id == (uint64_t)i, "receive %d: completed wr_id %llu (order lost)", i,
		      (unsigned long long)wc.wr_id);
		CHECK(wc.byte_len == MSG, "receive %d: %u bytes", i, wc.byte_len);
		for (int k = 0; k < MSG; k++)
			CHECK(buf_b[i * MSG + k] == (unsigned char)(i + 1), "receive %d: byte %d is %u",
			      i, k, buf_b[i * MSG + k]);
		wc = poll1(cq_a);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1000 + (uint64_t)i,
		      "send %d: wr_id %llu status %s", i, (unsigned long long)wc.wr_id,
		      ibv_wc_status_str(wc.status));
		checks++;
	}
}

static void modify(uint32_t max_wr, uint32_t limit, int mask, int want, const char *what)
{
	struct ibv_srq_attr a = { .max_wr = max_wr, .srq_limit = limit };
	int rc = ibv_modify_srq(srq, &a, mask);
	CHECK(rc == want, "%s: ibv_modify_srq returned %d (%s), want %d", what, rc, strerror(rc),
	      want);
	checks++;
}

static void expect_attr(uint32_t max_wr, uint32_t limit)
{
	struct ibv_srq_attr q;
	CHECK(!ibv_query_srq(srq, &q), "ibv_query_srq failed");
	CHECK(q.max_wr == max_wr && q.srq_limit == limit && q.max_sge == 1,
	      "query: max_wr %u srq_limit %u max_sge %u, want %u %u 1", q.max_wr, q.srq_limit,
	      q.max_sge, max_wr, limit);
	checks++;
}

static void expect_limit_event(void)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	CHECK(poll(&p, 1, 10000) == 1, "no async event in 10 s");
	struct ibv_async_event ev;
	CHECK(!ibv_get_async_event(ctx, &ev), "ibv_get_async_event failed");
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "async event %s", ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	checks++;
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: srq_resize <ibdev> [gid index]");
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
	struct ibv_device_attr da;
	CHECK(!ibv_query_device(ctx, &da), "ibv_query_device failed");
	CHECK(da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, "no IBV_DEVICE_SRQ_RESIZE");
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), "ibv_query_gid failed");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd failed");
	buf_a = calloc(TOTAL, MSG);
	buf_b = calloc(TOTAL, MSG);
	mr_a = ibv_reg_mr(pd, buf_a, TOTAL * MSG, IBV_ACCESS_LOCAL_WRITE);
	mr_b = ibv_reg_mr(pd, buf_b, TOTAL * MSG, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr_a && mr_b, "ibv_reg_mr failed");
	cq_a = ibv_create_cq(ctx, 2 * TOTAL, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 2 * TOTAL, NULL, NULL, 0);
	CHECK(cq_a && cq_b, "ibv_create_cq failed");
	struct ibv_srq_init_attr si = { .attr = { .max_wr = 8, .max_sge = 1 } };
	srq = ibv_create_srq(pd, &si);
	CHECK(srq, "ibv_create_srq failed: %m");
	expect_attr(8, 0);
	qa = make_qp(cq_a, NULL);
	qb = make_qp(cq_b, srq);
	connect_qp(qa, qb->qp_num);
	connect_qp(qb, qa->qp_num);

	/* Grow with receives posted and sends arriving: 8 receives, 16
	 * sends, the resize, 8 receives more. */
	post_recvs(0, 8);
	expect_full(8);
	modify(4, 0, IBV_SRQ_MAX_WR, EINVAL, "shrink below the 8 posted");
	post_sends(0, 16);
	modify(32, 0, IBV_SRQ_MAX_WR, 0, "grow to 32");
	post_recvs(8, 16);
	expect_attr(32, 0);
	expect_recvs(0, 16);

	/* Grow again with nothing in flight, then fill the new room. */
	post_recvs(16, 24);
	modify(64, 0, IBV_SRQ_MAX_WR, 0, "grow to 64");
	post_recvs(24, 36);
	expect_attr(64, 0);
	post_sends(16, 32);
	expect_recvs(16, 32);

	/* Four receives left: shrink. */
	modify(3, 0, IBV_SRQ_MAX_WR, EINVAL, "shrink below the 4 posted");
	modify(0, 0, IBV_SRQ_MAX_WR, EINVAL, "max_wr 0");
	modify(da.max_srq_wr + 1, 0, IBV_SRQ_MAX_WR, EINVAL, "max_wr above max_srq_wr");
	modify(4, 0, IBV_SRQ_MAX_WR, 0, "shrink to the 4 posted");
	expect_attr(4, 0);
	expect_full(36);
	modify(4, 5, IBV_SRQ_LIMIT, EINVAL, "limit above max_wr");
	modify(4, 0, 1 << 7, EINVAL, "unknown mask bit");
	modify(4, 2, IBV_SRQ_LIMIT, 0, "arm the limit at 2");
	expect_attr(4, 2);
	modify(1, 0, IBV_SRQ_MAX_WR, EINVAL, "max_wr below the armed limit");
	/* Three messages leave one receive: below the limit. */
	post_sends(32, 35);
	expect_recvs(32, 35);
	expect_limit_event();
	expect_attr(4, 0);

	/* The one left and three more fill max_wr 4. MAX_WR and LIMIT
	 * together, with four receives posted (more than the limit: rxu
	 * raises the event as soon as an armed SRQ holds fewer, rxe when it
	 * next consumes one), then a fifth in the new room. */
	post_recvs(36, 39);
	expect_full(39);
	modify(16, 3, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT, 0, "grow to 16 and arm at 3");
	expect_attr(16, 3);
	post_recvs(39, 40);
	post_sends(35, 40);
	expect_recvs(35, 40);
	expect_limit_event();

	CHECK(!ibv_destroy_qp(qa) && !ibv_destroy_qp(qb), "destroy QPs failed");
	CHECK(!ibv_destroy_srq(srq), "ibv_destroy_srq failed");
	CHECK(!ibv_destroy_cq(cq_a) && !ibv_destroy_cq(cq_b), "destroy CQs failed");
	CHECK(!ibv_dereg_mr(mr_a) && !ibv_dereg_mr(mr_b), "dereg failed");
	CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("srq_resize: ok (%d checks)\n", checks);
	return 0;
}
