/*
 * A fixed, context-switch-heavy workload for the off-CPU benchmark: two
 * threads pass one byte back and forth over a pair of pipes ROUNDS times,
 * so each round is two blocking reads, two wakeups and two context
 * switches. Prints the seconds it took (and, with `cpu`, the CPU seconds
 * its two threads used, user + system).
 *
 * usage: pingpong ROUNDS [cpu]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static long rounds;
static int ping[2], pong[2];

static void *echo(void *arg)
{
	char c;

	(void)arg;
	for (long i = 0; i < rounds; i++) {
		if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
			exit(1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct timespec a, b;
	pthread_t t;
	char c = 'x';

	if (argc < 2) {
		fprintf(stderr, "usage: %s ROUNDS\n", argv[0]);
		return 2;
	}
	rounds = atol(argv[1]);
	if (pipe(ping) || pipe(pong))
		return 1;
	pthread_create(&t, NULL, echo, NULL);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < rounds; i++) {
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	pthread_join(t, NULL);
	printf("%.6f", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
	if (argc > 2 && !strcmp(argv[2], "cpu")) {
		struct rusage u;

		getrusage(RUSAGE_SELF, &u);
		printf(" %.6f", u.ru_utime.tv_sec + u.ru_stime.tv_sec +
		       (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6);
	}
	printf("\n");
	return 0;
}
