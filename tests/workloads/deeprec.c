/*
 * A workload with known truth for deep stacks: main recurses DEPTH levels
 * through level() (each a real call: work after it keeps it from being
 * turned into a loop), then at the bottom does one of three things:
 *   spin   SECONDS of CPU time in leaf() (its own thread CPU clock)
 *   sleep  COUNT naps of 10 ms in nap() (known blocked time, for the
 *          off-CPU tools)
 *   call   COUNT calls of mark() (an exact call count, for stackcount)
 * So every sample, nap or call holds main, DEPTH level() frames and the
 * leaf. Built with and without frame pointers (tests/deep_stacks.rs).
 *
 * usage: deeprec DEPTH spin|sleep|call N
 * Protocol on stdio: "ready", wait for a line, work, "cpu S", stay alive
 * until stdin closes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile unsigned long sink;
static const char *what;
static double amount;

static double clock_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void leaf(void)
{
	double end = clock_of(CLOCK_THREAD_CPUTIME_ID) + amount;

	while (clock_of(CLOCK_THREAD_CPUTIME_ID) < end)
		for (int i = 0; i < 20000; i++)
			sink += i;
}

__attribute__((noinline)) void nap(void)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

__attribute__((noinline)) void mark(void)
{
	sink++;
	__asm__ volatile("" ::: "memory");
}

static void bottom(void)
{
	long n = (long)amount;

	if (!strcmp(what, "spin"))
		leaf();
	else if (!strcmp(what, "sleep"))
		for (long i = 0; i < n; i++)
			nap();
	else
		for (long i = 0; i < n; i++)
			mark();
}

__attribute__((noinline)) int level(int n)
{
	int r;

	if (n == 0) {
		bottom();
		return 0;
	}
	r = level(n - 1);
	sink += r;
	return r + 1;
}

int main(int argc, char **argv)
{
	char line[64];

	if (argc != 4) {
		fprintf(stderr, "usage: deeprec DEPTH spin|sleep|call N\n");
		return 2;
	}
	what = argv[2];
	amount = atof(argv[3]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	level(atoi(argv[1]));
	printf("cpu %.6f\n", clock_of(CLOCK_PROCESS_CPUTIME_ID));
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
