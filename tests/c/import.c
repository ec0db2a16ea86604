/*
 * ibv_import_device / ibv_import_pd / ibv_import_mr and their unimports,
 * as pyverbs' test_shared_pd and multi-process users (a PD and MR shared
 * by passing cmd_fd over SCM_RIGHTS) use them.
 *
 * usage: import <ibdev> <gid index> same|cross|nopreload
 *   same:  in one process: a dup of cmd_fd imported (on the right device,
 *          whichever rxu device libibverbs picks first), the PD and MR by
 *          handle (keys, length, NULL address), the kernel's errnos for
 *          misuse, RDMA WRITEs through a QP of the imported context in the
 *          imported PD both ways, a completion channel of the imported
 *          context, EBUSY for the shared PD, the importer keeping PD and
 *          MR after the original context closed, dereg/dealloc of imported
 *          objects, the dup closed with the imported context;
 *   cross: cmd_fd passed to a child process (this program again, "child"
 *          mode) over SCM_RIGHTS; the child imports PD and MR and copies
 *          bytes of the parent's MR to another place in it through its own
 *          QP (reading the parent's memory by the imported lkey), and
 *          writes its own buffer, registered in the imported PD, there too;
 *   nopreload: without librxu-ucma.so, EOPNOTSUPP (pyverbs then skips).
 * Prints "import: ok <mode> on <device of the imported context>".
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LEN 16384
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "%s line %d: ", role, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static const char *role = "import";
static int gidx;
static union ibv_gid gid;
static const int ACC = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l, "no device list");
	struct ibv_context *ctx = NULL;
	for (int i = 0; l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name))
			ctx = ibv_open_device(l[i]);
	ibv_free_device_list(l);
	CHECK(ctx, "cannot open %s", name);
	return ctx;
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp failed: %s", strerror(errno));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = ACC };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "INIT failed");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest, .rq_psn = 0,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 64 } },
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

/* One signaled RDMA WRITE of `len` bytes, waited for (10 s at most). */
static void write_one(struct ibv_qp *qp, struct ibv_cq *cq, void *src, uint32_t lkey, uint32_t len,
		      uint64_t dst, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)src, len, lkey };
	struct ibv_send_wr w = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .wr.rdma = { .remote_addr = dst, .rkey = rkey } }, *bad;
	CHECK(!ibv_post_send(qp, &w, &bad), "ibv_post_send failed");
	struct ibv_wc wc;
	time_t end = time(NULL) + 10;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(time(NULL) < end, "no completion within 10 s");
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "RDMA WRITE: %s", ibv_wc_status_str(wc.status));
}

static void fill(char *p, int len, int seed)
{
	for (int i = 0; i < len; i++)
		p[i] = (char)(seed + i * 7);
}

/* What the parent tells the child besides the fd. */
struct shared {
	uint32_t pd_handle, mr_handle, rkey, qpn;
	uint64_t addr;
};

static void send_fd(int sock, int fd, const void *data, size_t len)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { (void *)data, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof cbuf };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof fd);
	CHECK(sendmsg(sock, &m, 0) == (ssize_t)len, "sendmsg: %s", strerror(errno));
}

static int recv_fd(int sock, void *data, size_t len)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { data, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof cbuf };
	CHECK(recvmsg(sock, &m, 0) == (ssize_t)len, "recvmsg: %s", strerror(errno));
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	CHECK(c && c->cmsg_type == SCM_RIGHTS, "no fd came");
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof fd);
	return fd;
}

static void same_process(const char *name)
{
	struct ibv_context *a = open_dev(name);
	CHECK(!ibv_query_gid(a, 1, gidx, &gid), "ibv_query_gid failed");
	struct ibv_pd *pd = ibv_alloc_pd(a);
	char *buf = calloc(1, LEN);
	fill(buf, 256, 1);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ACC);
	CHECK(pd && mr, "alloc_pd / reg_mr failed");

	/* What is not a context's cmd_fd. */
	errno = 0;
	CHECK(!ibv_import_device(-1) && errno == EINVAL, "import of -1: %s", strerror(errno));
	int file = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	errno = 0;
	CHECK(!ibv_import_device(file) && errno == EINVAL, "import of a file: %s", strerror(errno));
	close(file);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	errno = 0;
	CHECK(!ibv_import_device(null) && errno == ENODEV, "import of an unused /dev/null: %s",
	      strerror(errno));
	close(null);

	int dupfd = dup(a->cmd_fd);
	struct ibv_context *b = ibv_import_device(dupfd);
	CHECK(b, "ibv_import_device failed: %s", strerror(errno));
	CHECK(b->cmd_fd == dupfd, "cmd_fd %d, not %d", b->cmd_fd, dupfd);
	const char *on = ibv_get_device_name(b->device);
	CHECK(!strcmp(on, name), "imported on %s, not %s", on, name);
	CHECK(b->async_fd >= 0 && b->async_fd != a->async_fd && fcntl(b->async_fd, F_GETFD) >= 0,
	      "imported context's async fd %d", b->async_fd);

	struct ibv_pd *pd_b = ibv_import_pd(b, pd->handle);
	CHECK(pd_b && pd_b->handle == pd->handle && pd_b->context == b, "ibv_import_pd failed: %s",
	      strerror(errno));
	errno = 0;
	CHECK(!ibv_import_pd(b, pd->handle + 1000) && errno == ENOENT, "import of an unknown PD: %s",
	      strerror(errno));
	struct ibv_mr *mr_b = ibv_import_mr(pd_b, mr->handle);
	CHECK(mr_b, "ibv_import_mr failed: %s", strerror(errno));
	CHECK(mr_b->lkey == mr->lkey && mr_b->rkey == mr->rkey && mr_b->length == LEN &&
	      mr_b->addr == NULL && mr_b->handle == mr->handle && mr_b->pd == pd_b && mr_b->context == b,
	      "imported MR: lkey %#x rkey %#x length %zu addr %p", mr_b->lkey, mr_b->rkey,
	      mr_b->length, mr_b->addr);
	errno = 0;
	CHECK(!ibv_import_mr(pd_b, mr->handle + 1000) && errno == ENOENT,
	      "import of an unknown MR: %s", strerror(errno));

	/* Another context of the device is not the same context. */
	struct ibv_context *c = open_dev(name);
	errno = 0;
	CHECK(!ibv_import_pd(c, pd->handle) && errno == ENOENT, "import into a foreign context: %s",
	      strerror(errno));

	/* Traffic between a QP of the imported context (in the imported PD)
	 * and one of the other context. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(b);
	CHECK(ch && ch->fd > 2 && fcntl(ch->fd, F_GETFD) >= 0, "comp channel of the imported context");
	struct ibv_cq *cq_b = ibv_create_cq(b, 32, NULL, ch, 0);
	struct ibv_pd *pd_c = ibv_alloc_pd(c);
	char *buf_c = calloc(1, LEN);
	fill(buf_c, LEN, 9);
	struct ibv_mr *mr_c = ibv_reg_mr(pd_c, buf_c, LEN, ACC);
	struct ibv_cq *cq_c = ibv_create_cq(c, 32, NULL, NULL, 0);
	CHECK(cq_b && pd_c && mr_c && cq_c, "setting up the peer failed");
	struct ibv_qp *qb = rc_qp(pd_b, cq_b);
	struct ibv_qp *qc = rc_qp(pd_c, cq_c);
	connect_qp(qb, qc->qp_num);
	connect_qp(qc, qb->qp_num);

	write_one(qc, cq_c, buf_c, mr_c->lkey, 512, (uintptr_t)buf + 4096, mr_b->rkey);
	CHECK(!memcmp(buf + 4096, buf_c, 512), "the peer's write into the imported MR");
	CHECK(!ibv_req_notify_cq(cq_b, 0), "ibv_req_notify_cq failed");
	write_one(qb, cq_b, buf, mr_b->lkey, 256, (uintptr_t)buf_c + 8192, mr_c->rkey);
	CHECK(!memcmp(buf_c + 8192, buf, 256), "a write from the imported MR");
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 10000) == 1, "no completion event on the imported context's channel");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx) && ev_cq == cq_b, "ibv_get_cq_event");
	ibv_ack_cq_events(cq_b, 1);

	CHECK(ibv_dealloc_pd(pd) == EBUSY, "deallocating the shared PD while the importer uses it");

	/* The original context goes; the importer keeps PD and MR. */
	CHECK(!ibv_close_device(a), "closing the original context failed");
	write_one(qc, cq_c, buf_c + 1024, mr_c->lkey, 512, (uintptr_t)buf + 8192, mr_b->rkey);
	CHECK(!memcmp(buf + 8192, buf_c + 1024, 512), "the imported MR after its context closed");

	CHECK(!ibv_destroy_qp(qb) && !ibv_destroy_qp(qc), "ibv_destroy_qp failed");
	CHECK(!ibv_destroy_cq(cq_b) && !ibv_destroy_cq(cq_c) && !ibv_destroy_comp_channel(ch),
	      "ibv_destroy_cq failed");
	CHECK(ibv_dealloc_pd(pd_b) == EBUSY, "the shared PD still has its MR");
	CHECK(!ibv_dereg_mr(mr_b), "ibv_dereg_mr of the imported MR failed");
	CHECK(!ibv_dealloc_pd(pd_b), "ibv_dealloc_pd of the imported PD failed");
	CHECK(!ibv_close_device(b), "closing the imported context failed");
	CHECK(fcntl(dupfd, F_GETFD) == -1 && errno == EBADF, "the imported cmd_fd is still open");
	CHECK(!ibv_dereg_mr(mr_c) && !ibv_dealloc_pd(pd_c) && !ibv_close_device(c), "teardown failed");
	printf("import: ok same on %s\n", on);
}

static void unimport_only(const char *name)
{
	/* pyverbs' order: import, unimport, the importer's context goes,
	 * and the original's objects are untouched. */
	struct ibv_context *a = open_dev(name);
	struct ibv_pd *pd = ibv_alloc_pd(a);
	char *buf = calloc(1, LEN);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ACC);
	struct ibv_context *b = ibv_import_device(dup(a->cmd_fd));
	CHECK(pd && mr && b, "setup failed: %s", strerror(errno));
	struct ibv_pd *pd_b = ibv_import_pd(b, pd->handle);
	struct ibv_mr *mr_b = pd_b ? ibv_import_mr(pd_b, mr->handle) : NULL;
	CHECK(mr_b, "import failed: %s", strerror(errno));
	ibv_unimport_mr(mr_b);
	ibv_unimport_pd(pd_b);
	CHECK(!ibv_close_device(b), "closing the imported context failed");
	CHECK(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd), "the original's objects after unimport");
	CHECK(!ibv_close_device(a), "ibv_close_device failed");
}

static void child(const char *name, int sock)
{
	role = "import child";
	struct shared s;
	int fd = recv_fd(sock, &s, sizeof s);
	struct ibv_context *b = ibv_import_device(fd);
	CHECK(b, "ibv_import_device of a passed fd failed: %s", strerror(errno));
	CHECK(!strcmp(ibv_get_device_name(b->device), name), "imported on %s",
	      ibv_get_device_name(b->device));
	CHECK(!ibv_query_gid(b, 1, gidx, &gid), "ibv_query_gid failed");
	struct ibv_pd *pd = ibv_import_pd(b, s.pd_handle);
	CHECK(pd, "ibv_import_pd failed: %s", strerror(errno));
	struct ibv_mr *mr = ibv_import_mr(pd, s.mr_handle);
	CHECK(mr && mr->rkey == s.rkey && mr->length == LEN, "ibv_import_mr failed: %s",
	      strerror(errno));
	char *own = calloc(1, 4096);
	fill(own, 4096, 3);
	struct ibv_mr *own_mr = ibv_reg_mr(pd, own, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *cq = ibv_create_cq(b, 32, NULL, NULL, 0);
	CHECK(own_mr && cq, "reg_mr in the imported PD / create_cq failed");
	struct ibv_qp *qp = rc_qp(pd, cq);
	uint32_t qpn = qp->qp_num;
	CHECK(write(sock, &qpn, sizeof qpn) == sizeof qpn, "write qpn");
	connect_qp(qp, s.qpn);
	/* The parent's bytes, read through the imported lkey, to another
	 * place of the parent's MR; then our own bytes there. */
	write_one(qp, cq, (void *)(uintptr_t)s.addr, mr->lkey, 256, s.addr + 4096, mr->rkey);
	write_one(qp, cq, own, own_mr->lkey, 1024, s.addr + 8192, mr->rkey);
	char done = 1;
	CHECK(write(sock, &done, 1) == 1, "write done");
	CHECK(read(sock, &done, 1) == 1, "the parent's go-ahead");
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(own_mr);
	ibv_unimport_mr(mr);
	ibv_unimport_pd(pd);
	CHECK(!ibv_close_device(b), "closing the imported context failed");
	exit(0);
}

static void cross_process(const char *self, const char *name)
{
	struct ibv_context *a = open_dev(name);
	CHECK(!ibv_query_gid(a, 1, gidx, &gid), "ibv_query_gid failed");
	struct ibv_pd *pd = ibv_alloc_pd(a);
	char *buf = calloc(1, LEN);
	fill(buf, 256, 5);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ACC);
	struct ibv_cq *cq = ibv_create_cq(a, 32, NULL, NULL, 0);
	CHECK(pd && mr && cq, "setup failed");
	struct ibv_qp *qp = rc_qp(pd, cq);
	int sv[2];
	CHECK(!socketpair(AF_UNIX, SOCK_STREAM, 0, sv), "socketpair");
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		char sock[16], g[16];
		snprintf(sock, sizeof sock, "%d", sv[1]);
		snprintf(g, sizeof g, "%d", gidx);
		close(sv[0]);
		execl(self, self, name, g, "child", sock, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	struct shared s = { pd->handle, mr->handle, mr->rkey, qp->qp_num, (uintptr_t)buf };
	send_fd(sv[0], a->cmd_fd, &s, sizeof s);
	uint32_t qpn;
	CHECK(read(sv[0], &qpn, sizeof qpn) == sizeof qpn, "the child's QP number");
	connect_qp(qp, qpn);
	char done;
	CHECK(read(sv[0], &done, 1) == 1, "the child did not finish");
	CHECK(!memcmp(buf + 4096, buf, 256), "the child's copy within our MR");
	char want[1024];
	fill(want, 1024, 3);
	CHECK(!memcmp(buf + 8192, want, 1024), "the child's own bytes in our MR");
	CHECK(write(sv[0], &done, 1) == 1, "go-ahead");
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the child failed (status %#x)", st);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	CHECK(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd), "our objects after the child went");
	CHECK(!ibv_close_device(a), "ibv_close_device failed");
	printf("import: ok cross on %s\n", name);
}

int main(int argc, char **argv)
{
	CHECK(argc >= 4, "usage: import <ibdev> <gid index> same|cross|nopreload");
	gidx = atoi(argv[2]);
	if (!strcmp(argv[3], "child") && argc > 4)
		child(argv[1], atoi(argv[4]));
	if (!strcmp(argv[3], "same")) {
		same_process(argv[1]);
		unimport_only(argv[1]);
	} else if (!strcmp(argv[3], "cross")) {
		cross_process(argv[0], argv[1]);
	} else if (!strcmp(argv[3], "nopreload")) {
		/* Without librxu-ucma.so nothing can answer the async fd ioctl
		 * libibverbs makes after import_context: refused up front. */
		struct ibv_context *a = open_dev(argv[1]);
		errno = 0;
		CHECK(!ibv_import_device(dup(a->cmd_fd)) && errno == EOPNOTSUPP,
		      "import without the preload: %s", strerror(errno));
		CHECK(!ibv_close_device(a), "ibv_close_device failed");
		printf("import: ok nopreload\n");
	} else {
		CHECK(0, "unknown mode %s", argv[3]);
	}
	return 0;
}
