/*
 * The device goes away under an open context (the test kills rxud after
 * this program prints READY). With work outstanding on an RC QP (three
 * receives nobody sends to, three sends the peer has no receive for), the
 * program waits in one of two ways:
 *   cq_event: blocked in ibv_get_cq_event on an armed CQ: it must return -1;
 *   poll:     busy-polling the CQ: the outstanding WRs come back with
 *             IBV_WC_WR_FLUSH_ERR, then ibv_poll_cq fails (< 0).
 * Then ibv_get_async_event must give IBV_EVENT_DEVICE_FATAL, and every
 * destroy and ibv_close_device must succeed. Prints one line per step.
 *
 * usage: device_fatal <ibdev> cq_event|poll; exit 0 on success.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp failed");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "INIT failed");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = *gid, .sgid_index = 0, .hop_limit = 64 } },
	};
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7; /* infinite: the sends stay outstanding */
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS failed");
}

int main(int argc, char **argv)
{
	CHECK(argc == 3, "usage: device_fatal <ibdev> cq_event|poll");
	int use_channel = !strcmp(argv[2], "cq_event");
	/* Never outlive the test, whatever happens. */
	alarm(30);

	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list, "ibv_get_device_list failed");
	struct ibv_device *dev = NULL;
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			dev = list[i];
	CHECK(dev, "no device %s", argv[1]);
	struct ibv_context *ctx = ibv_open_device(dev);
	CHECK(ctx, "ibv_open_device failed");
	ibv_free_device_list(list);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd failed");
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr failed");
	struct ibv_comp_channel *ch = use_channel ? ibv_create_comp_channel(ctx) : NULL;
	CHECK(!use_channel || ch, "ibv_create_comp_channel failed");
	struct ibv_cq *cq_a = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *cq_b = ibv_create_cq(ctx, 64, NULL, ch, 0);
	CHECK(cq_a && cq_b, "ibv_create_cq failed");
	struct ibv_qp *a = rc_qp(pd, cq_a), *b = rc_qp(pd, cq_b);
	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, 0, &gid), "ibv_query_gid failed");
	connect_qp(a, b->qp_num, &gid);
	connect_qp(b, a->qp_num, &gid);

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	for (int i = 0; i < 3; i++) {
		struct ibv_recv_wr r = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_recv(a, &r, &bad), "ibv_post_recv failed");
	}
	for (int i = 0; i < 3; i++) {
		struct ibv_send_wr s = { .wr_id = 1 + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		CHECK(!ibv_post_send(a, &s, &bad), "ibv_post_send failed");
	}
	printf("READY\n");
	fflush(stdout);

	if (use_channel) {
		CHECK(!ibv_req_notify_cq(cq_b, 0), "ibv_req_notify_cq failed");
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		int r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
		printf("get_cq_event %d\n", r);
		CHECK(r == -1, "ibv_get_cq_event returned %d after the device went", r);
	} else {
		int flushed = 0, r;
		struct ibv_wc wc[4];
		time_t end = time(NULL) + 20;
		/* Busy-poll, as a data path does, until the CQ says it failed. */
		while ((r = ibv_poll_cq(cq_a, 4, wc)) >= 0) {
			CHECK(time(NULL) < end, "ibv_poll_cq never failed (%d flushed)", flushed);
			for (int i = 0; i < r; i++) {
				CHECK(wc[i].status == IBV_WC_WR_FLUSH_ERR, "wr %llu: %s",
				      (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
				flushed++;
			}
		}
		printf("flushed %d, then poll_cq %d\n", flushed, r);
		CHECK(flushed == 6, "expected 6 flushed WRs");
	}

	struct ibv_async_event ev;
	CHECK(!ibv_get_async_event(ctx, &ev), "ibv_get_async_event failed");
	printf("async event %d (%s)\n", ev.event_type, ibv_event_type_str(ev.event_type));
	CHECK(ev.event_type == IBV_EVENT_DEVICE_FATAL, "not DEVICE_FATAL");
	ibv_ack_async_event(&ev);

	struct ibv_send_wr s = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
	int pr = ibv_post_send(a, &s, &bad);
	printf("post_send after %d\n", pr);
	CHECK(pr != 0, "ibv_post_send succeeded on a dead device");

	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "ibv_destroy_qp failed");
	CHECK(!ibv_destroy_cq(cq_a) && !ibv_destroy_cq(cq_b), "ibv_destroy_cq failed");
	if (ch)
		CHECK(!ibv_destroy_comp_channel(ch), "ibv_destroy_comp_channel failed");
	CHECK(!ibv_dereg_mr(mr), "ibv_dereg_mr failed");
	CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	printf("OK\n");
	return 0;
}
