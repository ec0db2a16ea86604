/*
 * Verbs the rxu provider does not offer fail with EOPNOTSUPP (the provider
 * logs each once on stderr), the queries a program makes first answer
 * within the caller's struct sizes, and a CQ can be resized.
 *
 * usage: unsupported <ibdev>; exit 0 when every check holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

int main(int argc, char **argv)
{
	CHECK(argc == 2, "usage: unsupported <ibdev>");
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l, "no device list");
	struct ibv_device *d = NULL;
	for (int i = 0; l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), argv[1]))
			d = l[i];
	CHECK(d, "device %s not found", argv[1]);
	struct ibv_context *ctx = ibv_open_device(d);
	CHECK(ctx, "ibv_open_device failed");

	/* query_device with the old 232-byte struct: nothing past it written. */
	struct { struct ibv_device_attr a; unsigned char canary[64]; } qd;
	memset(&qd, 0xa5, sizeof(qd));
	CHECK(!ibv_query_device(ctx, &qd.a), "ibv_query_device failed");
	for (size_t i = 0; i < sizeof(qd.canary); i++)
		CHECK(qd.canary[i] == 0xa5, "ibv_query_device wrote past its struct");
	CHECK(qd.a.phys_port_cnt == 1, "phys_port_cnt %d", qd.a.phys_port_cnt);
	struct ibv_device_attr_ex ax;
	CHECK(!ibv_query_device_ex(ctx, NULL, &ax), "ibv_query_device_ex failed");
	CHECK(ax.orig_attr.max_qp == qd.a.max_qp, "query_device and _ex disagree");
	struct ibv_port_attr pa;
	CHECK(!ibv_query_port(ctx, 1, &pa), "ibv_query_port failed");
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET,
	      "port state %d link layer %d", pa.state, pa.link_layer);
	CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL, "port 2 should be EINVAL");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd failed");
	struct ibv_alloc_dm_attr dma = { .length = 64 };
	errno = 0;
	CHECK(!ibv_alloc_dm(ctx, &dma) && errno == EOPNOTSUPP, "ibv_alloc_dm: errno %d", errno);
	struct ibv_cq_init_attr_ex ca = { .cqe = 4, .wc_flags = IBV_WC_EX_WITH_CVLAN };
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EOPNOTSUPP, "cvlan CQ: errno %d", errno);
	/* Overruns raise IBV_EVENT_CQ_ERR: a CQ may not ask to ignore them (as on rxe). */
	struct ibv_cq_init_attr_ex io = { .cqe = 4, .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
					  .flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN };
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &io) && errno == EOPNOTSUPP, "IGNORE_OVERRUN CQ: errno %d", errno);

	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq failed");
	CHECK(!ibv_create_cq(ctx, 4, NULL, NULL, 1) && errno == EINVAL, "comp_vector 1 accepted");
	CHECK(!ibv_resize_cq(cq, 100) && cq->cqe >= 100, "ibv_resize_cq: cqe %d", cq->cqe);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp failed");
	CHECK(ibv_qp_to_qp_ex(qp) == NULL, "a plain QP claims the ibv_wr_* interface");
	union ibv_gid mgid = { .raw = { 0xff, 0x12 } };
	/* An IPv6 (IB-style) group: rxu joins IPv4 groups only. */
	CHECK(ibv_attach_mcast(qp, &mgid, 0) == EOPNOTSUPP, "ibv_attach_mcast");
	struct ibv_ah_attr aa = { .port_num = 1 };
	CHECK(!ibv_create_ah(pd, &aa) && errno == EINVAL, "an AH without a GRH was accepted");

	CHECK(!ibv_destroy_qp(qp) && !ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd), "teardown failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device failed");
	ibv_free_device_list(l);
	printf("unsupported: ok\n");
	return 0;
}
