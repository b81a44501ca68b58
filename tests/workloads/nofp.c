/*
 * A workload with known truth for unwinding without frame pointers: the
 * worker thread spends SHARE percent of its CPU time in func_a and the
 * rest in func_b (measured with the thread CPU clock), each running a
 * frameless leaf, spin(). Built by the tests without frame pointers, with
 * frameless leaves only, as C++, and with spin calling libc through the
 * PLT (-DNOFP_PLT) (tests/unwind_profile.rs); a full
 * stack is clone3;start_thread;worker;run;func_X;spin.
 *
 * usage: nofp SECONDS [SHARE_A]
 * Protocol on stdio (as twofuncs.c): "tid TID 0", "ready", wait for a
 * line, work, "share func_a S" and "share func_b S" (each function's
 * CPU seconds by the thread CPU clock: the truth, where a clock read
 * past a share overshoots it), "tcpu TID S", "cpu S", stay alive until
 * stdin closes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/syscall.h>

static double seconds;
static int share_a = 25;
static pthread_barrier_t start;
static long worker_tid;
static double worker_cpu;
static volatile unsigned long sink;
static double cpu_a, cpu_b;

static double clock_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double process_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

#ifdef NOFP_PLT
/* Built with -DNOFP_PLT -fno-builtin: each step calls libc's labs, llabs,
 * imaxabs and abs, a few instructions each reached through its own PLT
 * stub, so that samples land in the stubs (which arm64's linkers leave
 * without call-frame information) or in the functions, leaves under spin.
 * Four stubs, not one: how often a timer's sample lands in a one-jump
 * stub depends on the CPU (17-24 % of the samples in one stub on one
 * machine, 0.2-3 % on an AMD EPYC), and the test needs some there.
 * spin scales n down: func_X stops at the first clock read past its share
 * of CPU time, so a call must be short beside that share (25 ms) even
 * where indirect branches are slow (under QEMU's TCG, a call of n / 4
 * steps took long enough to move func_a's share from 25 % to 29 %).
 * noipa: the functions are declared const, which would make spin const
 * too, and its calls would be hoisted out of func_X's loops. */
__attribute__((noinline, noipa)) unsigned long spin(unsigned long n)
{
	unsigned long s = 0;

	for (unsigned long i = 0; i < n / 256; i++) {
		long v = (long)(i ^ (i >> 3));

		s = s * 31 + (unsigned long)labs(v);
		s += (unsigned long)llabs(v) + (unsigned long)imaxabs(v);
		s += (unsigned long)abs((int)v);
	}
	return s;
}
#else
/* A leaf that sets up no frame: nothing on the stack but the return
 * address. */
__attribute__((noinline)) unsigned long spin(unsigned long n)
{
	unsigned long s = 0;

	for (unsigned long i = 0; i < n; i++)
		s = s * 31 + (i ^ (i >> 3));
	return s;
}
#endif

__attribute__((noinline)) void func_a(double cpu_seconds)
{
	double begin = clock_of(CLOCK_THREAD_CPUTIME_ID), now;
	double end = begin + cpu_seconds;

	do
		sink += spin(2000000);
	while ((now = clock_of(CLOCK_THREAD_CPUTIME_ID)) < end);
	cpu_a += now - begin;
}

/* A bigger frame than func_a's, so that the two differ in CFA offset. */
__attribute__((noinline)) void func_b(double cpu_seconds)
{
	volatile char pad[512];
	double begin = clock_of(CLOCK_THREAD_CPUTIME_ID), now;
	double end = begin + cpu_seconds;

	pad[0] = 1;
	do
		sink += spin(2000000) + pad[0];
	while ((now = clock_of(CLOCK_THREAD_CPUTIME_ID)) < end);
	cpu_b += now - begin;
}

__attribute__((noinline)) void run(void)
{
	double stop = clock_of(CLOCK_MONOTONIC) + seconds;

	while (clock_of(CLOCK_MONOTONIC) < stop) {
		func_a(share_a / 1000.0);
		func_b((100 - share_a) / 1000.0);
	}
	__asm__ volatile("" ::: "memory");
}

static void *worker(void *arg)
{
	(void)arg;
	worker_tid = (long)syscall(SYS_gettid);
	printf("tid %ld 0\n", worker_tid);
	fflush(stdout);
	pthread_barrier_wait(&start);
	double cpu0 = clock_of(CLOCK_THREAD_CPUTIME_ID);
	run();
	worker_cpu = clock_of(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	return NULL;
}

int main(int argc, char **argv)
{
	char line[64];
	pthread_t tid;

	if (argc < 2) {
		fprintf(stderr, "usage: %s SECONDS [SHARE_A]\n", argv[0]);
		return 2;
	}
	seconds = atof(argv[1]);
	if (argc > 2)
		share_a = atoi(argv[2]);
	pthread_barrier_init(&start, NULL, 2);
	pthread_create(&tid, NULL, worker, NULL);
	usleep(10000);
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	double before = process_cpu();
	pthread_barrier_wait(&start);
	pthread_join(tid, NULL);
	printf("share func_a %.6f\nshare func_b %.6f\n", cpu_a, cpu_b);
	printf("tcpu %ld %.6f\n", worker_tid, worker_cpu);
	printf("cpu %.6f\n", process_cpu() - before);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
