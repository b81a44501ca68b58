/*
 * Two functions without a name, for the frames flare names by their
 * start. Built twice: with -DLIB as a shared library whose two local
 * functions local_a() and local_b() are stripped of their symbols (the
 * test runs `strip --strip-all`), and without it as the program that
 * calls into it: after SIGUSR1 it calls lib_entry(0, i) A times (through
 * local_a) and lib_entry(1, i) B times (through local_b), each reaching
 * touch() through hop(), prints "done" and waits to be killed. Before
 * SIGUSR1 it prints "ready".
 *
 * usage: twolocal A B
 */
#ifdef LIB
static volatile unsigned long sink;

__attribute__((noinline)) void touch(unsigned long i)
{
	sink += i;
}

/* A frame of its own, so that a probe at touch's entry finds its caller
 * by the frame pointer. */
__attribute__((noinline)) void hop(unsigned long i)
{
	touch(i);
	__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void local_a(unsigned long i)
{
	hop(i);
	__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void local_b(unsigned long i)
{
	hop(i + 1);
	hop(i);
	__asm__ volatile("" ::: "memory");
}

void lib_entry(int which, unsigned long i)
{
	if (which)
		local_b(i);
	else
		local_a(i);
	__asm__ volatile("" ::: "memory");
}
#else
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void lib_entry(int which, unsigned long i);

int main(int argc, char **argv)
{
	sigset_t set;
	int sig;

	if (argc < 3) {
		fprintf(stderr, "usage: %s A B\n", argv[0]);
		return 2;
	}
	long a = atol(argv[1]), b = atol(argv[2]);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("ready\n");
	fflush(stdout);
	sigwait(&set, &sig);
	for (long i = 0; i < a; i++)
		lib_entry(0, i);
	for (long i = 0; i < b; i++)
		lib_entry(1, i);
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
#endif
