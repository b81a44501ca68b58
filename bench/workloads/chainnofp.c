/*
 * Benchmark workload for profiling without root (bench/nonroot.py): one
 * thread does ROUNDS rounds of fixed work at the bottom of a DEPTH-deep
 * chain of calls with small frames, built without frame pointers (-O2
 * -fomit-frame-pointer), so that a profiler needs unwind tables for
 * whole stacks and a 16 KiB stack copy holds them (deepnofp.c's 32 KiB
 * frame does not fit). Prints the wall time and the process CPU time of
 * the work, then exits.
 *
 * usage: chainnofp ROUNDS
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>

#define DEPTH 12

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long spin(unsigned long n)
{
	unsigned long s = 0;

	for (unsigned long i = 0; i < n; i++)
		s = s * 31 + (i ^ (i >> 3));
	return s;
}

__attribute__((noinline)) unsigned long mix(unsigned long n)
{
	unsigned long x = n;

	for (unsigned long i = 0; i < n; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) void work(void)
{
	sink += spin(300000) + mix(300000);
}

__attribute__((noinline)) void level(int n)
{
	if (n == 0)
		work();
	else
		level(n - 1);
	__asm__ volatile("" ::: "memory");	/* not a tail call */
}

int main(int argc, char **argv)
{
	struct timespec a, b;
	struct rusage ru;

	if (argc < 2) {
		fprintf(stderr, "usage: %s ROUNDS\n", argv[0]);
		return 2;
	}
	long rounds = atol(argv[1]);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long r = 0; r < rounds; r++)
		level(DEPTH - 1);
	clock_gettime(CLOCK_MONOTONIC, &b);
	getrusage(RUSAGE_SELF, &ru);
	printf("%.6f %.6f\n", b.tv_sec - a.tv_sec + (b.tv_nsec - a.tv_nsec) / 1e9,
	       ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	fflush(stdout);
	return 0;
}
