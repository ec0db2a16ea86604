/*
 * Completion channels with the kernel's semantics from the start, as UCX
 * and rust-ibverbs use them: ibv_create_comp_channel returns a real fd
 * (close-on-exec, not stdin) that keeps O_NONBLOCK set right after
 * creation; on the empty channel read() gives EAGAIN and poll() times
 * out, before any CQ exists and after; epoll can watch it from the start;
 * a CQ created on it does not change the fd; an armed CQ's completion
 * makes it readable, and ibv_get_cq_event returns that CQ and its
 * context; two CQs share one channel; ibv_destroy_comp_channel closes the
 * fd (stdin untouched), also for a channel that never had a CQ; a
 * blocking channel's ibv_get_cq_event waits for the event. A CQ armed for
 * solicited completions only (ibv_req_notify_cq(cq, 1)) is woken by the
 * receive of a SEND with IBV_SEND_SOLICITED, not by one without it nor
 * by a send completion, as on rxe.
 *
 * usage: comp_channel <ibdev> [gid index] [adopt]
 * "adopt": the provider's fallback without the preload, where the fd is
 * only real once a CQ exists: the checks before the first CQ are skipped.
 * Prints "comp_channel: ok" and exits 0 on success.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LEN 64
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "line %d: ", __LINE__); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
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

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, ms);
	CHECK(n >= 0, "poll: %s", strerror(errno));
	return n == 1 && (p.revents & POLLIN);
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

/* The fd is a channel of the kernel's kind: open, close-on-exec, not one
 * of the standard streams. */
static void real_fd(int fd)
{
	CHECK(fd > 2, "channel fd is %d", fd);
	int fl = fcntl(fd, F_GETFD);
	CHECK(fl >= 0, "channel fd %d is not open: %s", fd, strerror(errno));
	CHECK(fl & FD_CLOEXEC, "channel fd %d is not close-on-exec", fd);
}

/* On the empty non-blocking channel: read() EAGAIN, poll() times out,
 * ibv_get_cq_event fails without blocking. */
static void empty(struct ibv_comp_channel *ch)
{
	char b[8];
	errno = 0;
	CHECK(read(ch->fd, b, sizeof b) == -1 && errno == EAGAIN, "read of an empty channel: %s",
	      strerror(errno));
	CHECK(!readable(ch->fd, 100), "an empty channel polls readable");
	struct ibv_cq *c;
	void *x;
	CHECK(ibv_get_cq_event(ch, &c, &x) == -1, "ibv_get_cq_event on an empty channel");
}

static void send_flags(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, int i, int flags)
{
	struct ibv_sge sge = { (uintptr_t)buf + i * LEN, LEN, mr->lkey };
	struct ibv_send_wr w = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = flags }, *bad;
	CHECK(!ibv_post_send(qp, &w, &bad), "ibv_post_send failed");
}

static void send_one(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, int i)
{
	send_flags(qp, mr, buf, i, 0);
}

static void recv_one(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, int i)
{
	struct ibv_sge sge = { (uintptr_t)buf + (16 + i) * LEN, LEN, mr->lkey };
	struct ibv_recv_wr w = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(!ibv_post_recv(qp, &w, &bad), "ibv_post_recv failed");
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: comp_channel <ibdev> [gid index] [adopt]");
	int gidx = argc > 2 ? atoi(argv[2]) : 0;
	int adopt = argc > 3 && !strcmp(argv[3], "adopt");
	struct stat in0;
	int have_stdin = fstat(0, &in0) == 0;

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

	/* A channel that never gets a CQ: its fd closes with it (without the
	 * preload its fd is garbage or stdin, and closing it is the
	 * fallback's known hazard: not tried). */
	if (!adopt) {
		struct ibv_comp_channel *lone = ibv_create_comp_channel(ctx);
		CHECK(lone, "ibv_create_comp_channel failed: %s", strerror(errno));
		int lone_fd = lone->fd;
		real_fd(lone_fd);
		CHECK(!ibv_destroy_comp_channel(lone), "destroying a channel without CQs failed");
		CHECK(fcntl(lone_fd, F_GETFD) == -1 && errno == EBADF, "fd %d still open", lone_fd);
	}

	/* What UCX does at once: non-blocking, watched with epoll. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "ibv_create_comp_channel failed: %s", strerror(errno));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0, "epoll_create1");
	struct epoll_event ee = { .events = EPOLLIN };
	if (!adopt) {
		real_fd(ch->fd);
		int fl = fcntl(ch->fd, F_GETFL);
		CHECK(fl >= 0 && !fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), "F_SETFL O_NONBLOCK failed");
		empty(ch);
		CHECK(!epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ee), "epoll_ctl: %s", strerror(errno));
	}
	int fd = ch->fd;

	struct ibv_cq *scq = ibv_create_cq(ctx, 32, (void *)0x51, ch, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 32, (void *)0x52, ch, 0);
	CHECK(scq && rcq, "ibv_create_cq on the channel failed");
	if (adopt) {
		fd = ch->fd;
		int fl = fcntl(fd, F_GETFL);
		CHECK(fl >= 0 && !fcntl(fd, F_SETFL, fl | O_NONBLOCK), "F_SETFL O_NONBLOCK failed");
		CHECK(!epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ee), "epoll_ctl: %s", strerror(errno));
	}
	CHECK(ch->fd == fd, "create_cq changed channel->fd from %d to %d", fd, ch->fd);
	CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK, "O_NONBLOCK lost at create_cq");
	real_fd(fd);
	empty(ch);

	struct ibv_qp *a = rc_qp(pd, scq, scq);
	struct ibv_qp *b = rc_qp(pd, rcq, rcq);
	connect_qp(a, b->qp_num, &gid, gidx);
	connect_qp(b, a->qp_num, &gid, gidx);

	/* Both CQs armed: one send completes on scq, its receive on rcq. */
	CHECK(!ibv_req_notify_cq(scq, 0) && !ibv_req_notify_cq(rcq, 0), "ibv_req_notify_cq failed");
	recv_one(b, mr, buf, 0);
	send_one(a, mr, buf, 0);
	int seen = 0;
	for (int k = 0; k < 2; k++) {
		struct epoll_event out;
		int n = epoll_wait(ep, &out, 1, 10000);
		CHECK(n == 1 && out.data.u64 == 0 && (out.events & EPOLLIN),
		      "epoll_wait: %d (event %d of 2)", n, k + 1);
		CHECK(readable(fd, 0), "epoll said readable, poll does not");
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx), "ibv_get_cq_event failed");
		CHECK((ev_cq == scq && ev_ctx == (void *)0x51) || (ev_cq == rcq && ev_ctx == (void *)0x52),
		      "event for cq %p ctx %p", (void *)ev_cq, ev_ctx);
		seen |= ev_cq == scq ? 1 : 2;
		ibv_ack_cq_events(ev_cq, 1);
	}
	CHECK(seen == 3, "events of both CQs expected, saw mask %d", seen);
	drain(scq, 1);
	drain(rcq, 1);
	empty(ch);

	/* Not re-armed: a second completion raises no event. */
	recv_one(b, mr, buf, 1);
	send_one(a, mr, buf, 1);
	drain(scq, 1);
	drain(rcq, 1);
	CHECK(!readable(fd, 200), "an event without arming");

	/* Armed for solicited completions only: a SEND without the solicited
	 * bit wakes neither CQ (scq gets a send completion, rcq an unsolicited
	 * receive); one with it wakes rcq alone. */
	CHECK(!ibv_req_notify_cq(scq, 1) && !ibv_req_notify_cq(rcq, 1), "solicited arming failed");
	recv_one(b, mr, buf, 3);
	send_one(a, mr, buf, 3);
	drain(scq, 1);
	drain(rcq, 1);
	CHECK(!readable(fd, 200), "an unsolicited SEND woke a CQ armed for solicited completions");
	recv_one(b, mr, buf, 4);
	send_flags(a, mr, buf, 4, IBV_SEND_SOLICITED | IBV_SEND_SIGNALED);
	{
		struct epoll_event out;
		CHECK(epoll_wait(ep, &out, 1, 10000) == 1, "no event for a solicited SEND");
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx), "ibv_get_cq_event failed");
		CHECK(ev_cq == rcq, "the solicited SEND's event is for cq %p, not the receive CQ",
		      (void *)ev_cq);
		ibv_ack_cq_events(ev_cq, 1);
	}
	drain(scq, 1);
	drain(rcq, 1);
	CHECK(!readable(fd, 200), "the send CQ, armed for solicited completions, raised an event");

	/* A blocking channel: ibv_get_cq_event waits for the event. */
	struct ibv_comp_channel *bch = ibv_create_comp_channel(ctx);
	CHECK(bch, "ibv_create_comp_channel failed");
	struct ibv_cq *bcq = ibv_create_cq(ctx, 32, (void *)0x53, bch, 0);
	CHECK(bcq, "ibv_create_cq on the blocking channel failed");
	CHECK(!(fcntl(bch->fd, F_GETFL) & O_NONBLOCK), "a new channel is blocking");
	struct ibv_qp *c = rc_qp(pd, bcq, bcq);
	struct ibv_qp *e = rc_qp(pd, rcq, rcq);
	connect_qp(c, e->qp_num, &gid, gidx);
	connect_qp(e, c->qp_num, &gid, gidx);
	CHECK(!ibv_req_notify_cq(bcq, 0), "ibv_req_notify_cq failed");
	recv_one(e, mr, buf, 2);
	send_one(c, mr, buf, 2);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(!ibv_get_cq_event(bch, &ev_cq, &ev_ctx) && ev_cq == bcq && ev_ctx == (void *)0x53,
	      "blocking ibv_get_cq_event");
	ibv_ack_cq_events(bcq, 1);
	drain(bcq, 1);
	drain(rcq, 1);

	/* A channel with CQs cannot go; then everything goes in order. */
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "destroying a channel with CQs");
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b) && !ibv_destroy_qp(c) && !ibv_destroy_qp(e),
	      "ibv_destroy_qp failed");
	CHECK(!ibv_destroy_cq(scq) && !ibv_destroy_cq(rcq) && !ibv_destroy_cq(bcq), "ibv_destroy_cq failed");
	int bfd = bch->fd;
	CHECK(!ibv_destroy_comp_channel(ch) && !ibv_destroy_comp_channel(bch),
	      "ibv_destroy_comp_channel failed");
	CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "channel fd %d still open", fd);
	CHECK(fcntl(bfd, F_GETFD) == -1 && errno == EBADF, "channel fd %d still open", bfd);
	if (have_stdin) {
		struct stat now;
		CHECK(!fstat(0, &now) && now.st_ino == in0.st_ino && now.st_dev == in0.st_dev,
		      "stdin was closed or replaced");
	}
	close(ep);
	CHECK(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd), "teardown failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("comp_channel: ok\n");
	return 0;
}
