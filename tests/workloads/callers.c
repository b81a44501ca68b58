/*
 * A workload with known truth for the stack storage: after SIGUSR1 it
 * calls touch() through each of N distinct callers, caller i exactly
 * (i + 1) * CALLS times, so that N distinct user stacks reach touch() with
 * known counts. Prints "ready" before SIGUSR1 and "done" after the work,
 * then waits to be killed (so that its stacks can still be symbolized).
 *
 * usage: callers N CALLS   (N at most 8)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) void touch(unsigned long i)
{
	sink += i;
}

/* Calls touch with a frame of its own, so that a probe at touch's entry
 * finds the caller below it by the frame pointer. */
__attribute__((noinline)) void leaf(unsigned long i)
{
	touch(i);
	__asm__ volatile("" ::: "memory");
}

#define CALLER(n)                                              \
	__attribute__((noinline)) void caller_##n(unsigned long i) \
	{                                                      \
		leaf(i);                                       \
		__asm__ volatile("" ::: "memory");             \
	}

CALLER(0) CALLER(1) CALLER(2) CALLER(3) CALLER(4) CALLER(5) CALLER(6) CALLER(7)

static void (*const callers[])(unsigned long) = {
	caller_0, caller_1, caller_2, caller_3, caller_4, caller_5, caller_6, caller_7,
};

int main(int argc, char **argv)
{
	sigset_t set;
	int sig;

	if (argc < 3) {
		fprintf(stderr, "usage: %s N CALLS\n", argv[0]);
		return 2;
	}
	long n = atol(argv[1]);
	long calls = atol(argv[2]);
	if (n < 1 || n > 8) {
		fprintf(stderr, "N must be 1 to 8\n");
		return 2;
	}

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("ready\n");
	fflush(stdout);
	sigwait(&set, &sig);

	for (long c = 0; c < n; c++)
		for (long i = 0; i < (c + 1) * calls; i++)
			callers[c](i);
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
