/*
 * An fd number that was an rdma_cm channel of the ucma emulator
 * (librxu-ucma.so, preloaded) and is then closed by dup2, dup3,
 * close_range or closefrom names whatever comes next, never the
 * emulated device: fstat of it says what the new file is (a pipe here),
 * not the ucma character device, as on a kernel.
 *
 * usage: ucma_fd_reuse; exit 0 only when every case held.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/close_range.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "ucma_fd_reuse: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } } while (0)

/* A channel of the emulated device. */
static int channel(void)
{
	int fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
	struct stat st;
	CHECK(fd >= 0, "open rdma_cm: %m (is librxu-ucma.so preloaded?)");
	CHECK(!fstat(fd, &st) && S_ISCHR(st.st_mode), "a new channel is not a char device");
	return fd;
}

static void is_fifo(int fd, const char *how)
{
	struct stat st;
	CHECK(!fstat(fd, &st), "%s: fstat %d: %m", how, fd);
	CHECK(S_ISFIFO(st.st_mode), "%s: fd %d is still taken for the rdma_cm device (mode %o)",
	      how, fd, st.st_mode);
}

int main(void)
{
	int p[2];
	CHECK(!pipe(p), "pipe: %m");

	int fd = channel();
	CHECK(dup2(p[0], fd) == fd, "dup2: %m");
	is_fifo(fd, "dup2");
	close(fd);

	fd = channel();
	CHECK(dup3(p[0], fd, O_CLOEXEC) == fd, "dup3: %m");
	is_fifo(fd, "dup3");
	close(fd);

	fd = channel();
	CHECK(!close_range(fd, fd, 0), "close_range: %m");
	int again = dup(p[0]);
	CHECK(again == fd, "dup after close_range got %d, not %d", again, fd);
	is_fifo(fd, "close_range");
	close(fd);

	/* CLOSE_RANGE_CLOEXEC closes nothing: still the device. */
	fd = channel();
	CHECK(!close_range(fd, fd, CLOSE_RANGE_CLOEXEC), "close_range CLOEXEC: %m");
	struct stat st;
	CHECK(!fstat(fd, &st) && S_ISCHR(st.st_mode), "CLOSE_RANGE_CLOEXEC forgot the channel");
	close(fd);

	/* A failed dup2 (bad old fd) leaves the channel as it was. */
	fd = channel();
	CHECK(dup2(1000000, fd) == -1 && errno == EBADF, "dup2 from a bad fd");
	CHECK(!fstat(fd, &st) && S_ISCHR(st.st_mode), "a failed dup2 forgot the channel");
	close(fd);

	fd = channel();
	int top = p[0] > p[1] ? p[0] : p[1];
	CHECK(fd > top, "the channel %d is below the pipe", fd);
	closefrom(fd);
	again = dup(p[0]);
	CHECK(again == fd, "dup after closefrom got %d, not %d", again, fd);
	is_fifo(fd, "closefrom");

	printf("ucma_fd_reuse: ok\n");
	return 0;
}
