/*
 * Time in the kernel, through a few distinct paths: THREADS threads each
 * do ROUNDS rounds of small reads of /dev/zero, writes to /dev/null,
 * getppid() and a stat of /, so that most samples have a kernel stack
 * (spin.c's have none) and profilers' kernel-stack paths are measured.
 *
 * usage: syscalls ROUNDS [THREADS]
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static long rounds;

static void *work(void *arg)
{
	char buf[64];
	struct stat st;
	int zero = open("/dev/zero", O_RDONLY), null = open("/dev/null", O_WRONLY);

	(void)arg;
	if (zero < 0 || null < 0)
		exit(1);
	for (long i = 0; i < rounds; i++) {
		if (read(zero, buf, sizeof(buf)) < 0 || write(null, buf, sizeof(buf)) < 0)
			exit(1);
		getppid();
		stat("/", &st);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 2 ? atoi(argv[2]) : 1;
	pthread_t t[256];

	rounds = argc > 1 ? atol(argv[1]) : 1000000;
	if (threads < 1 || threads > 256)
		return 2;
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, work, NULL);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return 0;
}
