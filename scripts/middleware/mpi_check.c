/* MPI over rxu: every rank checks every byte it receives.
 *
 *   mpi_check check     point-to-point (8 B .. 4 MiB, eager and rendezvous),
 *                       allreduce, alltoall, bcast, MPI_Put and MPI_Get in
 *                       a window with fences; one "ok <case>" line each
 *                       from rank 0, "FAIL <case>: ..." and exit 1 on a
 *                       wrong byte.
 *   mpi_check figures   ping-pong latency of 8 B (median of 5 runs of
 *                       10000) and 1 MiB one-way bandwidth (median of 5
 *                       runs of 200), from rank 0.
 * Built by scripts/middleware/openmpi and scripts/middleware/mpich (mpirun.py)
 * with their mpicc.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static unsigned char pattern(int seed, size_t i)
{
	return (unsigned char)((seed * 131 + i * 7 + (i >> 8)) & 0xff);
}

static void fail(const char *what, size_t at, int got, int want)
{
	fprintf(stderr, "FAIL %s: rank %d byte %zu is %d, want %d\n", what, rank, at, got,
		want);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

static void ok(const char *what)
{
	if (rank == 0)
		printf("ok %s\n", what);
	fflush(stdout);
}

static void point_to_point(void)
{
	static const size_t sizes[] = { 8, 1000, 8192, 65536, 1 << 20, 4 << 20 };
	unsigned char *buf = malloc(4 << 20);
	char name[64];

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		for (int round = 0; round < 3; round++) {
			int seed = (int)k * 10 + round;
			if (rank == 0) {
				for (size_t i = 0; i < n; i++)
					buf[i] = pattern(seed, i);
				MPI_Send(buf, (int)n, MPI_BYTE, 1, seed, MPI_COMM_WORLD);
				memset(buf, 0, n);
				MPI_Recv(buf, (int)n, MPI_BYTE, 1, seed, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
				for (size_t i = 0; i < n; i++)
					if (buf[i] != (unsigned char)~pattern(seed, i))
						fail("p2p echo", i, buf[i], (unsigned char)~pattern(seed, i));
			} else if (rank == 1) {
				memset(buf, 0, n);
				MPI_Recv(buf, (int)n, MPI_BYTE, 0, seed, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
				for (size_t i = 0; i < n; i++) {
					if (buf[i] != pattern(seed, i))
						fail("p2p", i, buf[i], pattern(seed, i));
					buf[i] = (unsigned char)~buf[i];
				}
				MPI_Send(buf, (int)n, MPI_BYTE, 0, seed, MPI_COMM_WORLD);
			}
		}
		snprintf(name, sizeof(name), "send/recv %zu B x3 both ways", n);
		ok(name);
	}
	free(buf);
}

static void collectives(void)
{
	enum { N = 100000 };
	int64_t *in = malloc(N * sizeof(*in)), *out = malloc(N * sizeof(*out));
	for (int i = 0; i < N; i++)
		in[i] = (int64_t)(rank + 1) * i;
	MPI_Allreduce(in, out, N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
	int64_t ranks = (int64_t)size * (size + 1) / 2;
	for (int i = 0; i < N; i++)
		if (out[i] != ranks * i)
			fail("allreduce", (size_t)i, (int)out[i], (int)(ranks * i));
	ok("allreduce 100000 x int64");

	int per = 50000;
	int32_t *a = malloc((size_t)per * size * sizeof(int32_t));
	int32_t *b = malloc((size_t)per * size * sizeof(int32_t));
	for (int d = 0; d < size; d++)
		for (int i = 0; i < per; i++)
			a[d * per + i] = rank * 1000003 + d * 7919 + i;
	MPI_Alltoall(a, per, MPI_INT32_T, b, per, MPI_INT32_T, MPI_COMM_WORLD);
	for (int s = 0; s < size; s++)
		for (int i = 0; i < per; i++)
			if (b[s * per + i] != s * 1000003 + rank * 7919 + i)
				fail("alltoall", (size_t)(s * per + i), b[s * per + i],
				     s * 1000003 + rank * 7919 + i);
	ok("alltoall 50000 x int32 per rank");

	size_t n = 3 << 20;
	unsigned char *c = malloc(n);
	for (size_t i = 0; i < n; i++)
		c[i] = rank == 0 ? pattern(77, i) : 0;
	MPI_Bcast(c, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
	for (size_t i = 0; i < n; i++)
		if (c[i] != pattern(77, i))
			fail("bcast", i, c[i], pattern(77, i));
	ok("bcast 3 MiB");
	free(in), free(out), free(a), free(b), free(c);
}

static void one_sided(void)
{
	size_t n = 1 << 20;
	unsigned char *base;
	MPI_Win win;
	MPI_Win_allocate((MPI_Aint)n, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
	memset(base, 0, n);
	unsigned char *src = malloc(n), *dst = malloc(n);
	int peer = (rank + 1) % size;
	for (size_t i = 0; i < n; i++)
		src[i] = pattern(rank + 5, i);

	MPI_Win_fence(0, win);
	MPI_Put(src, (int)n, MPI_BYTE, peer, 0, (int)n, MPI_BYTE, win);
	MPI_Win_fence(0, win);
	int from = (rank + size - 1) % size;
	for (size_t i = 0; i < n; i++)
		if (base[i] != pattern(from + 5, i))
			fail("MPI_Put", i, base[i], pattern(from + 5, i));
	ok("MPI_Put 1 MiB with fences");

	MPI_Win_fence(0, win);
	MPI_Get(dst, (int)n, MPI_BYTE, peer, 0, (int)n, MPI_BYTE, win);
	MPI_Win_fence(0, win);
	/* The peer's window holds what its predecessor, this rank, put. */
	for (size_t i = 0; i < n; i++)
		if (dst[i] != pattern(rank + 5, i))
			fail("MPI_Get", i, dst[i], pattern(rank + 5, i));
	ok("MPI_Get 1 MiB with fences");

	int64_t one = 1, got = -1;
	MPI_Win_fence(0, win);
	MPI_Accumulate(&one, 1, MPI_INT64_T, peer, 0, 1, MPI_INT64_T, MPI_REPLACE, win);
	MPI_Win_fence(0, win);
	MPI_Fetch_and_op(&one, &got, MPI_INT64_T, peer, 0, MPI_SUM, win);
	MPI_Win_fence(0, win);
	if (got != 1)
		fail("MPI_Fetch_and_op", 0, (int)got, 1);
	ok("MPI_Accumulate + MPI_Fetch_and_op");
	free(src), free(dst);
	MPI_Win_free(&win);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void figures(void)
{
	double lat[5], bw[5];
	char small[8] = { 0 };
	size_t big = 1 << 20;
	unsigned char *buf = malloc(big);
	memset(buf, 1, big);
	for (int r = 0; r < 5; r++) {
		int iters = 10000;
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int i = 0; i < iters; i++) {
			if (rank == 0) {
				MPI_Send(small, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
				MPI_Recv(small, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else if (rank == 1) {
				MPI_Recv(small, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(small, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
			}
		}
		lat[r] = (MPI_Wtime() - t0) / iters / 2 * 1e6;

		iters = 200;
		MPI_Barrier(MPI_COMM_WORLD);
		t0 = MPI_Wtime();
		for (int i = 0; i < iters; i++) {
			if (rank == 0)
				MPI_Send(buf, (int)big, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
			else if (rank == 1)
				MPI_Recv(buf, (int)big, MPI_BYTE, 0, 2, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
		}
		MPI_Barrier(MPI_COMM_WORLD);
		bw[r] = (double)big * iters / (MPI_Wtime() - t0) / 1e9 * 8;
	}
	qsort(lat, 5, sizeof(double), cmp_double);
	qsort(bw, 5, sizeof(double), cmp_double);
	if (rank == 0)
		printf("figures: ping-pong 8 B latency %.2f us, 1 MiB bandwidth %.2f Gbit/s "
		       "(medians of 5)\n",
		       lat[2], bw[2]);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2) {
		fprintf(stderr, "mpi_check: needs at least 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (argc > 1 && strcmp(argv[1], "figures") == 0) {
		figures();
	} else {
		point_to_point();
		collectives();
		one_sided();
	}
	MPI_Finalize();
	return 0;
}
