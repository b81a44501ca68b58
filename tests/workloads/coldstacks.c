/*
 * A workload whose stacks go cold: for SECONDS, each STEP_MS it recurses
 * one level deeper through level() and spins in leaf() at the bottom
 * until the step ends, so every step's stacks are new and none is met
 * again. A periodic reader whose storage keeps every stack fills it;
 * one that deletes the stacks it no longer meets keeps room for new ones
 * (tests/stack_storage.rs).
 *
 * usage: coldstacks SECONDS STEP_MS
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

static double clock_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void leaf(double until)
{
	while (clock_of(CLOCK_MONOTONIC) < until)
		for (int i = 0; i < 10000; i++)
			sink += i;
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
		fprintf(stderr, "usage: coldstacks SECONDS STEP_MS\n");
		return 2;
	}
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
