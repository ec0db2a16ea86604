/*
 * rdma_reject with private data, through librdmacm.
 *
 * The client connects with 56 bytes of private data (the most an RC
 * connect carries after rdma_cm's 36-byte IP header in a REQ); the server
 * checks them on CONNECT_REQUEST and answers rdma_reject with 148 bytes
 * (the REJ maximum), or with none (-z). The client must then see
 * RDMA_CM_EVENT_REJECTED, status 28 (IB_CM_REJ_CONSUMER_DEFINED), and the
 * REJ's 148 bytes of private data: the server's pattern, or zeros.
 *
 * With -O, each side first checks the limits: the client's rdma_connect
 * with 57 bytes (on an id of its own) and the server's rdma_reject with
 * 149 bytes must fail with EINVAL, after which the run goes on as above.
 *
 * usage: cm_reject -s ADDR -p PORT [-z] [-O]
 *        cm_reject -c ADDR -b SRCADDR -p PORT [-z] [-O]
 * Exit 0 only when everything was as expected.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REQ_LEN 56	/* rdma_cm's user limit in a REQ of the TCP port space */
#define REJ_LEN 148	/* IB_CM_REJ_PRIVATE_DATA_SIZE */
#define REJ_CONSUMER_DEFINED 28
#define WAIT_MS 20000

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "cm_reject: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } } while (0)

static unsigned char req_byte(int i) { return (unsigned char)(0x10 + i); }
static unsigned char rej_byte(int i) { return (unsigned char)(0xff - i); }

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	int n = poll(&p, 1, WAIT_MS);
	CHECK(n == 1, "no rdma_cm event within %d ms", WAIT_MS);
	struct rdma_cm_event *ev;
	CHECK(!rdma_get_cm_event(ch, &ev), "rdma_get_cm_event: %s", strerror(errno));
	return ev;
}

static void expect_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = next_event(ch);
	CHECK(ev->event == want && ev->status == 0, "wanted %s, got %s status %d",
	      rdma_event_str(want), rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
}

static struct addrinfo *addr(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_flags = AI_NUMERICHOST }, *ai;
	int r = getaddrinfo(host, port, &hints, &ai);
	CHECK(!r, "%s: %s", host, gai_strerror(r));
	return ai;
}

/* Prints the first bytes that differ from `want` (at most 8); 0 if none. */
static int diff(const char *what, const unsigned char *got, const unsigned char *want, int len)
{
	int bad = 0;
	for (int i = 0; i < len; i++) {
		if (got[i] == want[i])
			continue;
		if (bad++ < 8)
			fprintf(stderr, "cm_reject: %s byte %d is 0x%02x, wanted 0x%02x\n", what, i,
				got[i], want[i]);
	}
	if (bad)
		fprintf(stderr, "cm_reject: %s: %d of %d bytes differ\n", what, bad, len);
	return bad;
}

static int server(const char *host, const char *port, int empty, int limits)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %s", strerror(errno));
	struct rdma_cm_id *listen_id;
	CHECK(!rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP), "rdma_create_id: %s",
	      strerror(errno));
	struct addrinfo *ai = addr(host, port);
	CHECK(!rdma_bind_addr(listen_id, ai->ai_addr), "rdma_bind_addr: %s", strerror(errno));
	freeaddrinfo(ai);
	CHECK(!rdma_listen(listen_id, 1), "rdma_listen: %s", strerror(errno));

	struct rdma_cm_event *ev = next_event(ch);
	CHECK(ev->event == RDMA_CM_EVENT_CONNECT_REQUEST, "wanted CONNECT_REQUEST, got %s status %d",
	      rdma_event_str(ev->event), ev->status);
	struct rdma_cm_id *id = ev->id;
	const struct rdma_conn_param *cp = &ev->param.conn;
	printf("server: CONNECT_REQUEST private_data_len %u\n", cp->private_data_len);
	int bad = 0;
	if (cp->private_data_len != REQ_LEN) {
		fprintf(stderr, "cm_reject: CONNECT_REQUEST private_data_len %u, wanted %d\n",
			cp->private_data_len, REQ_LEN);
		bad++;
	}
	unsigned char want[REQ_LEN];
	for (int i = 0; i < REQ_LEN; i++)
		want[i] = req_byte(i);
	if (!cp->private_data) {
		fprintf(stderr, "cm_reject: CONNECT_REQUEST without private data\n");
		bad++;
	} else {
		int n = cp->private_data_len < REQ_LEN ? cp->private_data_len : REQ_LEN;
		bad += diff("REQ private data", cp->private_data, want, n);
	}

	unsigned char reply[REJ_LEN + 1];
	for (int i = 0; i < REJ_LEN + 1; i++)
		reply[i] = rej_byte(i);
	if (limits) {
		int r = rdma_reject(id, reply, REJ_LEN + 1);
		int e = errno;
		printf("server: rdma_reject with %d bytes: %d (%s)\n", REJ_LEN + 1, r,
		       r ? strerror(e) : "accepted");
		if (r != -1 || e != EINVAL) {
			fprintf(stderr, "cm_reject: rdma_reject with %d bytes returned %d errno %d, "
				"wanted -1 EINVAL\n", REJ_LEN + 1, r, r ? e : 0);
			bad++;
		}
	}
	int r = empty ? rdma_reject(id, NULL, 0) : rdma_reject(id, reply, REJ_LEN);
	CHECK(!r, "rdma_reject: %s", strerror(errno));
	printf("server: rejected with %d bytes of private data\n", empty ? 0 : REJ_LEN);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
	rdma_destroy_id(listen_id);
	rdma_destroy_event_channel(ch);
	printf("server: %s\n", bad ? "FAILED" : "ok");
	return bad ? 1 : 0;
}

/* An id bound to `src` with its route to `dst` resolved. */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, const char *dst,
				   const char *src, const char *port)
{
	struct rdma_cm_id *id;
	CHECK(!rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	struct addrinfo *s = addr(src, NULL), *d = addr(dst, port);
	CHECK(!rdma_resolve_addr(id, s->ai_addr, d->ai_addr, 2000), "rdma_resolve_addr: %s",
	      strerror(errno));
	freeaddrinfo(s);
	freeaddrinfo(d);
	expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(!rdma_resolve_route(id, 2000), "rdma_resolve_route: %s", strerror(errno));
	expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	return id;
}

static int client(const char *dst, const char *src, const char *port, int empty, int limits)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %s", strerror(errno));
	unsigned char data[REQ_LEN + 1];
	for (int i = 0; i < REQ_LEN + 1; i++)
		data[i] = req_byte(i);
	int bad = 0;

	if (limits) {
		struct rdma_cm_id *big = resolved(ch, dst, src, port);
		struct rdma_conn_param p = { .private_data = data, .private_data_len = REQ_LEN + 1,
					     .responder_resources = 1, .initiator_depth = 1,
					     .retry_count = 7, .rnr_retry_count = 7 };
		int r = rdma_connect(big, &p);
		int e = errno;
		printf("client: rdma_connect with %d bytes: %d (%s)\n", REQ_LEN + 1, r,
		       r ? strerror(e) : "accepted");
		if (r != -1 || e != EINVAL) {
			fprintf(stderr, "cm_reject: rdma_connect with %d bytes returned %d errno %d, "
				"wanted -1 EINVAL\n", REQ_LEN + 1, r, r ? e : 0);
			bad++;
		}
		CHECK(!rdma_destroy_id(big), "rdma_destroy_id: %s", strerror(errno));
		/* A connect that went out anyway would be rejected by the server
		   as a second request: stop here. */
		if (!r) {
			printf("client: FAILED\n");
			return 1;
		}
	}

	struct rdma_cm_id *id = resolved(ch, dst, src, port);
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	CHECK(!rdma_create_qp(id, NULL, &qa), "rdma_create_qp: %s", strerror(errno));
	struct rdma_conn_param p = { .private_data = data, .private_data_len = REQ_LEN,
				     .responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7 };
	CHECK(!rdma_connect(id, &p), "rdma_connect: %s", strerror(errno));

	struct rdma_cm_event *ev = next_event(ch);
	const struct rdma_conn_param *cp = &ev->param.conn;
	printf("client: %s status %d private_data_len %u\n", rdma_event_str(ev->event), ev->status,
	       cp->private_data_len);
	if (ev->event != RDMA_CM_EVENT_REJECTED || ev->status != REJ_CONSUMER_DEFINED) {
		fprintf(stderr, "cm_reject: wanted REJECTED status %d, got %s status %d\n",
			REJ_CONSUMER_DEFINED, rdma_event_str(ev->event), ev->status);
		bad++;
	}
	if (cp->private_data_len != REJ_LEN) {
		fprintf(stderr, "cm_reject: REJECTED private_data_len %u, wanted %d\n",
			cp->private_data_len, REJ_LEN);
		bad++;
	}
	unsigned char want[REJ_LEN];
	for (int i = 0; i < REJ_LEN; i++)
		want[i] = empty ? 0 : rej_byte(i);
	if (!cp->private_data) {
		fprintf(stderr, "cm_reject: REJECTED without private data\n");
		bad++;
	} else {
		int n = cp->private_data_len < REJ_LEN ? cp->private_data_len : REJ_LEN;
		int d = diff("REJ private data", cp->private_data, want, n);
		bad += d;
		if (!d)
			printf("client: REJ private data: %d bytes as sent (%s)\n", n,
			       empty ? "zeros" : "0xff down");
	}
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	printf("client: %s\n", bad ? "FAILED" : "ok");
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *srv = NULL, *dst = NULL, *src = NULL, *port = NULL;
	int empty = 0, limits = 0, opt;
	while ((opt = getopt(argc, argv, "s:c:b:p:zO")) != -1) {
		switch (opt) {
		case 's': srv = optarg; break;
		case 'c': dst = optarg; break;
		case 'b': src = optarg; break;
		case 'p': port = optarg; break;
		case 'z': empty = 1; break;
		case 'O': limits = 1; break;
		default: goto usage;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (srv && !dst && port)
		return server(srv, port, empty, limits);
	if (dst && src && !srv && port)
		return client(dst, src, port, empty, limits);
usage:
	fprintf(stderr, "usage: cm_reject -s ADDR -p PORT [-z] [-O]\n"
			"       cm_reject -c ADDR -b SRCADDR -p PORT [-z] [-O]\n");
	return 2;
}
