/*
 * An rdma_cm id's addresses in each of its states, and the parameters of
 * each connection event, through librdmacm, as the kernel's rdma_cm and
 * ucma give them. One process, two event channels, no QP (the connect
 * and accept name QP numbers of their own; the active side gets
 * CONNECT_RESPONSE and answers rdma_establish, as without a QP on the
 * kernel).
 *
 * Checked, with rdma_get_src_port / rdma_get_dst_port /
 * rdma_get_local_addr / rdma_get_peer_addr:
 * - a listener bound to 0.0.0.0 port 0: 0.0.0.0:P from the bind on, no peer;
 * - the client after ADDR_RESOLVED and ROUTE_RESOLVED: ADDR:Q (Q its own
 *   ephemeral port), peer ADDR:P;
 * - the server's new id on CONNECT_REQUEST, ESTABLISHED and DISCONNECTED:
 *   ADDR:P, peer ADDR:Q; the client the same way round;
 * - CONNECT_REQUEST's conn param: the REQ's private data (56 bytes after
 *   rdma_cm's header), qp_num the client's, responder_resources and
 *   initiator_depth crossed over (the peer's initiator depth is what this
 *   side must answer), retry_count, rnr_retry_count;
 * - CONNECT_RESPONSE's: the REP's private data (196 bytes), the server's
 *   qp_num and its resources crossed over likewise;
 * - DISCONNECTED on both sides after rdma_disconnect (the server's on the
 *   DREQ, the client's on the DREP of the server's rdma_disconnect).
 * UD (RDMA_PS_UDP, SIDR): CONNECT_REQUEST's ud param has the 180 bytes
 * of private data after the header; ESTABLISHED's the server's qp_num,
 * RDMA_UDP_QKEY and 136 bytes of SIDR_REP private data. Both events'
 * ah_attr (GRH to the peer's GID, port 1) go to ibv_create_ah as they are
 * (the kernel leaves CONNECT_REQUEST's zeroed; rxu fills it, docs/rdma-cm.md).
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

/* ibv_create_ah takes the event's address vector as it is. */
static void ah_works(struct rdma_cm_id *id, struct ibv_ah_attr *a, const char *peer_ip,
		     const char *what)
{
	struct in_addr want;
	CHECK(inet_pton(AF_INET, peer_ip, &want) == 1, "bad address");
	const uint8_t *g = a->grh.dgid.raw;
	CHECK(a->is_global && a->port_num == 1 && !memcmp(g + 12, &want, 4) && g[10] == 0xff &&
	      g[11] == 0xff, "%s: ah_attr is_global %u port %u", what, a->is_global, a->port_num);
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	CHECK(pd, "ibv_alloc_pd: %m");
	struct ibv_ah *ah = ibv_create_ah(pd, a);
	CHECK(ah, "%s: ibv_create_ah(event ah_attr): %m", what);
	ibv_destroy_ah(ah);
	ibv_dealloc_pd(pd);
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
	char hello[180];
	for (int i = 0; i < 180; i++)
		hello[i] = (char)(0x20 + i);
	struct rdma_conn_param cp = { .private_data = hello, .private_data_len = sizeof hello,
				      .qp_num = 0x4321 };
	CHECK(!rdma_connect(c, &cp), "UD connect: %m");

	struct rdma_cm_event *ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *n = ev->id;
	struct rdma_ud_param *u = &ev->param.ud;
	CHECK(u->private_data_len == 180 && !memcmp(u->private_data, hello, 180),
	      "UD CONNECT_REQUEST private data: %u bytes", u->private_data_len);
	addrs_are(n, "UD server id", ip, p, ip, q);
	ah_works(n, &u->ah_attr, ip, "UD CONNECT_REQUEST");
	rdma_ack_cm_event(ev);

	char world[136];
	memset(world, 0x5a, sizeof world);
	struct rdma_conn_param ap = { .private_data = world, .private_data_len = sizeof world,
				      .qp_num = 0x8765 };
	CHECK(!rdma_accept(n, &ap), "UD accept: %m");
	ev = next_event(cch, RDMA_CM_EVENT_ESTABLISHED);
	u = &ev->param.ud;
	CHECK(u->qp_num == 0x8765 && u->qkey == RDMA_UDP_QKEY, "UD ESTABLISHED qp %#x qkey %#x",
	      u->qp_num, u->qkey);
	CHECK(u->private_data_len == 136 && !memcmp(u->private_data, world, 136),
	      "UD ESTABLISHED private data: %u bytes", u->private_data_len);
	addrs_are(c, "UD client", ip, q, ip, p);
	ah_works(c, &u->ah_attr, ip, "UD ESTABLISHED");
	rdma_ack_cm_event(ev);
	rdma_destroy_id(n);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
}

int main(int argc, char **argv)
{
	CHECK(argc == 2, "usage: cm_addrs ADDR");
	const char *ip = argv[1];
	struct rdma_event_channel *sch = rdma_create_event_channel(),
				  *cch = rdma_create_event_channel();
	CHECK(sch && cch, "rdma_create_event_channel: %m");
	struct rdma_cm_id *l, *c;
	CHECK(!rdma_create_id(sch, &l, NULL, RDMA_PS_TCP), "rdma_create_id: %m");
	CHECK(!rdma_create_id(cch, &c, NULL, RDMA_PS_TCP), "rdma_create_id: %m");

	struct sockaddr_in any = { .sin_family = AF_INET };
	CHECK(!rdma_bind_addr(l, (struct sockaddr *)&any), "bind: %m");
	uint16_t p = ntohs(rdma_get_src_port(l));
	CHECK(p, "no port after the bind");
	addrs_are(l, "bound listener", "0.0.0.0", p, NULL, 0);
	CHECK(!rdma_listen(l, 4), "listen: %m");
	addrs_are(l, "listener", "0.0.0.0", p, NULL, 0);

	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(p) };
	CHECK(inet_pton(AF_INET, ip, &dst.sin_addr) == 1, "bad address %s", ip);
	CHECK(!rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000), "resolve_addr: %m");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
	uint16_t q = ntohs(rdma_get_src_port(c));
	CHECK(q && q != p, "client port %u (listener %u)", q, p);
	addrs_are(c, "client, address resolved", ip, q, ip, p);
	CHECK(!rdma_resolve_route(c, 2000), "resolve_route: %m");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	addrs_are(c, "client, route resolved", ip, q, ip, p);

	char hello[56], world[196];
	for (int i = 0; i < 56; i++)
		hello[i] = (char)(0x40 + i);
	for (int i = 0; i < 196; i++)
		world[i] = (char)(0xc0 - i);
	struct rdma_conn_param cp = {
		.private_data = hello, .private_data_len = sizeof hello,
		.responder_resources = 2, .initiator_depth = 1,
		.retry_count = 5, .rnr_retry_count = 6, .qp_num = 0x1234,
	};
	CHECK(!rdma_connect(c, &cp), "connect: %m");

	struct rdma_cm_event *ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *n = ev->id;
	struct rdma_conn_param *got = &ev->param.conn;
	CHECK(n != l && ev->listen_id == l, "the request's id");
	CHECK(got->private_data_len == 56 && !memcmp(got->private_data, hello, 56),
	      "CONNECT_REQUEST private data: %u bytes", got->private_data_len);
	CHECK(got->qp_num == 0x1234, "CONNECT_REQUEST qp_num %#x", got->qp_num);
	CHECK(got->responder_resources == 1 && got->initiator_depth == 2,
	      "CONNECT_REQUEST resources %u/%u, wanted 1/2 (crossed over)",
	      got->responder_resources, got->initiator_depth);
	CHECK(got->retry_count == 5 && got->rnr_retry_count == 6,
	      "CONNECT_REQUEST retry %u rnr %u", got->retry_count, got->rnr_retry_count);
	addrs_are(n, "server id, connect request", ip, p, ip, q);
	addrs_are(l, "listener after a request", "0.0.0.0", p, NULL, 0);
	rdma_ack_cm_event(ev);

	struct rdma_conn_param ap = {
		.private_data = world, .private_data_len = sizeof world,
		.responder_resources = 1, .initiator_depth = 1,
		.rnr_retry_count = 7, .qp_num = 0x5678,
	};
	CHECK(!rdma_accept(n, &ap), "accept: %m");
	ev = next_event(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	got = &ev->param.conn;
	CHECK(got->private_data_len == 196 && !memcmp(got->private_data, world, 196),
	      "CONNECT_RESPONSE private data: %u bytes", got->private_data_len);
	CHECK(got->qp_num == 0x5678, "CONNECT_RESPONSE qp_num %#x", got->qp_num);
	CHECK(got->responder_resources == 1 && got->initiator_depth == 1,
	      "CONNECT_RESPONSE resources %u/%u", got->responder_resources, got->initiator_depth);
	CHECK(got->rnr_retry_count == 7, "CONNECT_RESPONSE rnr %u", got->rnr_retry_count);
	rdma_ack_cm_event(ev);
	CHECK(!rdma_establish(c), "establish: %m");
	rdma_ack_cm_event(next_event(sch, RDMA_CM_EVENT_ESTABLISHED));
	addrs_are(n, "server id, established", ip, p, ip, q);
	addrs_are(c, "client, established", ip, q, ip, p);

	/* The DREQ reaches the server at once; the client's DISCONNECTED
	 * waits for the DREP, which the server's rdma_disconnect sends. */
	CHECK(!rdma_disconnect(c), "disconnect: %m");
	rdma_ack_cm_event(next_event(sch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(!rdma_disconnect(n), "disconnect after DREQ: %m");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_DISCONNECTED));
	addrs_are(n, "server id, disconnected", ip, p, ip, q);
	addrs_are(c, "client, disconnected", ip, q, ip, p);

	rdma_destroy_id(n);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	ud_events(sch, cch, ip);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("cm_addrs: ok\n");
	return 0;
}
