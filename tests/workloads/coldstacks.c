/*
 * A workload whose stacks go cold: for SECONDS, each STEP_MS it recurses
 * one level deeper through level() and spins in leaf() at the bottom
 * until the step ends, so every step's stacks are new and none is met
 * again. A periodic reader whose storage keeps every stack fills it;
 * one that deletes the stacks it no longer meets keeps room for new ones
 * (tests/stack_storage.rs). With NAP_US, leaf() also sleeps that long
 * every 2 ms of spinning: off-CPU periods far shorter than a sampling
 * period, whose stacks are stored as the thread leaves the CPU and which
 * are then mostly sampled out, so that no count names most of them.
 *
 * usage: coldstacks SECONDS STEP_MS [NAP_US]
 * Protocol on stdio: "ready", wait for a line, work, "depth D" (the
 * deepest level reached) and "cpu S" (process CPU seconds), stay alive
 * until stdin closes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;
static long nap_ns;

static double clock_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void leaf(double until)
{
	double nap_at = clock_of(CLOCK_MONOTONIC) + 0.002;
	double now;

	while ((now = clock_of(CLOCK_MONOTONIC)) < until) {
		for (int i = 0; i < 10000; i++)
			sink += i;
		if (nap_ns && now >= nap_at) {
			struct timespec nap = { 0, nap_ns };

			nanosleep(&nap, NULL);
			nap_at = now + 0.002;
		}
	}
}

__attribute__((noinline)) void level(int depth, double until)
{
	if (depth > 0)
		level(depth - 1, until);
	else
		leaf(until);
	sink++;		/* keeps the call a call */
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: coldstacks SECONDS STEP_MS [NAP_US]\n");
		return 2;
	}
	if (argc > 3)
		nap_ns = atol(argv[3]) * 1000;
	double seconds = atof(argv[1]), step = atof(argv[2]) / 1000.0;
	char line[64];
	int depth = 0;

	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	double start = clock_of(CLOCK_MONOTONIC);
	for (double t = start; t < start + seconds; t += step)
		level(depth++, t + step);
	printf("depth %d\ncpu %f\n", depth - 1, clock_of(CLOCK_PROCESS_CPUTIME_ID));
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
