/*
 * A workload with a great many distinct stacks: every round walks a
 * pseudo-random path of DEPTH calls through 32 distinct functions before
 * spinning briefly in the last one, so timed sampling sees tens of
 * thousands of different call chains. Used to measure how long a
 * profiler takes from stop to written output.
 *
 * usage: manystacks SECONDS [THREADS]
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define DEPTH 9

static double seconds;
static volatile unsigned long sink;

typedef unsigned long (*step_fn)(unsigned long, int);
static step_fn steps[32];

static unsigned long next(unsigned long x, int depth)
{
	if (depth == DEPTH) {
		for (int i = 0; i < 2000; i++)
			x = x * 6364136223846793005UL + 1;
		return x;
	}
	x = x * 2862933555777941757UL + 3037000493UL;
	return steps[(x >> 33) & 31](x, depth + 1);
}

#define STEP(n) \
	__attribute__((noinline)) static unsigned long step##n(unsigned long x, int d) \
	{ return next(x, d) + n; }
STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)
STEP(8) STEP(9) STEP(10) STEP(11) STEP(12) STEP(13) STEP(14) STEP(15)
STEP(16) STEP(17) STEP(18) STEP(19) STEP(20) STEP(21) STEP(22) STEP(23)
STEP(24) STEP(25) STEP(26) STEP(27) STEP(28) STEP(29) STEP(30) STEP(31)

static void *worker(void *arg)
{
	unsigned long x = (unsigned long)arg;
	struct timespec now, end;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)seconds;
	do {
		for (int i = 0; i < 100; i++)
			x = next(x, 0);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec < end.tv_sec);
	sink = x;
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 2 ? atoi(argv[2]) : 1;
	pthread_t t[64];
	step_fn all[32] = {
		step0, step1, step2, step3, step4, step5, step6, step7,
		step8, step9, step10, step11, step12, step13, step14, step15,
		step16, step17, step18, step19, step20, step21, step22, step23,
		step24, step25, step26, step27, step28, step29, step30, step31,
	};

	for (int i = 0; i < 32; i++)
		steps[i] = all[i];
	seconds = argc > 1 ? atof(argv[1]) : 5;
	if (threads < 1 || threads > 64)
		threads = 1;
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, (void *)(i + 1));
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return 0;
}
