/*
 * A workload with known truth for unwinding through frameless code at
 * probes: after SIGUSR1 it calls the frameless leaf leaf() CALLS times,
 * half through caller_a() and half through caller_b(), then makes READS
 * one-byte read() calls on /dev/zero from read_a() and 2 x READS from
 * read_b() (through libc's wrapper, which keeps no frame pointer), prints
 * "done" and waits to be killed. Before SIGUSR1 it prints "ready". Built
 * by the tests with -O2 -fomit-frame-pointer (tests/unwind_tools.rs).
 *
 * usage: libccalls CALLS READS
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile unsigned long sink;

/* No frame, no calls: at its first instruction and all through it, the
 * return address is at the top of the stack. */
__attribute__((noinline)) void leaf(unsigned long i)
{
	sink += i;
}

__attribute__((noinline)) void caller_a(unsigned long i)
{
	leaf(i);
	__asm__ volatile("" ::: "memory");	/* not a tail call */
}

__attribute__((noinline)) void caller_b(unsigned long i)
{
	leaf(i);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void read_a(int fd, long n)
{
	char c;

	for (long i = 0; i < n; i++)
		if (read(fd, &c, 1) != 1)
			exit(1);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void read_b(int fd, long n)
{
	char c[2];

	for (long i = 0; i < n; i++)
		if (read(fd, c, 1) != 1)
			exit(1);
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	sigset_t set;
	int sig, fd;

	if (argc < 3) {
		fprintf(stderr, "usage: %s CALLS READS\n", argv[0]);
		return 2;
	}
	long calls = atol(argv[1]);
	long reads = atol(argv[2]);

	fd = open("/dev/zero", O_RDONLY);
	if (fd < 0)
		return 1;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("ready\n");
	fflush(stdout);
	sigwait(&set, &sig);
	for (long i = 0; i < calls / 2; i++) {
		caller_a(i);
		caller_b(i);
	}
	read_a(fd, reads);
	read_b(fd, 2 * reads);
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
