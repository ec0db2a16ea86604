/*
 * A forked child that closes its copies of the parent's rdma_cm fds
 * (close, then closefrom on everything else) and exits does not end the
 * parent's ids: on a kernel the child only drops references to the files
 * the parent still holds. With the ucma emulator (librxu-ucma.so) the
 * child shares the parent's connection to rxud, so the emulator must not
 * tell rxud to detach the channel from the child.
 *
 * usage: ucma_fork ADDR; exit 0 only when the parent's id and channel
 * still work after each child.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "ucma_fork: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } } while (0)

/* Runs `child` in a forked child and waits for it to exit 0. */
static void in_child(void (*child)(struct rdma_event_channel *), struct rdma_event_channel *ch)
{
	pid_t pid = fork();
	CHECK(pid >= 0, "fork: %m");
	if (pid == 0) {
		child(ch);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid: %m");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (status %#x)", st);
}

static void close_channel(struct rdma_event_channel *ch)
{
	close(ch->fd);
}

static void close_everything(struct rdma_event_channel *ch)
{
	(void)ch;
	closefrom(3);
}

/* The parent's id still answers: it listens, and its port is its own. */
static void still_works(struct rdma_cm_id *id, struct rdma_event_channel *ch, const char *after)
{
	CHECK(rdma_get_src_port(id) != 0, "after %s: the id lost its port", after);
	struct rdma_cm_id *other;
	CHECK(!rdma_create_id(ch, &other, NULL, RDMA_PS_TCP), "after %s: create_id: %m", after);
	struct sockaddr_in a = *(struct sockaddr_in *)rdma_get_local_addr(id);
	errno = 0;
	/* The port is still taken by the parent's id: EADDRINUSE. */
	CHECK(rdma_bind_addr(other, (struct sockaddr *)&a) && errno == EADDRINUSE,
	      "after %s: binding the parent's port again: %s, not EADDRINUSE", after,
	      errno ? strerror(errno) : "bound");
	CHECK(!rdma_destroy_id(other), "after %s: destroy_id: %m", after);
}

int main(int argc, char **argv)
{
	CHECK(argc == 2, "usage: ucma_fork ADDR");
	struct sockaddr_in a = { .sin_family = AF_INET };
	CHECK(inet_pton(AF_INET, argv[1], &a.sin_addr) == 1, "bad address %s", argv[1]);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %m");
	struct rdma_cm_id *id;
	CHECK(!rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id: %m");
	CHECK(!rdma_bind_addr(id, (struct sockaddr *)&a), "rdma_bind_addr: %m");

	in_child(close_channel, ch);
	still_works(id, ch, "a child closed the channel");
	in_child(close_everything, ch);
	still_works(id, ch, "a child closed every fd");
	CHECK(!rdma_listen(id, 4), "rdma_listen after the children: %m");

	CHECK(!rdma_destroy_id(id), "rdma_destroy_id: %m");
	rdma_destroy_event_channel(ch);
	printf("ucma_fork: ok\n");
	return 0;
}
