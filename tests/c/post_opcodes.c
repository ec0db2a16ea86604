/*
 * ibv_post_send with every work-request opcode (and values libibverbs does
 * not define) on RC, UC and UD QPs in RTS: what rxu executes returns 0,
 * anything else returns EINVAL with *bad_wr at that WR, the WR before it
 * posted. SEND_WITH_INV on UC (no UC packet exists for it) is among the
 * refused ones; LOCAL_INV and BIND_MW (local operations) are taken on RC
 * and UC. Each case gets fresh QPs, connected to each other, since
 * an accepted WR runs and may fail its QP.
 *
 * usage: post_opcodes <ibdev> [gid index]; exit 0 when every case holds.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QKEY 0x11111111
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static int gidx;

/* rxu's matrix: opcodes (enum ibv_wr_opcode values) each QP type takes. */
static int accepted(enum ibv_qp_type t, unsigned op)
{
	switch (t) {
	case IBV_QPT_RC:
		return op <= 9 || op == 14 || op == 15;
	case IBV_QPT_UC:
		return op <= 3 || op == 7 || op == 8;
	case IBV_QPT_UD:
		return op == 2 || op == 3;
	default:
		return 0;
	}
}

static struct ibv_qp *make_qp(struct ibv_cq *cq, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = t,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp failed: %m");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };
	int m = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	m |= t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	CHECK(!ibv_modify_qp(qp, &a, m), "INIT failed");
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
	int rtr = IBV_QP_STATE, rts = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type != IBV_QPT_UD)
		rtr |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		rtr |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		rts |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	CHECK(!ibv_modify_qp(qp, &a, rtr), "RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 1;
	a.rnr_retry = 1;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(qp, &a, rts), "RTS failed");
}

static const char *type_name(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ? "UC" : "UD";
}

int main(int argc, char **argv)
{
	CHECK(argc >= 2, "usage: post_opcodes <ibdev> [gid index]");
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
	CHECK(pd, "ibv_alloc_pd failed");
	static uint64_t buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				       IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr, "ibv_reg_mr failed");
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = gid, .sgid_index = gidx, .hop_limit = 64 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "ibv_create_ah failed");
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw, "ibv_alloc_mw failed: %m");

	enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	int cases = 0;
	for (int ti = 0; ti < 3; ti++) {
		for (unsigned op = 0; op <= 17; op++) {
			enum ibv_qp_type t = types[ti];
			struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
			CHECK(cq, "ibv_create_cq failed");
			struct ibv_qp *a = make_qp(cq, t), *b = make_qp(cq, t);
			connect_qp(a, b->qp_num);
			connect_qp(b, a->qp_num);
			struct ibv_sge sge = { (uintptr_t)buf, 8, mr->lkey };
			struct ibv_send_wr wr[2];
			memset(wr, 0, sizeof(wr));
			for (int i = 0; i < 2; i++) {
				wr[i].wr_id = i + 1;
				wr[i].sg_list = &sge;
				wr[i].num_sge = 1;
				if (t == IBV_QPT_UD) {
					wr[i].wr.ud.ah = ah;
					wr[i].wr.ud.remote_qpn = b->qp_num;
					wr[i].wr.ud.remote_qkey = QKEY;
				}
			}
			wr[0].opcode = IBV_WR_SEND;
			wr[0].next = &wr[1];
			wr[1].opcode = (enum ibv_wr_opcode)op;
			wr[1].bind_mw.mw = mw;
			wr[1].bind_mw.rkey = ibv_inc_rkey(mw->rkey);
			wr[1].bind_mw.bind_info.mr = mr;
			wr[1].bind_mw.bind_info.addr = (uintptr_t)buf;
			wr[1].bind_mw.bind_info.length = 8;
			if (t != IBV_QPT_UD) {
				if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
					wr[1].wr.atomic.remote_addr = (uintptr_t)buf;
					wr[1].wr.atomic.rkey = mr->rkey;
				} else {
					wr[1].wr.rdma.remote_addr = (uintptr_t)buf;
					wr[1].wr.rdma.rkey = mr->rkey;
				}
			}
			struct ibv_send_wr *bad = NULL;
			int rc = ibv_post_send(a, wr, &bad);
			if (accepted(t, op))
				CHECK(rc == 0, "%s opcode %u refused: %d", type_name(t), op, rc);
			else
				CHECK(rc == EINVAL && bad == &wr[1],
				      "%s opcode %u: returned %d, bad_wr %s", type_name(t), op, rc,
				      bad == &wr[1] ? "at it" : bad == &wr[0] ? "at the first WR" : "elsewhere");
			CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "destroy QPs failed");
			CHECK(!ibv_destroy_cq(cq), "destroy CQ failed");
			cases++;
		}
	}
	CHECK(!ibv_dealloc_mw(mw), "ibv_dealloc_mw failed");
	CHECK(!ibv_destroy_ah(ah) && !ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd), "teardown failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("post_opcodes: ok (%d cases)\n", cases);
	return 0;
}
