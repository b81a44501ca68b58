/*
 * A workload with a known shape in time, for timed profiles: after the go
 * line, thread 0 spins in steady() for LEAD seconds of its own CPU time,
 * in burst() for BURST seconds of its CPU time, then in steady() again
 * for TAIL seconds of its CPU time; thread 1 spins in other() until
 * thread 0 is done; thread 2 naps (nanosleep in nap()) NAP seconds three
 * times, spinning 0.1 s in between(). Thread 0's phases are measured in
 * its own CPU time so that a profiler sampling at F Hz of CPU time finds
 * about F * BURST samples in the burst however busy the machine is (a
 * slow emulated guest, the profiler itself competing for the CPU).
 *
 * usage: timeshape [LEAD BURST TAIL NAP]   (defaults 1.0 0.5 1.0 0.3)
 * Protocol on stdio: prints "tid TID INDEX" per thread and "ready", waits
 * for a line on stdin, works, prints "burst START END" and one
 * "nap START END" per nap (CLOCK_MONOTONIC nanoseconds, the clock of BPF
 * and of flare's timelines), "burstwall START END" (the burst in
 * CLOCK_REALTIME nanoseconds, the clock of files' start dates), then
 * "cpu S", and stays alive until stdin
 * closes, so that a profiler can still read its memory maps.
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

static double lead = 1.0, burst_len = 0.5, tail = 1.0, nap_len = 0.3;
static pthread_barrier_t start;
static long tids[3];
static unsigned long long burst_at[2], burst_wall[2], nap_at[3][2];
static volatile unsigned long sink;

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static unsigned long long wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static double process_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static unsigned long long thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static volatile int thread0_done;

/* Each spins until clock() reaches `until`, reading the clock rarely so
 * that samples land in the function itself. */
#define SPINNER(name, op)                                                   \
	__attribute__((noinline)) void name(unsigned long long (*clock)(void), \
					    unsigned long long until)       \
	{                                                                   \
		do {                                                        \
			for (unsigned long i = 0; i < 20000; i++)           \
				sink += op;                                 \
		} while (clock() < until);                                  \
	}

SPINNER(steady, i ^ (i >> 3))
SPINNER(burst, i * 7 + (i >> 2))
SPINNER(other, i * 3 ^ (i >> 5))
SPINNER(between, i + (i >> 1))

__attribute__((noinline)) void nap(double seconds)
{
	struct timespec ts = { (time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9) };

	nanosleep(&ts, NULL);
}

static unsigned long long secs(double s)
{
	return (unsigned long long)(s * 1e9);
}

static void *worker(void *arg)
{
	long index = (long)arg;

	tids[index] = (long)syscall(SYS_gettid);
	printf("tid %ld %ld\n", tids[index], index);
	fflush(stdout);
	pthread_barrier_wait(&start);
	pthread_barrier_wait(&start);
	switch (index) {
	case 0:
		steady(thread_cpu_ns, thread_cpu_ns() + secs(lead));
		burst_wall[0] = wall_ns();
		burst_at[0] = now_ns();
		burst(thread_cpu_ns, thread_cpu_ns() + secs(burst_len));
		burst_at[1] = now_ns();
		burst_wall[1] = wall_ns();
		steady(thread_cpu_ns, thread_cpu_ns() + secs(tail));
		thread0_done = 1;
		break;
	case 1:
		while (!thread0_done)
			other(now_ns, now_ns() + secs(0.01));
		break;
	default:
		for (int i = 0; i < 3; i++) {
			between(now_ns, now_ns() + secs(0.1));
			nap_at[i][0] = now_ns();
			nap(nap_len);
			nap_at[i][1] = now_ns();
		}
		break;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	char line[64];
	pthread_t threads[3];

	if (argc > 4) {
		lead = atof(argv[1]);
		burst_len = atof(argv[2]);
		tail = atof(argv[3]);
		nap_len = atof(argv[4]);
	}
	pthread_barrier_init(&start, NULL, 4);
	for (long i = 0; i < 3; i++)
		pthread_create(&threads[i], NULL, worker, (void *)i);
	pthread_barrier_wait(&start);
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	double before = process_cpu();
	pthread_barrier_wait(&start);
	for (long i = 0; i < 3; i++)
		pthread_join(threads[i], NULL);
	printf("burst %llu %llu\n", burst_at[0], burst_at[1]);
	printf("burstwall %llu %llu\n", burst_wall[0], burst_wall[1]);
	for (int i = 0; i < 3; i++)
		printf("nap %llu %llu\n", nap_at[i][0], nap_at[i][1]);
	printf("cpu %.6f\n", process_cpu() - before);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
