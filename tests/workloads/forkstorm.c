/*
 * Ground truth for naming short-lived processes: starts N processes of
 * this binary, two at a time, each of which renames itself "stormchild"
 * and burns MS milliseconds of CPU in storm_burn, then exits. Every
 * sample of a "stormchild" is in storm_burn (or the few instructions
 * around it in main).
 *
 * usage: forkstorm N MS      (prints "done N" when all have exited)
 *        forkstorm child MS  (what each child runs)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double thread_cpu_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Burns CPU in this function; the clock is read rarely, so that almost
 * every sample's leaf is here. */
__attribute__((noinline)) void storm_burn(double ms)
{
	volatile unsigned long x = 0;
	double end = thread_cpu_ms() + ms;
	while (thread_cpu_ms() < end)
		for (int i = 0; i < 200000; i++)
			x += i * 7;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "child") == 0) {
		prctl(PR_SET_NAME, "stormchild");
		storm_burn(atof(argv[2]));
		return 0;
	}
	if (argc != 3) {
		fprintf(stderr, "usage: forkstorm N MS\n");
		return 2;
	}
	int n = atoi(argv[1]), running = 0, done = 0;
	for (int i = 0; i < n; i++) {
		if (running == 2) {
			wait(NULL);
			running--;
			done++;
		}
		pid_t pid = fork();
		if (pid == 0) {
			execl("/proc/self/exe", argv[0], "child", argv[2], (char *)NULL);
			_exit(127);
		}
		if (pid > 0)
			running++;
	}
	while (running-- > 0 && wait(NULL) > 0)
		done++;
	printf("done %d\n", done);
	return 0;
}
