/*
 * Benchmark workload for --unwind: THREADS threads (default 2) each do
 * ROUNDS rounds of fixed work at the bottom of a DEPTH-deep chain of
 * calls, built without frame pointers (bench/unwind.py builds it with
 * -O2 -fomit-frame-pointer). Half the work runs in spin(), half in a
 * comparator called back from libc's qsort (so stacks cross libc, which
 * has no frame pointers either). A complete stack runs from the thread's
 * start through worker and every level(). Prints the wall time and the
 * process CPU time of the work, then stays until stdin closes (so that
 * profilers can still read its symbols).
 *
 * usage: deepnofp ROUNDS [THREADS]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>

#define DEPTH 12

static long rounds;
static volatile unsigned long sink;

__attribute__((noinline)) unsigned long spin(unsigned long n)
{
	unsigned long s = 0;

	for (unsigned long i = 0; i < n; i++)
		s = s * 31 + (i ^ (i >> 3));
	return s;
}

static int compare(const void *a, const void *b)
{
	unsigned long x = *(const unsigned long *)a * 2654435761u;
	unsigned long y = *(const unsigned long *)b * 2654435761u;

	return (x > y) - (x < y);
}

__attribute__((noinline)) void work(void)
{
	unsigned long v[4096];

	for (int i = 0; i < 4096; i++)
		v[i] = i;
	qsort(v, 4096, sizeof(v[0]), compare);
	sink += v[7] + spin(400000);
}

__attribute__((noinline)) void level(int n)
{
	if (n == 0)
		work();
	else
		level(n - 1);
	__asm__ volatile("" ::: "memory");	/* not a tail call */
}

static void *worker(void *arg)
{
	(void)arg;
	for (long r = 0; r < rounds; r++)
		level(DEPTH - 1);
	return NULL;
}

int main(int argc, char **argv)
{
	struct timespec a, b;
	struct rusage ru;
	char line[16];
	pthread_t t[64];
	long threads = argc > 2 ? atol(argv[2]) : 2;

	if (argc < 2 || threads < 1 || threads > 64) {
		fprintf(stderr, "usage: %s ROUNDS [THREADS]\n", argv[0]);
		return 2;
	}
	rounds = atol(argv[1]);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	for (long i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	getrusage(RUSAGE_SELF, &ru);
	printf("%.6f %.6f\n", b.tv_sec - a.tv_sec + (b.tv_nsec - a.tv_nsec) / 1e9,
	       ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
