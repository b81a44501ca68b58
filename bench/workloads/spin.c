/*
 * A fixed amount of CPU-bound work: THREADS threads each run ITERATIONS
 * rounds of arithmetic through a few call levels (so profilers have
 * stacks to walk), then exit. The run's wall time is the benchmark's
 * measure of how much a profiler slows the host down.
 *
 * usage: spin ITERATIONS [THREADS]
 */
#include <pthread.h>
#include <stdlib.h>

static long iterations;
static volatile unsigned long sink;

__attribute__((noinline)) static unsigned long leaf(unsigned long x)
{
	for (int i = 0; i < 1000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) static unsigned long middle(unsigned long x)
{
	return leaf(x) ^ (x >> 7);
}

static void *worker(void *arg)
{
	unsigned long x = (unsigned long)arg;

	for (long i = 0; i < iterations; i++)
		x = middle(x);
	sink = x;
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 2 ? atoi(argv[2]) : 1;
	pthread_t t[64];

	iterations = argc > 1 ? atol(argv[1]) : 1000000;
	if (threads < 1 || threads > 64)
		threads = 1;
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, (void *)(i + 1));
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return 0;
}
