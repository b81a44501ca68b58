/*
 * A workload with known truth for `flare profile`: worker thread i spends
 * SHARE percent of its CPU time in func_a and the rest in func_b (thread 1
 * swaps the shares, so threads can be told apart), measured with the
 * thread CPU clock, for SECONDS of wall time.
 *
 * usage: twofuncs SECONDS [SHARE_A] [THREADS] [late [held]]
 * With "late", the worker threads are only created after the go line (to
 * test that a profiler follows threads started after it attached); with
 * "held" too, they start working only after a second line (so that a
 * profiler slow to attach, as emulated, still sees them work).
 * Protocol on stdio: prints "tid TID INDEX" per worker and "ready", waits for a
 * line on stdin, works, prints "cpu S" (process CPU seconds used while
 * working, after a "tcpu TID S" line per worker thread), then stays alive until stdin closes, so that a profiler can
 * still read its memory maps.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/syscall.h>

static double seconds;
static int share_a = 25;
static pthread_barrier_t start;
static pthread_barrier_t listed;	/* every worker has printed its tid */
static long worker_tid[64];
static double worker_cpu[64];

static double clock_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double process_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* Pure computation; the clock is read rarely so that nearly all samples
 * land in the named function itself. */
static volatile unsigned long sink;

__attribute__((noinline)) void func_a(double cpu_seconds)
{
	double end = clock_of(CLOCK_THREAD_CPUTIME_ID) + cpu_seconds;

	do {
		for (unsigned long i = 0; i < 100000; i++)
			sink += i ^ (i >> 3);
	} while (clock_of(CLOCK_THREAD_CPUTIME_ID) < end);
}

__attribute__((noinline)) void func_b(double cpu_seconds)
{
	double end = clock_of(CLOCK_THREAD_CPUTIME_ID) + cpu_seconds;

	do {
		for (unsigned long i = 0; i < 100000; i++)
			sink += i * 7 + (i >> 2);
	} while (clock_of(CLOCK_THREAD_CPUTIME_ID) < end);
}

static void *worker(void *arg)
{
	long index = (long)arg;
	int share = index == 1 ? 100 - share_a : share_a;

	worker_tid[index] = (long)syscall(SYS_gettid);
	printf("tid %ld %ld\n", worker_tid[index], index);
	fflush(stdout);
	pthread_barrier_wait(&listed);
	pthread_barrier_wait(&start);
	double cpu0 = clock_of(CLOCK_THREAD_CPUTIME_ID);
	double stop = clock_of(CLOCK_MONOTONIC) + seconds;
	while (clock_of(CLOCK_MONOTONIC) < stop) {
		func_a(share / 1000.0);
		func_b((100 - share) / 1000.0);
	}
	worker_cpu[index] = clock_of(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	return NULL;
}

int main(int argc, char **argv)
{
	long threads = 1;
	int late = 0, held = 0;
	char line[64];
	pthread_t tids[64];

	if (argc < 2) {
		fprintf(stderr, "usage: %s SECONDS [SHARE_A] [THREADS]\n", argv[0]);
		return 2;
	}
	seconds = atof(argv[1]);
	if (argc > 2)
		share_a = atoi(argv[2]);
	if (argc > 3)
		threads = atol(argv[3]);
	if (argc > 4)
		late = strcmp(argv[4], "late") == 0;
	if (argc > 5)
		held = late && strcmp(argv[5], "held") == 0;
	if (threads < 1 || threads > 64)
		threads = 1;
	pthread_barrier_init(&start, NULL, threads + 1);
	pthread_barrier_init(&listed, NULL, threads + 1);
	/* "ready" follows every "tid" line: a reader that stops at "ready"
	 * has all of them (a line written later, under emulation, once the
	 * reader had closed the pipe, killed the workload with SIGPIPE). */
	if (!late) {
		for (long i = 0; i < threads; i++)
			pthread_create(&tids[i], NULL, worker, (void *)i);
		pthread_barrier_wait(&listed);
	}
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	double before = process_cpu();
	if (late) {
		for (long i = 0; i < threads; i++)
			pthread_create(&tids[i], NULL, worker, (void *)i);
		pthread_barrier_wait(&listed);
		if (held && !fgets(line, sizeof(line), stdin))
			return 1;
	}
	pthread_barrier_wait(&start);
	for (long i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	for (long i = 0; i < threads; i++)
		printf("tcpu %ld %.6f\n", worker_tid[i], worker_cpu[i]);
	printf("cpu %.6f\n", process_cpu() - before);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
