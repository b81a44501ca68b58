/*
 * A workload with known truth for `flare stackcount`: after SIGUSR1 it
 * calls leaf() exactly CALLS times, half through caller_a() and half
 * through caller_b(), then does exactly READS one-byte read() system
 * calls on /dev/zero, prints "done" and waits to be killed (so that its
 * stacks can still be symbolized). Before SIGUSR1 it prints "ready".
 *
 * usage: leafcalls CALLS [READS]
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) void touch(unsigned long i)
{
	sink += i;
}

/* Not a leaf to the compiler (it calls touch), so that it sets up a frame
 * pointer: a probe at its entry then sees it as the kernel expects
 * (push %rbp first) and reports its caller. */
__attribute__((noinline)) void leaf(unsigned long i)
{
	touch(i);
	__asm__ volatile("" ::: "memory");
}

/* The barrier after the call keeps it from becoming a tail call, which
 * would take the caller out of the stack. */
__attribute__((noinline)) void caller_a(unsigned long i)
{
	leaf(i);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void caller_b(unsigned long i)
{
	leaf(i);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void do_reads(long reads)
{
	char c;
	int fd = open("/dev/zero", O_RDONLY);

	if (fd < 0) {
		perror("/dev/zero");
		exit(1);
	}
	for (long i = 0; i < reads; i++)
		if (read(fd, &c, 1) != 1)
			exit(1);
	close(fd);
}

int main(int argc, char **argv)
{
	sigset_t set;
	int sig;

	if (argc < 2) {
		fprintf(stderr, "usage: %s CALLS [READS]\n", argv[0]);
		return 2;
	}
	long calls = atol(argv[1]);
	long reads = argc > 2 ? atol(argv[2]) : 0;

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
	do_reads(reads);
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
