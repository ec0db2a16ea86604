/*
 * XRC objects and their errnos on an rxu device, one process:
 * - ibv_open_xrcd: FD and OFLAGS required (EINVAL), a file without
 *   O_CREAT naming no domain (EINVAL), O_EXCL on a file naming one
 *   (EINVAL), private domains (fd -1);
 * - ibv_create_srq_ex: IBV_SRQT_XRC without CQ/XRCD (EINVAL), tag
 *   matching (EOPNOTSUPP), ibv_get_srq_num (EINVAL on a basic SRQ);
 * - IBV_QPT_XRC_RECV with a PD instead of an XRCD (EINVAL);
 * - ibv_close_xrcd EBUSY while an XRC SRQ or a target QP is in it;
 * - ibv_post_recv on XRC_SEND and XRC_RECV QPs: ENOMEM (mlx5's: the
 *   receive queue has no entries);
 * - traffic: SEND and SEND_WITH_IMM through an XRC_SEND QP land in the
 *   SRQ the WR names and complete on that SRQ's CQ with the target QP's
 *   number; RDMA WRITE and READ through the target use the SRQ's PD;
 *   the ibv_wr_* interface with ibv_wr_set_xrc_srqn; a SEND naming an
 *   SRQ of another domain completes IBV_WC_REM_INV_REQ_ERR;
 * - ibv_open_qp from a second context (another connection to the
 *   daemon, as another process): wrong type or domain EINVAL; the target
 *   QP outlives its creator's destroy while the opener holds it.
 *
 * usage: xrc <ibdev> <gid index>; exit 0 when every check holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static struct ibv_context *ctx;
static int gidx;

static struct ibv_wc wait_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (long i = 0; i < 20000000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq failed");
		if (n == 1)
			return wc;
		if (i > 1000)
			usleep(10);
	}
	CHECK(0, "no completion");
	return wc;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, int tgt)
{
	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), "ibv_query_gid");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = tgt ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0 };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS), "to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 7;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	int m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (tgt)
		m |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK(!ibv_modify_qp(qp, &a, m), "to RTR (%s)", tgt ? "target" : "initiator");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 7;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	m = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT;
	if (!tgt)
		m |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	CHECK(!ibv_modify_qp(qp, &a, m), "to RTS (%s)", tgt ? "target" : "initiator");
}

static struct ibv_xrcd *open_xrcd_on(struct ibv_context *c, int fd, int oflags)
{
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					 .fd = fd, .oflags = oflags };
	return ibv_open_xrcd(c, &xa);
}

static struct ibv_xrcd *open_xrcd(int fd, int oflags)
{
	return open_xrcd_on(ctx, fd, oflags);
}

static struct ibv_srq *xrc_srq(struct ibv_pd *pd, struct ibv_xrcd *x, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = x, .cq = cq,
	};
	return ibv_create_srq_ex(ctx, &sa);
}

static void post_recv(struct ibv_srq *srq, uint64_t id, void *buf, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(!ibv_post_srq_recv(srq, &wr, &bad), "ibv_post_srq_recv");
}

int main(int argc, char **argv)
{
	CHECK(argc == 3, "usage: xrc <ibdev> <gid index>");
	gidx = atoi(argv[2]);
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
	CHECK(!ibv_query_device(ctx, &da), "ibv_query_device");
	CHECK(da.device_cap_flags & IBV_DEVICE_XRC, "IBV_DEVICE_XRC not advertised");

	/* Domains. */
	char path[] = "/tmp/rxu-xrc-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp");
	unlink(path);
	struct ibv_xrcd_init_attr bad = { .comp_mask = IBV_XRCD_INIT_ATTR_FD, .fd = -1 };
	errno = 0;
	CHECK(!ibv_open_xrcd(ctx, &bad) && errno == EINVAL, "open_xrcd without OFLAGS: errno %d", errno);
	errno = 0;
	CHECK(!open_xrcd(fd, 0) && errno == EINVAL, "a file naming no domain without O_CREAT: errno %d", errno);
	struct ibv_xrcd *x = open_xrcd(fd, O_CREAT);
	CHECK(x, "ibv_open_xrcd(O_CREAT): errno %d", errno);
	errno = 0;
	CHECK(!open_xrcd(fd, O_CREAT | O_EXCL) && errno == EINVAL, "O_EXCL on a named domain: errno %d", errno);
	struct ibv_xrcd *x2 = open_xrcd(fd, 0);
	CHECK(x2, "reopening the file's domain: errno %d", errno);
	struct ibv_xrcd *other = open_xrcd(-1, 0);
	CHECK(other, "a private domain: errno %d", errno);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *ocq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(scq && rcq && ocq, "ibv_create_cq");

	/* SRQs. */
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = 4, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC, .pd = pd,
	};
	errno = 0;
	CHECK(!ibv_create_srq_ex(ctx, &sa) && errno == EINVAL, "XRC SRQ without XRCD/CQ: errno %d", errno);
	sa.srq_type = IBV_SRQT_TM;
	errno = 0;
	CHECK(!ibv_create_srq_ex(ctx, &sa) && errno == EOPNOTSUPP, "TM SRQ: errno %d", errno);
	struct ibv_srq_init_attr bsa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *basic = ibv_create_srq(pd, &bsa);
	CHECK(basic, "basic SRQ");
	uint32_t n;
	CHECK(ibv_get_srq_num(basic, &n) == EINVAL, "ibv_get_srq_num of a basic SRQ");
	struct ibv_srq *srq = xrc_srq(pd, x, rcq);
	struct ibv_srq *osrq = xrc_srq(pd, other, ocq);
	CHECK(srq && osrq, "XRC SRQs: errno %d", errno);
	uint32_t srqn, osrqn;
	CHECK(!ibv_get_srq_num(srq, &srqn) && !ibv_get_srq_num(osrq, &osrqn) && srqn != osrqn,
	      "ibv_get_srq_num");

	/* QPs. */
	struct ibv_qp_init_attr_ex ia = { .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_PD,
					  .pd = pd, .send_cq = scq, .recv_cq = scq };
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &ia) && errno == EINVAL, "XRC_RECV with a PD: errno %d", errno);
	memset(&ia, 0, sizeof(ia));
	ia.qp_type = IBV_QPT_XRC_RECV;
	ia.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	ia.xrcd = x;
	struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &ia);
	CHECK(tgt, "XRC_RECV QP: errno %d", errno);
	CHECK(!tgt->pd && !tgt->send_cq && !tgt->recv_cq, "a target QP shows a PD or CQs");
	memset(&ia, 0, sizeof(ia));
	ia.qp_type = IBV_QPT_XRC_SEND;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.pd = pd;
	ia.send_cq = scq;
	ia.cap.max_send_wr = 16;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_wr = 8;
	ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	struct ibv_qp *ini = ibv_create_qp_ex(ctx, &ia);
	CHECK(ini, "XRC_SEND QP: errno %d", errno);
	CHECK(ia.cap.max_recv_wr == 0, "XRC_SEND reports max_recv_wr %u", ia.cap.max_recv_wr);

	/* Busy domains. */
	CHECK(ibv_close_xrcd(other) == EBUSY, "closing a domain with an SRQ");
	to_rts(tgt, ini->qp_num, 1);
	to_rts(ini, tgt->qp_num, 0);

	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(mr, "ibv_reg_mr");
	struct ibv_sge rs = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(ini, &rwr, &rbad) == ENOMEM, "post_recv on XRC_SEND");
	CHECK(ibv_post_recv(tgt, &rwr, &rbad) == ENOMEM, "post_recv on XRC_RECV");

	/* SEND and SEND_WITH_IMM into the named SRQ. */
	post_recv(srq, 100, buf + 4096, 1024, mr->lkey);
	post_recv(srq, 101, buf + 5120, 1024, mr->lkey);
	strcpy(buf, "over xrc");
	struct ibv_sge ss = { .addr = (uintptr_t)buf, .length = 9, .lkey = mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 7, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sbad;
	sw.qp_type.xrc.remote_srqn = srqn;
	CHECK(!ibv_post_send(ini, &sw, &sbad), "post SEND");
	struct ibv_wc wc = wait_one(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7, "SEND: status %d", wc.status);
	wc = wait_one(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 100 && wc.opcode == IBV_WC_RECV &&
	      wc.byte_len == 9 && wc.qp_num == tgt->qp_num,
	      "receive: status %d wr_id %lu qp_num %u (target %u)", wc.status,
	      (unsigned long)wc.wr_id, wc.qp_num, tgt->qp_num);
	CHECK(!strcmp(buf + 4096, "over xrc"), "received bytes");
	sw.opcode = IBV_WR_SEND_WITH_IMM;
	sw.imm_data = htobe32(0x1234);
	CHECK(!ibv_post_send(ini, &sw, &sbad), "post SEND_WITH_IMM");
	CHECK(wait_one(scq).status == IBV_WC_SUCCESS, "SEND_WITH_IMM");
	wc = wait_one(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 101 && (wc.wc_flags & IBV_WC_WITH_IMM) &&
	      be32toh(wc.imm_data) == 0x1234, "receive with immediate");

	/* RDMA WRITE and READ through the target, keys in the SRQ's PD. */
	memset(buf, 0x5a, 256);
	sw.opcode = IBV_WR_RDMA_WRITE;
	ss.length = 256;
	sw.wr.rdma.remote_addr = (uintptr_t)buf + 6144;
	sw.wr.rdma.rkey = mr->rkey;
	CHECK(!ibv_post_send(ini, &sw, &sbad), "post WRITE");
	CHECK(wait_one(scq).status == IBV_WC_SUCCESS, "WRITE");
	CHECK((unsigned char)buf[6144] == 0x5a && (unsigned char)buf[6144 + 255] == 0x5a, "written");
	sw.opcode = IBV_WR_RDMA_READ;
	ss.addr = (uintptr_t)buf + 7168;
	CHECK(!ibv_post_send(ini, &sw, &sbad), "post READ");
	CHECK(wait_one(scq).status == IBV_WC_SUCCESS, "READ");
	CHECK((unsigned char)buf[7168 + 100] == 0x5a, "read back");

	/* The ibv_wr_* interface. */
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(ini);
	CHECK(qx, "XRC_SEND QP without ibv_qp_ex");
	post_recv(srq, 102, buf + 4096, 1024, mr->lkey);
	ibv_wr_start(qx);
	qx->wr_id = 8;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_xrc_srqn(qx, srqn);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 9);
	CHECK(!ibv_wr_complete(qx), "ibv_wr_complete");
	CHECK(wait_one(scq).status == IBV_WC_SUCCESS, "ibv_wr_send");
	CHECK(wait_one(rcq).wr_id == 102, "ibv_wr_send received");

	/*
	 * ibv_open_qp from a second context (its own connection to the
	 * daemon, as another process has): the target QP lives on after its
	 * creator destroys it, for as long as the opener holds it.
	 */
	struct ibv_context *ctx2 = ibv_open_device(d);
	CHECK(ctx2, "second context");
	struct ibv_xrcd *xo = open_xrcd_on(ctx2, fd, 0);
	struct ibv_xrcd *xp = open_xrcd_on(ctx2, -1, 0);
	CHECK(xo && xp, "domains on the second context: errno %d", errno);
	struct ibv_qp_open_attr oa = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
		.qp_num = ini->qp_num, .xrcd = xo, .qp_type = IBV_QPT_XRC_RECV,
	};
	errno = 0;
	CHECK(!ibv_open_qp(ctx2, &oa) && errno == EINVAL, "ibv_open_qp of an initiator: errno %d", errno);
	oa.qp_num = tgt->qp_num;
	oa.xrcd = xp;
	errno = 0;
	CHECK(!ibv_open_qp(ctx2, &oa) && errno == EINVAL, "ibv_open_qp in another domain: errno %d", errno);
	oa.xrcd = xo;
	struct ibv_qp *opened = ibv_open_qp(ctx2, &oa);
	CHECK(opened && opened->qp_num == tgt->qp_num && opened->qp_type == IBV_QPT_XRC_RECV,
	      "ibv_open_qp: errno %d", errno);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK(!ibv_query_qp(opened, &qa, IBV_QP_STATE, &qia) && qa.qp_state == IBV_QPS_RTS,
	      "the opened QP is not in RTS");
	CHECK(!ibv_destroy_qp(tgt), "destroying the creator's handle");
	tgt = NULL;
	post_recv(srq, 103, buf + 4096, 1024, mr->lkey);
	sw.opcode = IBV_WR_SEND;
	ss.addr = (uintptr_t)buf;
	ss.length = 9;
	sw.qp_type.xrc.remote_srqn = srqn;
	CHECK(!ibv_post_send(ini, &sw, &sbad), "post SEND after the creator let go");
	CHECK(wait_one(scq).status == IBV_WC_SUCCESS, "SEND through the opened QP");
	wc = wait_one(rcq);
	CHECK(wc.wr_id == 103 && wc.qp_num == opened->qp_num, "received through the opened QP");

	/* An SRQ of another domain: remote invalid request. */
	post_recv(osrq, 200, buf + 4096, 1024, mr->lkey);
	sw.opcode = IBV_WR_SEND;
	ss.addr = (uintptr_t)buf;
	ss.length = 9;
	sw.qp_type.xrc.remote_srqn = osrqn;
	CHECK(!ibv_post_send(ini, &sw, &sbad), "post SEND to another domain's SRQ");
	wc = wait_one(scq);
	CHECK(wc.status == IBV_WC_REM_INV_REQ_ERR, "wrong domain: status %d", wc.status);
	struct ibv_wc none;
	CHECK(ibv_poll_cq(ocq, 1, &none) == 0, "the other SRQ received");

	/* Teardown, with EBUSY while the target QP and SRQ are in the domain. */
	CHECK(ibv_close_xrcd(xo) == EBUSY, "closing a domain the opened QP is in");
	CHECK(!ibv_destroy_qp(opened) && !ibv_close_xrcd(xo) && !ibv_close_xrcd(xp) &&
	      !ibv_close_device(ctx2), "second context teardown");
	CHECK(!ibv_close_xrcd(x2), "closing one of two opens of a busy domain");
	CHECK(ibv_close_xrcd(x) == EBUSY, "closing a domain with an SRQ");
	CHECK(!ibv_destroy_qp(ini), "destroy QPs");
	CHECK(ibv_destroy_cq(rcq) == EBUSY, "destroying the CQ of an XRC SRQ");
	CHECK(!ibv_destroy_srq(srq) && !ibv_destroy_srq(osrq) && !ibv_destroy_srq(basic), "destroy SRQs");
	CHECK(!ibv_close_xrcd(x) && !ibv_close_xrcd(other), "close domains");
	CHECK(!ibv_dereg_mr(mr) && !ibv_destroy_cq(scq) && !ibv_destroy_cq(rcq) &&
	      !ibv_destroy_cq(ocq) && !ibv_dealloc_pd(pd), "teardown");
	CHECK(!ibv_close_device(ctx), "ibv_close_device");
	ibv_free_device_list(l);
	close(fd);
	free(buf);
	printf("xrc: ok\n");
	return 0;
}
