/*
 * A workload that spends its time in system calls made from one known
 * function, so that its stacks have both user and kernel frames.
 *
 * usage: syscalls SECONDS
 * Same stdio protocol as twofuncs.c: "ready", wait for a line, work,
 * "cpu S", stay alive until stdin closes.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char buf[65536];

__attribute__((noinline)) void write_zeroes(int fd, double seconds)
{
	struct timespec now, end;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)seconds;
	do {
		for (int i = 0; i < 64; i++)
			if (write(fd, buf, sizeof(buf)) < 0)
				return;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec < end.tv_sec ||
		 (now.tv_sec == end.tv_sec && now.tv_nsec < end.tv_nsec));
}

int main(int argc, char **argv)
{
	char line[64];
	int fd = open("/dev/null", O_WRONLY);

	if (argc < 2 || fd < 0)
		return 2;
	memset(buf, 1, sizeof(buf));
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	write_zeroes(fd, atof(argv[1]));
	printf("cpu 0\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
