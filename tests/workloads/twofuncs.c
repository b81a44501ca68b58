/*
 * A workload with known truth for `flare profile`: each thread spends
 * SHARE_A percent of its CPU time in func_a and the rest in func_b,
 * measured with the thread CPU clock, until SECONDS of wall time pass.
 *
 * usage: twofuncs SECONDS [SHARE_A] [THREADS]
 * Prints "tid N" for each worker thread, then "ready".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static double seconds;
static int share_a = 25;

static double clock_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Pure computation; the clock is read rarely so that nearly all samples
 * land in the named function itself. */
static volatile unsigned long sink;


__attribute__((noinline)) void func_a(double cpu_seconds)
{
	double end = clock_of(CLOCK_THREAD_CPUTIME_ID) + cpu_seconds;

	do {
		for (unsigned long i = 0; i < 200000; i++)
			sink += i ^ (i >> 3);
	} while (clock_of(CLOCK_THREAD_CPUTIME_ID) < end);
}

__attribute__((noinline)) void func_b(double cpu_seconds)
{
	double end = clock_of(CLOCK_THREAD_CPUTIME_ID) + cpu_seconds;

	do {
		for (unsigned long i = 0; i < 200000; i++)
			sink += i * 7 + (i >> 2);
	} while (clock_of(CLOCK_THREAD_CPUTIME_ID) < end);
}

static void *worker(void *arg)
{
	double stop = clock_of(CLOCK_MONOTONIC) + seconds;

	(void)arg;
	printf("tid %ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	while (clock_of(CLOCK_MONOTONIC) < stop) {
		func_a(share_a / 1000.0);
		func_b((100 - share_a) / 1000.0);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = 1;

	if (argc < 2) {
		fprintf(stderr, "usage: %s SECONDS [SHARE_A] [THREADS]\n", argv[0]);
		return 2;
	}
	seconds = atof(argv[1]);
	if (argc > 2)
		share_a = atoi(argv[2]);
	if (argc > 3)
		threads = atoi(argv[3]);

	pthread_t tids[64];
	if (threads > 64)
		threads = 64;
	for (int i = 0; i < threads; i++)
		pthread_create(&tids[i], NULL, worker, NULL);
	usleep(1000);
	printf("ready\n");
	fflush(stdout);
	for (int i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	return 0;
}
