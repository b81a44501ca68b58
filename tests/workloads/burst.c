/*
 * A workload with a known time shape for the live view's timeline: it
 * spins in spin_base for BEFORE_MS, then in burst_func for BURST_MS, then
 * in spin_base again for AFTER_MS (wall time, on one thread), and reports
 * when the burst began and ended on CLOCK_MONOTONIC, the clock of flare's
 * sample times.
 *
 * usage: burst BEFORE_MS BURST_MS AFTER_MS
 * Protocol on stdio: prints "ready", waits for a line on stdin, works,
 * prints "burst START_NS END_NS", "burstcpu S" (CPU seconds the burst
 * got: less than its wall time on a busy machine) and "cpu S" (process
 * CPU seconds used while working), then stays alive until stdin closes,
 * so that a profiler can still read its memory maps.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>

static volatile unsigned long sink;

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static double thread_cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double process_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* Pure computation until `end`; the clock is read every few
 * microseconds, so the burst's edges are sharp. */
__attribute__((noinline)) void spin_base(unsigned long long end)
{
	do {
		for (unsigned long i = 0; i < 2000; i++)
			sink += i ^ (i >> 3);
	} while (now_ns() < end);
}

__attribute__((noinline)) void burst_func(unsigned long long end)
{
	do {
		for (unsigned long i = 0; i < 2000; i++)
			sink += i * 7 + (i >> 2);
	} while (now_ns() < end);
}

int main(int argc, char **argv)
{
	char line[64];

	if (argc < 4) {
		fprintf(stderr, "usage: %s BEFORE_MS BURST_MS AFTER_MS\n", argv[0]);
		return 2;
	}
	unsigned long long before = atoll(argv[1]) * 1000000ULL;
	unsigned long long burst = atoll(argv[2]) * 1000000ULL;
	unsigned long long after = atoll(argv[3]) * 1000000ULL;
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	double cpu0 = process_cpu();
	spin_base(now_ns() + before);
	unsigned long long start = now_ns();
	double burst_cpu = thread_cpu();
	burst_func(start + burst);
	burst_cpu = thread_cpu() - burst_cpu;
	unsigned long long end = now_ns();
	spin_base(end + after);
	printf("burst %llu %llu\n", start, end);
	printf("burstcpu %.6f\n", burst_cpu);
	printf("cpu %.6f\n", process_cpu() - cpu0);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
