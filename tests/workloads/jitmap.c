/*
 * Ground truth for JIT symbol maps: copies a tiny counting loop (x86-64
 * or arm64 machine code) into anonymous executable memory, names it
 * jit_spin_loop in /tmp/perf-PID.map, and runs it.
 *
 * usage: jitmap SECONDS exit|stay [other|drop|symlink TARGET|fifo]
 *   other  the map is given to uid 65534 while the process stays root
 *          (a map flare must not trust)
 *   drop   the process becomes uid 65534 first and writes its own map
 *   symlink  as drop, but its "map" is a symbolic link to TARGET
 *   fifo     as drop, but its "map" is a FIFO nobody writes to
 * Protocol on stdio: prints "ready", waits for a line, spins for SECONDS,
 * prints "done"; then removes its map and exits, or with "stay" waits for
 * stdin to close.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__aarch64__)
/* 1: subs x0, x0, #1; b.ne 1b; ret */
static const unsigned char code[] = {
	0x00, 0x04, 0x00, 0xf1, 0xe1, 0xff, 0xff, 0x54, 0xc0, 0x03, 0x5f, 0xd6,
};
#else
/* mov rax, rdi; 1: dec rax; jnz 1b; ret */
static const unsigned char code[] = {0x48, 0x89, 0xf8, 0x48, 0xff, 0xc8, 0x75, 0xfb, 0xc3};
#endif

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void jit_caller(long (*f)(long), double end)
{
	while (now() < end)
		f(1000000);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: jitmap SECONDS exit|stay [other|drop|symlink TARGET|fifo]\n");
		return 2;
	}
	const char *how = argc > 3 ? argv[3] : "";
	int hostile = strcmp(how, "symlink") == 0 || strcmp(how, "fifo") == 0;
	if ((strcmp(how, "drop") == 0 || hostile) && (setgid(65534) || setuid(65534)))
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return 1;
	memcpy(page, code, sizeof code);
	/* arm64's instruction cache does not see the copy by itself. */
	__builtin___clear_cache((char *)page, (char *)page + sizeof code);
	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
	/* Not a stale map of an earlier process with this PID (see jit.c). */
	unlink(path);
	if (strcmp(how, "symlink") == 0) {
		if (argc < 5 || symlink(argv[4], path))
			return 1;
	} else if (strcmp(how, "fifo") == 0) {
		if (mkfifo(path, 0644))
			return 1;
	} else {
		FILE *map = fopen(path, "wx");
		if (!map)
			return 1;
		fprintf(map, "%lx %zx jit_spin_loop\n", (unsigned long)page, sizeof code);
		fclose(map);
	}
	if (strcmp(how, "other") == 0 && chown(path, 65534, 65534))
		return 1;
	printf("ready\n");
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	jit_caller((long (*)(long))page, now() + atof(argv[1]));
	printf("done\n");
	if (strcmp(argv[2], "stay") == 0)
		while (fgets(line, sizeof line, stdin))
			;
	unlink(path);
	return 0;
}
