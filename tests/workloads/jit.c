/*
 * A workload with known truth for mixed unwinding: run() calls into
 * "JIT" code without unwind tables (a frame-pointer trampoline copied
 * into an anonymous executable mapping, listed in /tmp/perf-PID.map as
 * perf expects of JITs), which calls back into back_in_c(), compiled
 * without frame pointers. A full stack is
 * _start;...;main;run;jit_trampoline;back_in_c (then spin or libc).
 *
 * usage: jit SECONDS
 * Protocol on stdio (as nofp.c): "tid TID 0", "ready", wait for a line,
 * work, "tcpu TID S", "cpu S", stay alive until stdin closes.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

static volatile unsigned long sink;

static double clock_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long spin(unsigned long n)
{
	unsigned long s = 0;

	for (unsigned long i = 0; i < n; i++)
		s = s * 31 + (i ^ (i >> 3));
	return s;
}

static double stop_at;

__attribute__((noinline)) void back_in_c(void)
{
	while (clock_of(CLOCK_MONOTONIC) < stop_at)
		sink += spin(2000000);
}

/* push %rbp; mov %rsp,%rbp; call *%rdi; pop %rbp; ret */
static const unsigned char trampoline[] = {
	0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3,
};

__attribute__((noinline)) void run(void (*jit)(void (*)(void)))
{
	jit(back_in_c);
	__asm__ volatile("" ::: "memory");	/* not a tail call */
}

int main(int argc, char **argv)
{
	char line[64], path[64];
	FILE *map;

	if (argc < 2) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED)
		return 1;
	memcpy(code, trampoline, sizeof(trampoline));
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", getpid());
	/*
	 * A map left by an earlier process with this PID (pid_max is 32768
	 * here and test runs start many processes) may belong to another
	 * user; writing it would keep that owner, and flare rightly ignores
	 * a map its process's user does not own. Start a new file.
	 */
	unlink(path);
	map = fopen(path, "wx");
	if (!map) {
		perror(path);
		return 1;
	}
	fprintf(map, "%lx %zx jit_trampoline\n", (unsigned long)code, sizeof(trampoline));
	fclose(map);
	printf("tid %ld 0\nready\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	double cpu0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
	stop_at = clock_of(CLOCK_MONOTONIC) + atof(argv[1]);
	run((void (*)(void (*)(void)))code);
	double cpu = clock_of(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
	printf("tcpu %ld %.6f\ncpu %.6f\n", (long)syscall(SYS_gettid), cpu, cpu);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	unlink(path);
	return 0;
}
