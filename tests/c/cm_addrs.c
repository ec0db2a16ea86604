/*
 * An rdma_cm id's addresses in each of its states, and the parameters of
 * each connection event, through librdmacm, as the kernel's rdma_cm and
 * ucma give them. One process, two event channels, no QP (the connect
 * and accept name QP numbers of their own; the active side gets
 * CONNECT_RESPONSE and answers rdma_establish, as without a QP on the
 * kernel).
 *
 * Checked, in RDMA_PS_TCP and then RDMA_PS_IB (RC both; the second
 * connection reuses the first's QP numbers right after its disconnect,
 * which the kernel allows: TimeWait forgets the peer's QPN), with
 * rdma_get_src_port / rdma_get_dst_port / rdma_get_local_addr /
 * rdma_get_peer_addr:
 * - a listener bound to 0.0.0.0 port 0: 0.0.0.0:P from the bind on, no peer;
 * - the client after ADDR_RESOLVED and ROUTE_RESOLVED: ADDR:Q (Q its own
 *   ephemeral port), peer ADDR:P;
 * - the server's new id on CONNECT_REQUEST, ESTABLISHED and DISCONNECTED:
 *   ADDR:P, peer ADDR:Q; the client the same way round;
 * - CONNECT_REQUEST's conn param: the REQ's whole user area (56 bytes
 *   after rdma_cm's header; zeros past the 40 sent), qp_num the client's,
 *   responder_resources and initiator_depth crossed over (the peer's
 *   initiator depth is what this side must answer), flow_control,
 *   retry_count, rnr_retry_count, srq;
 * - CONNECT_RESPONSE's: the REP's whole private data (196 bytes, zeros
 *   past the 150 sent), the server's qp_num, its resources crossed over
 *   likewise, flow_control, rnr_retry_count, srq, and retry_count 0 (a REP
 *   has none);
 * - the server's ESTABLISHED (on the RTU) and DISCONNECTED on both sides
 *   (the server's on the DREQ, the client's on the DREP of the server's
 *   rdma_disconnect): an empty conn param, as ucma gives events the
 *   kernel sets none for.
 * UD (RDMA_PS_UDP, SIDR): CONNECT_REQUEST's ud param has the SIDR_REQ's
 * whole user area (180 bytes after the header, zeros past the 100 sent),
 * qp_num and qkey 0; ESTABLISHED's the server's qp_num, RDMA_UDP_QKEY and
 * the 136 bytes of SIDR_REP private data (zeros past the 60 sent). Both
 * events' ah_attr: GRH to the peer's GID from the source GID of the id's
 * address, hop limit 64, port 1, no LID, SL 0; ibv_create_ah takes it as
 * it is (the kernel leaves CONNECT_REQUEST's zeroed; rxu fills it,
 * docs/rdma-cm.md).
 *
 * usage: cm_addrs ADDR; exit 0 only when everything was as expected.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 20000

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "cm_addrs: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } } while (0)

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch,
					enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, WAIT_MS) == 1, "no event within %d ms (wanted %s)", WAIT_MS,
	      rdma_event_str(want));
	struct rdma_cm_event *ev;
	CHECK(!rdma_get_cm_event(ch, &ev), "rdma_get_cm_event: %m");
	CHECK(ev->event == want && ev->status == 0, "wanted %s, got %s status %d",
	      rdma_event_str(want), rdma_event_str(ev->event), ev->status);
	return ev;
}

/* The id's local and peer addresses are ip:port and peer_ip:peer_port
 * (peer_ip NULL: no peer at all). */
static void addrs_are(struct rdma_cm_id *id, const char *what, const char *ip, uint16_t port,
		      const char *peer_ip, uint16_t peer_port)
{
	struct sockaddr_in *l = (struct sockaddr_in *)rdma_get_local_addr(id);
	struct sockaddr_in *r = (struct sockaddr_in *)rdma_get_peer_addr(id);
	char lb[INET_ADDRSTRLEN] = "?", rb[INET_ADDRSTRLEN] = "?";
	inet_ntop(AF_INET, &l->sin_addr, lb, sizeof lb);
	inet_ntop(AF_INET, &r->sin_addr, rb, sizeof rb);
	CHECK(l->sin_family == AF_INET && !strcmp(lb, ip) && ntohs(l->sin_port) == port &&
	      ntohs(rdma_get_src_port(id)) == port,
	      "%s: local %s:%u (src port %u), wanted %s:%u", what, lb, ntohs(l->sin_port),
	      ntohs(rdma_get_src_port(id)), ip, port);
	if (!peer_ip) {
		CHECK(rdma_get_dst_port(id) == 0 && r->sin_addr.s_addr == 0,
		      "%s: a peer %s:%u", what, rb, ntohs(rdma_get_dst_port(id)));
		return;
	}
	CHECK(r->sin_family == AF_INET && !strcmp(rb, peer_ip) && ntohs(r->sin_port) == peer_port &&
	      ntohs(rdma_get_dst_port(id)) == peer_port,
	      "%s: peer %s:%u (dst port %u), wanted %s:%u", what, rb, ntohs(r->sin_port),
	      ntohs(rdma_get_dst_port(id)), peer_ip, peer_port);
}

/* The event's address vector: to the peer's GID, and ibv_create_ah takes
 * it as it is. */
static void ah_works(struct rdma_cm_id *id, struct ibv_ah_attr *a, const char *peer_ip,
		     const char *what)
{
	struct in_addr want;
	CHECK(inet_pton(AF_INET, peer_ip, &want) == 1, "bad address");
	const uint8_t *g = a->grh.dgid.raw;
	CHECK(a->is_global && a->port_num == 1 && !memcmp(g + 12, &want, 4) && g[10] == 0xff &&
	      g[11] == 0xff, "%s: ah_attr is_global %u port %u", what, a->is_global, a->port_num);
	/* From the path as the kernel builds it for RoCE: the source GID is
	 * the id's own address (here the peer's too), hop limit the IPv4
	 * route's (64), no LID, SL 0 (TOS 0). */
	union ibv_gid sgid;
	CHECK(!ibv_query_gid(id->verbs, 1, a->grh.sgid_index, &sgid), "%s: sgid_index %u: %m",
	      what, a->grh.sgid_index);
	CHECK(!memcmp(sgid.raw + 12, &want, 4) && sgid.raw[10] == 0xff && sgid.raw[11] == 0xff,
	      "%s: sgid_index %u is not %s's GID", what, a->grh.sgid_index, peer_ip);
	CHECK(a->grh.hop_limit == 64 && a->dlid == 0 && a->sl == 0 && a->src_path_bits == 0,
	      "%s: hop_limit %u dlid %u sl %u src_path_bits %u", what, a->grh.hop_limit, a->dlid,
	      a->sl, a->src_path_bits);
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	CHECK(pd, "ibv_alloc_pd: %m");
	struct ibv_ah *ah = ibv_create_ah(pd, a);
	CHECK(ah, "%s: ibv_create_ah(event ah_attr): %m", what);
	ibv_destroy_ah(ah);
	ibv_dealloc_pd(pd);
}

/* A conn param with nothing in it: what the kernel's ucma gives events it
 * sets no param for (the passive ESTABLISHED on the RTU, DISCONNECTED). */
static void conn_empty(const struct rdma_conn_param *c, const char *what)
{
	CHECK(c->private_data_len == 0 && c->responder_resources == 0 &&
	      c->initiator_depth == 0 && c->flow_control == 0 && c->retry_count == 0 &&
	      c->rnr_retry_count == 0 && c->srq == 0 && c->qp_num == 0,
	      "%s: conn param not empty (len %u res %u/%u fc %u retry %u/%u srq %u qp %#x)", what,
	      c->private_data_len, c->responder_resources, c->initiator_depth, c->flow_control,
	      c->retry_count, c->rnr_retry_count, c->srq, c->qp_num);
}

/* The first n bytes are want's, the rest of len zeros (the CM message's
 * private data area is zero past what the sender gave). */
static int data_is(const void *got, unsigned len, const void *want, unsigned n)
{
	const unsigned char *g = got;
	if (memcmp(g, want, n))
		return 0;
	for (unsigned i = n; i < len; i++)
		if (g[i])
			return 0;
	return 1;
}

static void ud_events(struct rdma_event_channel *sch, struct rdma_event_channel *cch,
		      const char *ip)
{
	struct rdma_cm_id *l, *c;
	CHECK(!rdma_create_id(sch, &l, NULL, RDMA_PS_UDP), "rdma_create_id: %m");
	CHECK(!rdma_create_id(cch, &c, NULL, RDMA_PS_UDP), "rdma_create_id: %m");
	struct sockaddr_in any = { .sin_family = AF_INET };
	CHECK(!rdma_bind_addr(l, (struct sockaddr *)&any), "UD bind: %m");
	uint16_t p = ntohs(rdma_get_src_port(l));
	CHECK(!rdma_listen(l, 4), "UD listen: %m");
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(p) };
	inet_pton(AF_INET, ip, &dst.sin_addr);
	CHECK(!rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000), "UD resolve: %m");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
	uint16_t q = ntohs(rdma_get_src_port(c));
	CHECK(!rdma_resolve_route(c, 2000), "UD resolve_route: %m");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	char hello[100];
	for (int i = 0; i < (int)sizeof hello; i++)
		hello[i] = (char)(0x20 + i);
	struct rdma_conn_param cp = { .private_data = hello, .private_data_len = sizeof hello,
				      .qp_num = 0x4321 };
	CHECK(!rdma_connect(c, &cp), "UD connect: %m");

	/* The SIDR_REQ's whole user area (180 bytes), zeros past what was
	 * sent; no QP number or Q_Key (a SIDR_REQ carries neither). */
	struct rdma_cm_event *ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *n = ev->id;
	struct rdma_ud_param *u = &ev->param.ud;
	CHECK(u->private_data_len == 180 && data_is(u->private_data, 180, hello, sizeof hello),
	      "UD CONNECT_REQUEST private data: %u bytes", u->private_data_len);
	CHECK(u->qp_num == 0 && u->qkey == 0, "UD CONNECT_REQUEST qp_num %#x qkey %#x", u->qp_num,
	      u->qkey);
	addrs_are(n, "UD server id", ip, p, ip, q);
	ah_works(n, &u->ah_attr, ip, "UD CONNECT_REQUEST");
	rdma_ack_cm_event(ev);

	char world[60];
	memset(world, 0x5a, sizeof world);
	struct rdma_conn_param ap = { .private_data = world, .private_data_len = sizeof world,
				      .qp_num = 0x8765 };
	CHECK(!rdma_accept(n, &ap), "UD accept: %m");
	ev = next_event(cch, RDMA_CM_EVENT_ESTABLISHED);
	u = &ev->param.ud;
	CHECK(u->qp_num == 0x8765 && u->qkey == RDMA_UDP_QKEY, "UD ESTABLISHED qp %#x qkey %#x",
	      u->qp_num, u->qkey);
	CHECK(u->private_data_len == 136 && data_is(u->private_data, 136, world, sizeof world),
	      "UD ESTABLISHED private data: %u bytes", u->private_data_len);
	addrs_are(c, "UD client", ip, q, ip, p);
	ah_works(c, &u->ah_attr, ip, "UD ESTABLISHED");
	rdma_ack_cm_event(ev);
	rdma_destroy_id(n);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
}

/* An RC connection through an id pair of port space ps, addresses and
 * conn params at each step. */
static void rc_events(struct rdma_event_channel *sch, struct rdma_event_channel *cch,
		      const char *ip, enum rdma_port_space ps, const char *name)
{
	struct rdma_cm_id *l, *c;
	CHECK(!rdma_create_id(sch, &l, NULL, ps), "%s: rdma_create_id: %m", name);
	CHECK(!rdma_create_id(cch, &c, NULL, ps), "%s: rdma_create_id: %m", name);

	struct sockaddr_in any = { .sin_family = AF_INET };
	CHECK(!rdma_bind_addr(l, (struct sockaddr *)&any), "%s: bind: %m", name);
	uint16_t p = ntohs(rdma_get_src_port(l));
	CHECK(p, "%s: no port after the bind", name);
	addrs_are(l, "bound listener", "0.0.0.0", p, NULL, 0);
	CHECK(!rdma_listen(l, 4), "%s: listen: %m", name);
	addrs_are(l, "listener", "0.0.0.0", p, NULL, 0);

	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(p) };
	CHECK(inet_pton(AF_INET, ip, &dst.sin_addr) == 1, "bad address %s", ip);
	CHECK(!rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000), "resolve_addr: %m");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
	uint16_t q = ntohs(rdma_get_src_port(c));
	CHECK(q && q != p, "%s: client port %u (listener %u)", name, q, p);
	addrs_are(c, "client, address resolved", ip, q, ip, p);
	CHECK(!rdma_resolve_route(c, 2000), "resolve_route: %m");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	addrs_are(c, "client, route resolved", ip, q, ip, p);

	/* Fewer bytes than either message holds: the events still carry the
	 * whole area (56 user bytes of a REQ, 196 of a REP), zeros past them. */
	char hello[40], world[150];
	for (int i = 0; i < (int)sizeof hello; i++)
		hello[i] = (char)(0x40 + i);
	for (int i = 0; i < (int)sizeof world; i++)
		world[i] = (char)(0xc0 - i);
	struct rdma_conn_param cp = {
		.private_data = hello, .private_data_len = sizeof hello,
		.responder_resources = 2, .initiator_depth = 1, .flow_control = 1,
		.retry_count = 5, .rnr_retry_count = 6, .srq = 1, .qp_num = 0x1234,
	};
	CHECK(!rdma_connect(c, &cp), "%s: connect: %m", name);

	struct rdma_cm_event *ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *n = ev->id;
	struct rdma_conn_param *got = &ev->param.conn;
	CHECK(n != l && ev->listen_id == l, "%s: the request's id", name);
	CHECK(got->private_data_len == 56 && data_is(got->private_data, 56, hello, sizeof hello),
	      "%s: CONNECT_REQUEST private data: %u bytes", name, got->private_data_len);
	CHECK(got->qp_num == 0x1234, "%s: CONNECT_REQUEST qp_num %#x", name, got->qp_num);
	CHECK(got->responder_resources == 1 && got->initiator_depth == 2,
	      "%s: CONNECT_REQUEST resources %u/%u, wanted 1/2 (crossed over)", name,
	      got->responder_resources, got->initiator_depth);
	CHECK(got->retry_count == 5 && got->rnr_retry_count == 6,
	      "%s: CONNECT_REQUEST retry %u rnr %u", name, got->retry_count,
	      got->rnr_retry_count);
	CHECK(got->flow_control == 1 && got->srq == 1, "%s: CONNECT_REQUEST flow_control %u srq %u",
	      name, got->flow_control, got->srq);
	addrs_are(n, "server id, connect request", ip, p, ip, q);
	addrs_are(l, "listener after a request", "0.0.0.0", p, NULL, 0);
	rdma_ack_cm_event(ev);

	/* A REP has no retry count: the kernel leaves CONNECT_RESPONSE's 0. */
	struct rdma_conn_param ap = {
		.private_data = world, .private_data_len = sizeof world,
		.responder_resources = 3, .initiator_depth = 2, .flow_control = 1,
		.retry_count = 4, .rnr_retry_count = 7, .srq = 1, .qp_num = 0x5678,
	};
	CHECK(!rdma_accept(n, &ap), "%s: accept: %m", name);
	ev = next_event(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	got = &ev->param.conn;
	CHECK(got->private_data_len == 196 && data_is(got->private_data, 196, world, sizeof world),
	      "%s: CONNECT_RESPONSE private data: %u bytes", name, got->private_data_len);
	CHECK(got->qp_num == 0x5678, "%s: CONNECT_RESPONSE qp_num %#x", name, got->qp_num);
	CHECK(got->responder_resources == 2 && got->initiator_depth == 3,
	      "%s: CONNECT_RESPONSE resources %u/%u, wanted 2/3 (crossed over)", name,
	      got->responder_resources, got->initiator_depth);
	CHECK(got->rnr_retry_count == 7 && got->retry_count == 0,
	      "%s: CONNECT_RESPONSE rnr %u retry %u", name, got->rnr_retry_count, got->retry_count);
	CHECK(got->flow_control == 1 && got->srq == 1,
	      "%s: CONNECT_RESPONSE flow_control %u srq %u", name, got->flow_control, got->srq);
	rdma_ack_cm_event(ev);
	CHECK(!rdma_establish(c), "%s: establish: %m", name);
	ev = next_event(sch, RDMA_CM_EVENT_ESTABLISHED);
	conn_empty(&ev->param.conn, "server ESTABLISHED");
	rdma_ack_cm_event(ev);
	addrs_are(n, "server id, established", ip, p, ip, q);
	addrs_are(c, "client, established", ip, q, ip, p);

	/* The DREQ reaches the server at once; the client's DISCONNECTED
	 * waits for the DREP, which the server's rdma_disconnect sends. */
	CHECK(!rdma_disconnect(c), "%s: disconnect: %m", name);
	ev = next_event(sch, RDMA_CM_EVENT_DISCONNECTED);
	conn_empty(&ev->param.conn, "server DISCONNECTED");
	rdma_ack_cm_event(ev);
	CHECK(!rdma_disconnect(n), "%s: disconnect after DREQ: %m", name);
	ev = next_event(cch, RDMA_CM_EVENT_DISCONNECTED);
	conn_empty(&ev->param.conn, "client DISCONNECTED");
	rdma_ack_cm_event(ev);
	addrs_are(n, "server id, disconnected", ip, p, ip, q);
	addrs_are(c, "client, disconnected", ip, q, ip, p);

	rdma_destroy_id(n);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	printf("%s: addresses and conn params as the kernel's\n", name);
}

int main(int argc, char **argv)
{
	CHECK(argc == 2, "usage: cm_addrs ADDR");
	const char *ip = argv[1];
	struct rdma_event_channel *sch = rdma_create_event_channel(),
				  *cch = rdma_create_event_channel();
	CHECK(sch && cch, "rdma_create_event_channel: %m");
	rc_events(sch, cch, ip, RDMA_PS_TCP, "RDMA_PS_TCP");
	rc_events(sch, cch, ip, RDMA_PS_IB, "RDMA_PS_IB");
	ud_events(sch, cch, ip);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("cm_addrs: ok\n");
	return 0;
}
