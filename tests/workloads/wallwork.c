/*
 * A workload with known truth for wall-clock profiles and launched
 * commands: for SECONDS of wall time, in cycles of PERIOD_MS, computes in
 * compute() for PCT percent of each cycle (measured on the thread CPU
 * clock) and sleeps in rest() for the remainder (until the cycle's end on
 * the monotonic clock). Exits with EXIT (default 0).
 *
 * usage: wallwork SECONDS PCT [PERIOD_MS] [EXIT]
 * On exit prints "cpu S wall S compute S" on stderr: the CPU and wall
 * seconds it used, and the wall seconds spent in compute() (more than its
 * CPU time when it is preempted), so tests can compare with what a
 * profiler saw.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static double clock_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void compute(double cpu_seconds)
{
	double end = clock_of(CLOCK_THREAD_CPUTIME_ID) + cpu_seconds;

	do {
		for (unsigned long i = 0; i < 20000; i++)
			sink += i ^ (i >> 3);
	} while (clock_of(CLOCK_THREAD_CPUTIME_ID) < end);
}

__attribute__((noinline)) void rest(double until)
{
	struct timespec ts;

	ts.tv_sec = (time_t)until;
	ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL))
		;
}

int main(int argc, char **argv)
{
	double seconds, pct, period, start, cycle, t0_cpu, in_compute = 0, t;
	int code;

	if (argc < 3) {
		fprintf(stderr, "usage: wallwork SECONDS PCT [PERIOD_MS] [EXIT]\n");
		return 2;
	}
	seconds = atof(argv[1]);
	pct = atof(argv[2]) / 100.0;
	period = (argc > 3 ? atof(argv[3]) : 20.0) / 1000.0;
	code = argc > 4 ? atoi(argv[4]) : 0;
	start = clock_of(CLOCK_MONOTONIC);
	t0_cpu = clock_of(CLOCK_PROCESS_CPUTIME_ID);
	for (cycle = start; cycle < start + seconds; cycle += period) {
		if (pct > 0) {
			t = clock_of(CLOCK_MONOTONIC);
			compute(pct * period);
			in_compute += clock_of(CLOCK_MONOTONIC) - t;
		}
		if (pct < 1)
			rest(cycle + period);
	}
	fprintf(stderr, "cpu %.3f wall %.3f compute %.3f\n",
		clock_of(CLOCK_PROCESS_CPUTIME_ID) - t0_cpu, clock_of(CLOCK_MONOTONIC) - start,
		in_compute);
	return code;
}
