/*
 * A workload with known truth for kernel-function probes: after SIGUSR1
 * it makes exactly CALLS getppid() system calls (through syscall(2), so
 * that no library caches the answer), prints "done" and waits to be
 * killed. Before SIGUSR1 it prints "ready".
 *
 * usage: getppid CALLS
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) void ask_parent(long calls)
{
	for (long i = 0; i < calls; i++)
		sink += syscall(SYS_getppid);
}

int main(int argc, char **argv)
{
	sigset_t set;
	int sig;

	if (argc < 2) {
		fprintf(stderr, "usage: %s CALLS\n", argv[0]);
		return 2;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("ready\n");
	fflush(stdout);
	sigwait(&set, &sig);
	ask_parent(atol(argv[1]));
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
