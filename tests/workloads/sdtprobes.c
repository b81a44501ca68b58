/*
 * A workload with known truth for USDT probes: after SIGUSR1 it fires the
 * SDT probe flare:tick exactly TICKS times and flare:tock exactly TOCKS
 * times, prints "done" and waits to be killed. Before SIGUSR1 it prints
 * "ready".
 *
 * usage: sdtprobes TICKS TOCKS
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/sdt.h>

__attribute__((noinline)) void ticker(long n)
{
	for (long i = 0; i < n; i++)
		DTRACE_PROBE1(flare, tick, i);
}

__attribute__((noinline)) void tocker(long n)
{
	for (long i = 0; i < n; i++)
		DTRACE_PROBE1(flare, tock, i);
}

int main(int argc, char **argv)
{
	sigset_t set;
	int sig;

	if (argc < 3) {
		fprintf(stderr, "usage: %s TICKS TOCKS\n", argv[0]);
		return 2;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("ready\n");
	fflush(stdout);
	sigwait(&set, &sig);
	ticker(atol(argv[1]));
	tocker(atol(argv[2]));
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
