/*
 * Ground truth for naming a process after it has exited: it does one
 * thing in functions of its own, then exits (or, with "stay", keeps
 * living), so that the stacks a tool shows for it can be compared
 * between the two.
 *
 * usage: shortlived MODE SECONDS exit|stay
 *   burn      CPU in sl_burn (called by sl_burn_outer)
 *   sleep     5 ms sleeps in sl_sleep (called by sl_sleep_outer)
 *   pingpong  the main thread blocks on a pipe in sl_wait, a second
 *             thread wakes it every 5 ms from sl_wake
 *   calls     sl_leaf called from sl_caller every millisecond
 * Protocol on stdio: prints "ready", waits for a line, then execs itself
 * (so that its mappings change after a profiler has attached: the new
 * image is mapped at new addresses), works for SECONDS, prints "done";
 * then exits, or with "stay" waits for stdin to close.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static double seconds;
static int pipefd[2];
static volatile int stop;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void sl_burn(double end)
{
	volatile unsigned long x = 0;
	while (now() < end)
		for (int i = 0; i < 100000; i++)
			x += i;
}

__attribute__((noinline)) void sl_burn_outer(double end) { sl_burn(end); }

__attribute__((noinline)) void sl_sleep(double end)
{
	struct timespec d = {0, 5000000};
	while (now() < end)
		nanosleep(&d, NULL);
}

__attribute__((noinline)) void sl_sleep_outer(double end) { sl_sleep(end); }

__attribute__((noinline)) void sl_wake(void)
{
	struct timespec d = {0, 5000000};
	while (!stop) {
		nanosleep(&d, NULL);
		if (write(pipefd[1], "x", 1) != 1)
			break;
	}
}

static void *waker(void *arg)
{
	(void)arg;
	sl_wake();
	return NULL;
}

__attribute__((noinline)) void sl_wait(double end)
{
	char c;
	while (now() < end)
		if (read(pipefd[0], &c, 1) != 1)
			break;
}

__attribute__((noinline)) int sl_leaf(int i) { return i * 3; }

__attribute__((noinline)) void sl_caller(double end)
{
	struct timespec d = {0, 1000000};
	volatile int x = 0;
	for (int i = 0; now() < end; i++) {
		x += sl_leaf(i);
		nanosleep(&d, NULL);
	}
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: shortlived MODE SECONDS exit|stay\n");
		return 2;
	}
	seconds = atof(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	char line[64];
	if (argc == 4) {
		printf("ready\n");
		if (!fgets(line, sizeof line, stdin))
			return 1;
		execl("/proc/self/exe", argv[0], argv[1], argv[2], argv[3], "run", (char *)NULL);
		return 1;
	}
	/* exec through /proc/self/exe named the process "exe". */
	prctl(PR_SET_NAME, "shortlived");
	double end = now() + seconds;
	if (strcmp(argv[1], "burn") == 0) {
		sl_burn_outer(end);
	} else if (strcmp(argv[1], "sleep") == 0) {
		sl_sleep_outer(end);
	} else if (strcmp(argv[1], "pingpong") == 0) {
		pthread_t t;
		if (pipe(pipefd) || pthread_create(&t, NULL, waker, NULL))
			return 1;
		sl_wait(end);
		stop = 1;
		pthread_join(t, NULL);
	} else if (strcmp(argv[1], "calls") == 0) {
		sl_caller(end);
	} else {
		return 2;
	}
	printf("done\n");
	if (strcmp(argv[3], "stay") == 0)
		while (fgets(line, sizeof line, stdin))
			;
	return 0;
}
