/*
 * A workload with known truth for kernel-function probes: after SIGUSR1
 * it makes exactly CALLS getppid() system calls (through syscall(2), so
 * that no library caches the answer), prints "done" and waits to be
 * killed. Before SIGUSR1 it prints "ready". With "all", each of the CALLS
 * is a getpid(), a getppid() and a getuid(): a neighbour whose calls a
 * tracer filtering by pid must not count.
 *
 * usage: getppid CALLS [all]
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) void ask_parent(long calls)
{
	for (long i = 0; i < calls; i++)
		sink += syscall(SYS_getppid);
}

__attribute__((noinline)) void ask_all(long calls)
{
	for (long i = 0; i < calls; i++)
		sink += syscall(SYS_getpid) + syscall(SYS_getppid) + syscall(SYS_getuid);
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
	if (argc > 2 && strcmp(argv[2], "all") == 0)
		ask_all(atol(argv[1]));
	else
		ask_parent(atol(argv[1]));
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
