/*
 * Asynchronous events through the provider: an SRQ whose limit is armed
 * raises IBV_EVENT_SRQ_LIMIT_REACHED once an RC peer consumed enough of
 * its receives; ibv_get_async_event must name that SRQ, and destroying it
 * after ibv_ack_async_event must not block. Also: completion events of two
 * CQs sharing one channel (what perftest -e does), acknowledged and then
 * both CQs and the channel destroyed.
 *
 * usage: async_events <ibdev> [gid index]; exit 0 on success.
 */
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEN 64
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq, .recv_cq = rcq, .srq = srq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
		.cap = { .max_send_wr = 16, .max_recv_wr = srq ? 0 : 16, .max_send_sge = 1,
			 .max_recv_sge = srq ? 0 : 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp failed");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "INIT failed");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid, int gidx)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest, .rq_psn = 0,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = *gid, .sgid_index = gidx, .hop_limit = 64 } },
	};
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS failed");
}

/* Polls `cq` until `n` successful completions arrived (10 s at most). */
static void drain(struct ibv_cq *cq, int n)
{
	struct ibv_wc wc[8];
	time_t end = time(NULL) + 10;
	while (n > 0) {
		CHECK(time(NULL) < end, "%d completions missing after 10 s", n);
		int got = ibv_poll_cq(cq, 8, wc);
		CHECK(got >= 0, "ibv_poll_cq failed");
		for (int i = 0; i < got; i++)
			CHECK(wc[i].status == IBV_WC_SUCCESS, "completion: %s", ibv_wc_status_str(wc[i].status));
		n -= got;
	}
}

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1;
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: async_events <ibdev> [gid index]");
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
	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), "ibv_query_gid failed");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd failed");
	char *buf = calloc(1, 32 * LEN);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 32 * LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr failed");

	/* One channel, two CQs. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "ibv_create_comp_channel failed");
	struct ibv_cq *scq = ibv_create_cq(ctx, 32, (void *)1, ch, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 32, (void *)2, ch, 0);
	CHECK(scq && rcq, "ibv_create_cq failed");

	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq, "ibv_create_srq failed");
	struct ibv_qp *a = rc_qp(pd, scq, scq, NULL);
	struct ibv_qp *b = rc_qp(pd, rcq, rcq, srq);
	connect_qp(a, b->qp_num, &gid, gidx);
	connect_qp(b, a->qp_num, &gid, gidx);

	for (int i = 0; i < 8; i++) {
		struct ibv_sge sge = { (uintptr_t)buf + i * LEN, LEN, mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_srq_recv(srq, &rw, &bad), "ibv_post_srq_recv failed");
	}
	struct ibv_srq_attr lim = { .srq_limit = 4 };
	CHECK(!ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT), "arming the SRQ limit failed");
	struct ibv_srq_attr q;
	CHECK(!ibv_query_srq(srq, &q) && q.srq_limit == 4 && q.max_wr >= 16 && q.max_sge >= 1,
	      "ibv_query_srq: max_wr %u max_sge %u limit %u", q.max_wr, q.max_sge, q.srq_limit);
	CHECK(!ibv_req_notify_cq(scq, 0) && !ibv_req_notify_cq(rcq, 0), "ibv_req_notify_cq failed");

	for (int i = 0; i < 5; i++) {
		struct ibv_sge sge = { (uintptr_t)buf + (16 + i) * LEN, LEN, mr->lkey };
		struct ibv_send_wr w = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_SEND }, *bad;
		CHECK(!ibv_post_send(a, &w, &bad), "ibv_post_send failed");
	}

	/* Completion events: one per armed CQ, each naming its CQ. */
	int seen = 0;
	for (int k = 0; k < 2; k++) {
		CHECK(readable(ch->fd, 10000), "no completion event within 10 s");
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx), "ibv_get_cq_event failed");
		CHECK((ev_cq == scq && ev_ctx == (void *)1) || (ev_cq == rcq && ev_ctx == (void *)2),
		      "event for an unknown CQ %p", (void *)ev_cq);
		seen |= ev_cq == scq ? 1 : 2;
		ibv_ack_cq_events(ev_cq, 1);
	}
	CHECK(seen == 3, "events for both CQs expected");
	drain(scq, 5);
	drain(rcq, 5);

	/* 8 posted, 5 consumed: below the limit of 4. */
	CHECK(readable(ctx->async_fd, 10000), "no async event within 10 s");
	struct ibv_async_event ev;
	CHECK(!ibv_get_async_event(ctx, &ev), "ibv_get_async_event failed");
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "got %s for %p", ibv_event_type_str(ev.event_type), (void *)ev.element.srq);
	ibv_ack_async_event(&ev);

	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "ibv_destroy_qp failed");
	/* Returns at once: its one event was acknowledged. */
	CHECK(!ibv_destroy_srq(srq), "ibv_destroy_srq failed");
	CHECK(!ibv_destroy_cq(scq) && !ibv_destroy_cq(rcq), "ibv_destroy_cq failed");
	CHECK(!ibv_destroy_comp_channel(ch), "ibv_destroy_comp_channel failed");
	CHECK(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd), "teardown failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("async_events: ok\n");
	return 0;
}
