/*
 * Controlled Q_Keys (bit 31 set) belong to QP1 and privileged users: a UD
 * QP holding one could forge CM MADs. Since Linux 6.4 uverbs refuses to
 * set one with EPERM unless the caller has CAP_NET_RAW. This program sets
 * one on a UD QP at RESET->INIT and at INIT->INIT (after an ordinary
 * Q_Key) and reports what the device said; an ordinary Q_Key must work
 * either way.
 *
 * usage: qkey_priv <ibdev> <refused|accepted>; exit 0 when the device did
 * what the second argument says.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static int to_init(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = qkey };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
}

int main(int argc, char **argv)
{
	CHECK(argc == 3, "usage: qkey_priv <ibdev> <refused|accepted>");
	int want_refused = strcmp(argv[2], "refused") == 0;
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list, "ibv_get_device_list failed");
	struct ibv_context *ctx = NULL;
	for (int i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	CHECK(ctx, "no device %s", argv[1]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(pd && cq, "pd/cq failed");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
	CHECK(a && b, "ibv_create_qp failed");

	/* RESET->INIT with the CM's Q_Key (0x80010000). */
	int r1 = to_init(a, 0x80010000u);
	/* An ordinary one, then INIT->INIT to a controlled one. */
	int r2 = to_init(b, 0x11111111u);
	CHECK(r2 == 0, "an ordinary Q_Key was refused: %s", strerror(r2));
	struct ibv_qp_attr q = { .qkey = 0x80000000u };
	int r3 = ibv_modify_qp(b, &q, IBV_QP_QKEY);
	if (want_refused) {
		CHECK(r1 == EPERM, "RESET->INIT with Q_Key 0x80010000: %s, not EPERM", r1 ? strerror(r1) : "accepted");
		CHECK(r3 == EPERM, "INIT->INIT with Q_Key 0x80000000: %s, not EPERM", r3 ? strerror(r3) : "accepted");
		struct ibv_qp_attr got;
		struct ibv_qp_init_attr gi;
		CHECK(ibv_query_qp(b, &got, IBV_QP_QKEY, &gi) == 0, "ibv_query_qp failed");
		CHECK(got.qkey == 0x11111111u, "the refused Q_Key stuck: %#x", got.qkey);
		printf("qkey_priv: ok (controlled Q_Keys refused with EPERM)\n");
	} else {
		CHECK(r1 == 0, "RESET->INIT with Q_Key 0x80010000: %s", strerror(r1));
		CHECK(r3 == 0, "INIT->INIT with Q_Key 0x80000000: %s", strerror(r3));
		printf("qkey_priv: ok (controlled Q_Keys accepted)\n");
	}
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
