/*
 * rdma_cm ports below 1024 are privileged, as on the kernel (its
 * cma_use_port): rdma_bind_addr to ADDR:PORT (PORT < 1024) is EACCES for
 * a process without CAP_NET_BIND_SERVICE and succeeds with it, whatever
 * the daemon that serves the device holds. Port 0 (ephemeral) and a port
 * from 1024 up bind either way.
 *
 * usage: cm_low_port ADDR PORT refused|accepted; exit 0 only when the
 * bind went as expected.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "cm_low_port: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } } while (0)

static struct rdma_event_channel *ch;

/* rdma_bind_addr's errno on a new id (0 on success); the id is destroyed. */
static int bind_errno(const char *ip, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct rdma_cm_id *id;
	CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1, "bad address %s", ip);
	CHECK(!rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id: %m");
	errno = 0;
	int e = rdma_bind_addr(id, (struct sockaddr *)&a) ? errno : 0;
	rdma_destroy_id(id);
	return e;
}

int main(int argc, char **argv)
{
	CHECK(argc == 4, "usage: cm_low_port ADDR PORT refused|accepted");
	const char *addr = argv[1];
	uint16_t port = (uint16_t)atoi(argv[2]);
	int refused = !strcmp(argv[3], "refused");
	CHECK(port > 0 && port < 1024, "PORT must be 1..1023");
	ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %m");

	int e = bind_errno(addr, port);
	if (refused)
		CHECK(e == EACCES, "bind to %s:%u without CAP_NET_BIND_SERVICE: %s, not EACCES",
		      addr, port, strerror(e));
	else
		CHECK(e == 0, "bind to %s:%u with CAP_NET_BIND_SERVICE: %s", addr, port,
		      strerror(e));
	CHECK(!bind_errno(addr, 0), "bind to %s:0: %m", addr);
	CHECK(!bind_errno(addr, 1024 + port), "bind to %s:%u: %m", addr, 1024 + port);
	rdma_destroy_event_channel(ch);
	printf("cm_low_port: ok (port %u %s)\n", port, refused ? "refused" : "accepted");
	return 0;
}
