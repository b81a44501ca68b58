/*
 * Deep user stacks for bench/deep.py: two single-threaded worker
 * processes, forked from a controller, each calls recurse() DEPTH levels
 * deep from main() and spins at the leaf, so every sample of a worker is
 * main -> recurse x DEPTH -> spin (DEPTH + 2 frames above libc's start
 * code). recurse() keeps a volatile local and uses it after the call, so
 * the compiler can neither inline it, nor turn it into a loop or a tail
 * call (check with objdump: `call recurse` inside recurse).
 *
 * The controller (the process started) prints "pids A B" once both
 * workers are at their leaf, then, for every line read on its standard
 * input, "ITERATIONS SECONDS": the spin loops' iterations so far (both
 * workers) and CLOCK_MONOTONIC, so the caller can rate any window. At
 * end of input, or after MAX_SECONDS, the workers stop and it exits.
 *
 * usage: deeprec DEPTH [MAX_SECONDS]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WORKERS 2
#define BLOCK 4096

struct shared {
	volatile unsigned long iterations[WORKERS];
	volatile int ready[WORKERS];
	volatile int stop;
};

static struct shared *sh;
static volatile unsigned long sink;

__attribute__((noinline, noclone)) static unsigned long spin(int slot, unsigned long x)
{
	unsigned long n = 0;

	sh->ready[slot] = 1;
	while (!sh->stop) {
		for (int i = 0; i < BLOCK; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
		n += BLOCK;
		sh->iterations[slot] = n;
	}
	return x;
}

__attribute__((noinline, noclone)) static unsigned long recurse(int slot, int depth, unsigned long x)
{
	volatile unsigned long keep = x;
	unsigned long r;

	if (depth <= 1)
		r = spin(slot, x);
	else
		r = recurse(slot, depth - 1, x + 1);
	__asm__ volatile("" ::: "memory");
	return r ^ keep;
}

static void on_alarm(int sig)
{
	(void)sig;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	int depth = argc > 1 ? atoi(argv[1]) : 16;
	double max_seconds = argc > 2 ? atof(argv[2]) : 3600;
	pid_t pids[WORKERS];
	char line[64];

	if (depth < 1)
		depth = 1;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	memset((void *)sh, 0, sizeof(*sh));
	for (int i = 0; i < WORKERS; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			sink = recurse(i, depth, (unsigned long)i + 1);
			_exit(0);
		}
	}
	while (!sh->ready[0] || !sh->ready[1])
		usleep(1000);
	printf("pids %d %d\n", pids[0], pids[1]);
	fflush(stdout);

	/* A read still blocked at MAX_SECONDS fails with EINTR. */
	struct sigaction sa = { .sa_handler = on_alarm };
	double end = now() + max_seconds;

	sigaction(SIGALRM, &sa, NULL);
	alarm((unsigned)max_seconds + 1);
	while (now() < end && fgets(line, sizeof(line), stdin)) {
		printf("%lu %.6f\n", sh->iterations[0] + sh->iterations[1], now());
		fflush(stdout);
	}
	sh->stop = 1;
	for (int i = 0; i < WORKERS; i++)
		waitpid(pids[i], NULL, 0);
	return 0;
}
