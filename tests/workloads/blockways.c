/*
 * A workload that blocks in many different ways, so that the kernel
 * stacks of its context switches are many and distinct: each round it
 * sleeps (nanosleep), polls, selects and epoll-waits on an empty pipe,
 * waits on a futex and for a signal, each with a 1 ms timeout, reads a
 * pipe a child writes to after 1 ms, and waits for that child to exit.
 * Prints "ready", waits for SIGUSR1, does ROUNDS rounds, prints "done"
 * and waits to be killed.
 *
 * usage: blockways ROUNDS
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const struct timespec ms = { 0, 1000000 };

static void round_of_blocks(int idle[2])
{
	struct timeval tv = { 0, 1000 };
	struct pollfd p = { .fd = idle[0], .events = POLLIN };
	struct epoll_event ev = { .events = EPOLLIN };
	int futex_word = 0, data[2], ep;
	sigset_t usr2;
	fd_set rd;
	pid_t child;
	char c;

	nanosleep(&ms, NULL);
	poll(&p, 1, 1);
	FD_ZERO(&rd);
	FD_SET(idle[0], &rd);
	select(idle[0] + 1, &rd, NULL, NULL, &tv);
	ep = epoll_create1(0);
	epoll_ctl(ep, EPOLL_CTL_ADD, idle[0], &ev);
	epoll_wait(ep, &ev, 1, 1);
	close(ep);
	syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, &ms, NULL, 0);
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	sigtimedwait(&usr2, NULL, &ms);
	if (pipe(data))
		exit(1);
	child = fork();
	if (child == 0) {
		nanosleep(&ms, NULL);
		if (write(data[1], "x", 1) != 1)
			_exit(1);
		_exit(0);
	}
	if (read(data[0], &c, 1) != 1)
		exit(1);
	waitpid(child, NULL, 0);
	close(data[0]);
	close(data[1]);
}

int main(int argc, char **argv)
{
	sigset_t set;
	int sig, idle[2];

	if (argc < 2) {
		fprintf(stderr, "usage: %s ROUNDS\n", argv[0]);
		return 2;
	}
	long rounds = atol(argv[1]);
	if (pipe(idle))
		return 1;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("ready\n");
	fflush(stdout);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigwait(&set, &sig);
	for (long i = 0; i < rounds; i++)
		round_of_blocks(idle);
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
