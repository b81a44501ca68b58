/*
 * A workload with a fixed set of many distinct stacks, for the live view's cost
 * benchmark: each worker walks 4^LEVELS call chains of f0..f3 (65,536 by
 * default) and spins briefly at the end of each, so a profile of a few
 * seconds holds thousands of distinct stacks.
 *
 * usage: livestacks SECONDS [THREADS]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LEVELS 8

static volatile unsigned long sink;
static double seconds;

typedef void (*step_fn)(int depth, unsigned path);
static step_fn table[4];

/* The increment after the call keeps it from becoming a tail call, so each
 * level stays a frame of its own; the spin is inline in the last level so
 * that the leaf has a frame pointer too. */
#define STEP(n)                                                          \
	__attribute__((noinline)) void f##n(int depth, unsigned path)    \
	{                                                                \
		if (depth == 0) {                                        \
			for (int i = 0; i < 20000; i++)                  \
				sink += i;                               \
			return;                                          \
		}                                                        \
		table[path & 3](depth - 1, path >> 2);                   \
		sink++;                                                  \
	}
STEP(0)
STEP(1)
STEP(2)
STEP(3)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	unsigned path = (unsigned)(unsigned long)arg * 7919;
	double stop = now() + seconds;

	while (now() < stop)
		for (int i = 0; i < 256; i++, path++)
			f0(LEVELS, path % (1u << (2 * LEVELS)));
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = 2;
	pthread_t t[16];

	if (argc < 2) {
		fprintf(stderr, "usage: %s SECONDS [THREADS]\n", argv[0]);
		return 2;
	}
	seconds = atof(argv[1]);
	if (argc > 2)
		threads = atoi(argv[2]);
	if (threads < 1 || threads > 16)
		threads = 2;
	table[0] = f0;
	table[1] = f1;
	table[2] = f2;
	table[3] = f3;
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return 0;
}
