/*
 * A workload with known truth for the off-CPU tools: thread "blocker"
 * blocks in read() on a pipe from block_in_read(), ROUNDS times; thread
 * "waker" sleeps MS milliseconds and then writes one byte from
 * wake_by_write(), ROUNDS times. The blocker's off-CPU time in
 * block_in_read is about ROUNDS x MS; it also measures it.
 *
 * usage: pipeblock ROUNDS MS
 * Prints "pid P", "blocker T", "waker T" (thread ids), then waits for a
 * line on stdin before the first round (so a tracer can attach first).
 * At the end it prints "blocked_us N", the time the blocker spent inside
 * read(), and stays until a second line (or the end of stdin) so that its
 * user stacks can still be symbolized.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static int rounds;
static long ms;
static int fds[2];
static double blocked;
static long tids[2];
static pthread_barrier_t ready, go;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * libc's read() and write() keep no frame pointer, so a frame-pointer
 * unwind from inside them skips their direct caller: the known functions
 * call them through one more frame, which is the one that goes missing.
 */
__attribute__((noinline)) void read_byte(int fd)
{
	char c;

	if (read(fd, &c, 1) != 1)
		exit(1);
}

__attribute__((noinline)) void write_byte(int fd)
{
	if (write(fd, "x", 1) != 1)
		exit(1);
}

__attribute__((noinline)) void block_in_read(int fd)
{
	read_byte(fd);
	__asm__ volatile("" ::: "memory");	/* not a tail call */
}

__attribute__((noinline)) void wake_by_write(int fd)
{
	write_byte(fd);
	__asm__ volatile("" ::: "memory");
}

static void *blocker(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "blocker");
	tids[0] = syscall(SYS_gettid);
	pthread_barrier_wait(&ready);
	pthread_barrier_wait(&go);
	for (int i = 0; i < rounds; i++) {
		double t = now();

		block_in_read(fds[0]);
		blocked += now() - t;
	}
	return NULL;
}

static void *waker(void *arg)
{
	struct timespec d = { ms / 1000, (ms % 1000) * 1000000L };

	(void)arg;
	pthread_setname_np(pthread_self(), "waker");
	tids[1] = syscall(SYS_gettid);
	pthread_barrier_wait(&ready);
	pthread_barrier_wait(&go);
	for (int i = 0; i < rounds; i++) {
		nanosleep(&d, NULL);
		wake_by_write(fds[1]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t a, b;
	char line[16];

	if (argc < 3) {
		fprintf(stderr, "usage: %s ROUNDS MS\n", argv[0]);
		return 2;
	}
	rounds = atoi(argv[1]);
	ms = atol(argv[2]);
	if (pipe(fds))
		return 1;
	pthread_barrier_init(&ready, NULL, 3);
	pthread_barrier_init(&go, NULL, 3);
	pthread_create(&a, NULL, blocker, NULL);
	pthread_create(&b, NULL, waker, NULL);
	pthread_barrier_wait(&ready);
	printf("pid %d\nblocker %ld\nwaker %ld\n", getpid(), tids[0], tids[1]);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	pthread_barrier_wait(&go);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("blocked_us %.0f\n", blocked * 1e6);
	fflush(stdout);
	/* Stay until told (or stdin closes), so that user stacks can still be
	 * symbolized from this process. */
	if (!fgets(line, sizeof(line), stdin))
		return 0;
	return 0;
}
