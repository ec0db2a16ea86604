/*
 * Completion timestamps: ibv_query_device_ex reports the HCA clock
 * (hca_core_clock in kHz, completion_timestamp_mask), ibv_query_rt_values_ex
 * reads it, and a CQ created with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP[_WALLCLOCK]
 * gives every completion its time: a UD QP sends to itself and each
 * completion's stamps must lie between readings of the same clocks taken
 * before the post and after the poll. A CQ without the flags reads 0, and
 * the flags rxu does not fill are EOPNOTSUPP.
 *
 * usage: cq_timestamps <ibdev> [gid index]; exit 0 on success.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QKEY 0x11111111
#define LEN 64
#define GRH 40

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static uint64_t raw_clock(struct ibv_context *ctx)
{
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	CHECK(!ibv_query_rt_values_ex(ctx, &v), "ibv_query_rt_values_ex failed");
	CHECK(v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK, "raw clock not reported");
	return (uint64_t)v.raw_clock.tv_sec * 1000000000ull + (uint64_t)v.raw_clock.tv_nsec;
}

static uint64_t wall_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

struct stamps {
	int n;
	uint64_t ts[2], wall[2];
	enum ibv_wc_opcode op[2];
};

/* Polls (bounded) until two completions arrived, reading both stamps. */
static void poll_two(struct ibv_cq_ex *cq, struct stamps *s)
{
	struct ibv_poll_cq_attr pa = {};
	time_t end = time(NULL) + 10;
	s->n = 0;
	while (s->n < 2 && time(NULL) < end) {
		if (ibv_start_poll(cq, &pa) != 0)
			continue;
		do {
			CHECK(cq->status == IBV_WC_SUCCESS, "completion status %s",
			      ibv_wc_status_str(cq->status));
			s->op[s->n] = ibv_wc_read_opcode(cq);
			s->ts[s->n] = ibv_wc_read_completion_ts(cq);
			s->wall[s->n] = ibv_wc_read_completion_wallclock_ns(cq);
			s->n++;
		} while (s->n < 2 && ibv_next_poll(cq) == 0);
		ibv_end_poll(cq);
	}
	CHECK(s->n == 2, "%d of 2 completions within 10 s", s->n);
}

/* A UD QP on cq sends one message to itself; returns both completions. */
static void self_send(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq_ex *cq,
		      int gidx, struct stamps *s)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD, .sq_sig_all = 1,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp failed");
	char *buf = calloc(1, 2 * (LEN + GRH));
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 2 * (LEN + GRH), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr failed");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
	      "INIT failed");
	a.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE), "RTR failed");
	a.qp_state = IBV_QPS_RTS;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "RTS failed");
	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), "ibv_query_gid failed");
	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 64 },
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "ibv_create_ah failed");
	struct ibv_sge rs = { (uintptr_t)buf, LEN + GRH, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(!ibv_post_recv(qp, &rw, &rbad), "ibv_post_recv failed");
	struct ibv_sge ss = { (uintptr_t)buf + LEN + GRH, LEN, mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND },
			   *sbad;
	sw.wr.ud.ah = ah;
	sw.wr.ud.remote_qpn = qp->qp_num;
	sw.wr.ud.remote_qkey = QKEY;
	CHECK(!ibv_post_send(qp, &sw, &sbad), "ibv_post_send failed");
	poll_two(cq, s);
	CHECK(!ibv_destroy_ah(ah) && !ibv_destroy_qp(qp) && !ibv_dereg_mr(mr), "teardown failed");
	free(buf);
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: cq_timestamps <ibdev> [gid index]");
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

	struct ibv_device_attr_ex ax;
	CHECK(!ibv_query_device_ex(ctx, NULL, &ax), "ibv_query_device_ex failed");
	CHECK(ax.hca_core_clock == 1000000, "hca_core_clock %llu kHz",
	      (unsigned long long)ax.hca_core_clock);
	CHECK(ax.completion_timestamp_mask == UINT64_MAX, "completion_timestamp_mask %llx",
	      (unsigned long long)ax.completion_timestamp_mask);

	/* ibv_query_rt_values_ex: mask handling as mlx5's. */
	struct ibv_values_ex v = { .comp_mask = 0 };
	CHECK(!ibv_query_rt_values_ex(ctx, &v) && v.comp_mask == 0, "empty comp_mask");
	v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK | IBV_VALUES_MASK_RESERVED;
	CHECK(ibv_query_rt_values_ex(ctx, &v) == EINVAL, "unknown comp_mask bit accepted");
	uint64_t c0 = raw_clock(ctx), c1 = raw_clock(ctx);
	CHECK(c0 > 0 && c1 >= c0, "raw clock %llu then %llu", (unsigned long long)c0,
	      (unsigned long long)c1);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd failed");

	/* Unfilled flags stay refused. */
	struct ibv_cq_init_attr_ex ca = { .cqe = 8, .wc_flags = IBV_WC_EX_WITH_CVLAN };
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EOPNOTSUPP, "cvlan CQ: errno %d", errno);

	uint64_t flags[3] = {
		IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
		IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
		IBV_WC_EX_WITH_BYTE_LEN,
	};
	uint64_t max_lat = 0;
	for (int i = 0; i < 3; i++) {
		ca.wc_flags = flags[i] | IBV_WC_EX_WITH_BYTE_LEN;
		struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
		CHECK(cq, "ibv_create_cq_ex(wc_flags %#llx) failed: %m",
		      (unsigned long long)ca.wc_flags);
		struct stamps s;
		uint64_t t0 = raw_clock(ctx), w0 = wall_ns();
		self_send(ctx, pd, cq, gidx, &s);
		uint64_t t1 = raw_clock(ctx), w1 = wall_ns();
		for (int k = 0; k < 2; k++) {
			if (flags[i] & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
				CHECK(s.ts[k] >= t0 && s.ts[k] <= t1 && s.wall[k] >= w0 && s.wall[k] <= w1,
				      "flags %#llx: completion %d (opcode %d) stamped %llu/%llu, "
				      "outside %llu..%llu / %llu..%llu",
				      (unsigned long long)flags[i], k, s.op[k],
				      (unsigned long long)s.ts[k], (unsigned long long)s.wall[k],
				      (unsigned long long)t0, (unsigned long long)t1,
				      (unsigned long long)w0, (unsigned long long)w1);
			else
				CHECK(s.ts[k] == 0 && s.wall[k] == 0, "a CQ without timestamps read %llu",
				      (unsigned long long)s.ts[k]);
			if (s.ts[k] && s.ts[k] - t0 > max_lat)
				max_lat = s.ts[k] - t0;
		}
		/* The old poll interface works on a stamped CQ too. */
		struct ibv_wc wc;
		CHECK(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc) == 0, "a third completion");
		CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), "ibv_destroy_cq failed");
	}

	CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("cq_timestamps: ok (hca_core_clock %llu kHz, post to completion <= %llu ns)\n",
	       (unsigned long long)ax.hca_core_clock, (unsigned long long)max_lat);
	return 0;
}
