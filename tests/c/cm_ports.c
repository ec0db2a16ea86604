/*
 * rdma_bind_addr takes its port at once, in every port space, through
 * librdmacm as qperf and sideway use it.
 *
 * For RDMA_PS_TCP (RC), RDMA_PS_UDP (UD), RDMA_PS_IB (RC) and RDMA_PS_IPOIB
 * (UD, as ucma makes its ids; the kernel binds it in a port space of its own):
 * - a bind to 0.0.0.0 port 0 has its port right after the bind
 *   (rdma_get_src_port and rdma_get_local_addr agree, the peer side is
 *   empty), and keeps it through rdma_listen;
 * - a second id's bind to that port fails: EADDRNOTAVAIL (a wildcard is
 *   involved: the kernel's cma_check_port), on 0.0.0.0 and on ADDR alike;
 * - a bind to ADDR port 0 has its port too; a second bind to ADDR and
 *   that port is EADDRINUSE, unless both ids set RDMA_OPTION_ID_REUSEADDR;
 * - a destroyed id's port is free again.
 * Each port space has its own ports: the same port is free in the next.
 *
 * usage: cm_ports ADDR; exit 0 only when everything was as expected.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "cm_ports: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } } while (0)

static struct rdma_event_channel *ch;
static const char *addr_text;

static struct sockaddr_in sin_of(const char *ip, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1, "bad address %s", ip);
	return a;
}

static struct rdma_cm_id *new_id(enum rdma_port_space ps)
{
	struct rdma_cm_id *id;
	CHECK(!rdma_create_id(ch, &id, NULL, ps), "rdma_create_id: %m");
	return id;
}

/* rdma_bind_addr's errno (0 on success). */
static int bind_to(struct rdma_cm_id *id, const char *ip, uint16_t port)
{
	struct sockaddr_in a = sin_of(ip, port);
	errno = 0;
	return rdma_bind_addr(id, (struct sockaddr *)&a) ? errno : 0;
}

static void reuseaddr(struct rdma_cm_id *id)
{
	int one = 1;
	CHECK(!rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one),
	      "RDMA_OPTION_ID_REUSEADDR: %m");
}

/* The port the id reports, checked against its local address. */
static uint16_t port_of(struct rdma_cm_id *id, const char *ip)
{
	uint16_t p = ntohs(rdma_get_src_port(id));
	struct sockaddr_in *l = (struct sockaddr_in *)rdma_get_local_addr(id);
	struct sockaddr_in want = sin_of(ip, p);
	CHECK(l->sin_family == AF_INET && l->sin_port == want.sin_port &&
	      l->sin_addr.s_addr == want.sin_addr.s_addr, "local address is not %s:%u", ip, p);
	CHECK(rdma_get_dst_port(id) == 0, "a bound id has a peer port");
	return p;
}

static void one_port_space(enum rdma_port_space ps, const char *name)
{
	struct rdma_cm_id *w = new_id(ps), *o = new_id(ps);
	CHECK(!bind_to(w, "0.0.0.0", 0), "%s: bind 0.0.0.0:0: %m", name);
	uint16_t p = port_of(w, "0.0.0.0");
	CHECK(p != 0, "%s: port 0 after binding to port 0", name);
	int e = bind_to(o, "0.0.0.0", p);
	CHECK(e == EADDRNOTAVAIL, "%s: second bind to 0.0.0.0:%u: %s", name, p, strerror(e));
	e = bind_to(o, addr_text, p);
	CHECK(e == EADDRNOTAVAIL, "%s: bind to %s:%u beside 0.0.0.0: %s", name, addr_text, p,
	      strerror(e));
	CHECK(!rdma_listen(w, 1), "%s: rdma_listen: %m", name);
	CHECK(port_of(w, "0.0.0.0") == p, "%s: the port changed at listen", name);
	CHECK(bind_to(o, addr_text, p) == EADDRNOTAVAIL, "%s: bind beside a listener", name);

	struct rdma_cm_id *s = new_id(ps), *t = new_id(ps), *u = new_id(ps);
	CHECK(!bind_to(s, addr_text, 0), "%s: bind %s:0: %m", name, addr_text);
	uint16_t q = port_of(s, addr_text);
	CHECK(q != 0 && q != p, "%s: specific bind got port %u (wildcard has %u)", name, q, p);
	e = bind_to(t, addr_text, q);
	CHECK(e == EADDRINUSE, "%s: second bind to %s:%u: %s", name, addr_text, q, strerror(e));
	/* Both with reuseaddr share it. */
	reuseaddr(s);
	reuseaddr(u);
	CHECK(!bind_to(u, addr_text, q), "%s: reuseaddr bind beside reuseaddr: %m", name);

	/* Freed with their ids. */
	rdma_destroy_id(w);
	CHECK(!bind_to(o, "0.0.0.0", p), "%s: port %u after its id was destroyed: %m", name, p);
	CHECK(port_of(o, "0.0.0.0") == p, "%s: rebound port", name);
	rdma_destroy_id(s);
	rdma_destroy_id(u);
	CHECK(!bind_to(t, addr_text, q), "%s: port %u after its ids were destroyed: %m", name,
	      q);
	rdma_destroy_id(t);

	/* The next port space has its own ports; checked by the caller. */
	printf("%s: 0.0.0.0 port 0 -> %u, %s port 0 -> %u, conflicts as the kernel\n", name, p,
	       addr_text, q);
	rdma_destroy_id(o);
}

int main(int argc, char **argv)
{
	CHECK(argc == 2, "usage: cm_ports ADDR");
	addr_text = argv[1];
	ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %m");

	one_port_space(RDMA_PS_TCP, "RDMA_PS_TCP");
	one_port_space(RDMA_PS_UDP, "RDMA_PS_UDP");
	one_port_space(RDMA_PS_IB, "RDMA_PS_IB");
	one_port_space(RDMA_PS_IPOIB, "RDMA_PS_IPOIB");

	/* One port, four port spaces. */
	struct rdma_cm_id *a = new_id(RDMA_PS_TCP), *b = new_id(RDMA_PS_UDP),
			  *c = new_id(RDMA_PS_IB), *d = new_id(RDMA_PS_IPOIB);
	CHECK(!bind_to(a, "0.0.0.0", 0), "TCP bind: %m");
	uint16_t p = port_of(a, "0.0.0.0");
	CHECK(!bind_to(b, "0.0.0.0", p), "UDP port %u taken by TCP: %m", p);
	CHECK(!bind_to(c, "0.0.0.0", p), "IB port %u taken by TCP: %m", p);
	CHECK(!bind_to(d, "0.0.0.0", p), "IPoIB port %u taken by TCP: %m", p);
	rdma_destroy_id(a);
	rdma_destroy_id(b);
	rdma_destroy_id(c);
	rdma_destroy_id(d);
	rdma_destroy_event_channel(ch);
	printf("cm_ports: ok\n");
	return 0;
}
