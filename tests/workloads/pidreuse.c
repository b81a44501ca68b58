/*
 * Ground truth for a PID reused during a run (issue 25, finding 8): a
 * first process burns CPU in reuse_first and exits, then a second one,
 * of another executable (tests/workloads/pidreuse2.c: this program built
 * with REUSE_SECOND, burning in reuse_second), is given the first one's
 * PID through /proc/sys/kernel/ns_last_pid (root only).
 *
 * usage: pidreuse burn SECONDS
 *            renames itself "reuse_a" ("reuse_b" for pidreuse2) and
 *            burns SECONDS of CPU time in reuse_first (reuse_second)
 *        pidreuse run SECOND_EXE SECONDS REPORT
 *            runs `pidreuse burn SECONDS` to its end, then
 *            `SECOND_EXE burn SECONDS` under the same PID, and writes to
 *            REPORT one line per process, "first|second PID CPU_SECONDS"
 *            (CPU time from wait4), then "done"; exits 1 when the PID
 *            could not be had (another process took it meanwhile).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#ifdef REUSE_SECOND
/* Code before the burner, so that its addresses are not those of
 * reuse_first in the first executable. */
__attribute__((noinline)) unsigned long reuse_padding(unsigned long x)
{
	for (int i = 0; i < 64; i++)
		x = x * 2862933555777941757ULL + 3037000493ULL + (x >> (i % 29));
	return x;
}
#define REUSE_BURN reuse_second
#define REUSE_COMM "reuse_b"
#else
#define REUSE_BURN reuse_first
#define REUSE_COMM "reuse_a"
#endif

/* Burns `seconds` of CPU time here; the clock is read rarely, so that
 * almost every sample's leaf is in this function. */
__attribute__((noinline)) void REUSE_BURN(double seconds)
{
	volatile unsigned long x = 0;
	double end = thread_cpu() + seconds;
	while (thread_cpu() < end)
		for (int i = 0; i < 200000; i++)
			x += i * 3;
}

static double cpu_of(const struct rusage *ru)
{
	return ru->ru_utime.tv_sec + ru->ru_utime.tv_usec / 1e6 + ru->ru_stime.tv_sec +
	       ru->ru_stime.tv_usec / 1e6;
}

/* Waits for `pid`; its CPU seconds, or -1 when it failed. */
static double reap(pid_t pid)
{
	struct rusage ru;
	int status;

	if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		return -1;
	return cpu_of(&ru);
}

/* Makes the next PID handed out `pid` (when it is free). */
static int set_last_pid(pid_t pid)
{
	FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");

	if (!f)
		return -1;
	fprintf(f, "%d", pid - 1);
	return fclose(f);
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "burn") == 0) {
		prctl(PR_SET_NAME, REUSE_COMM);
		REUSE_BURN(atof(argv[2]));
		return 0;
	}
	if (argc != 5 || strcmp(argv[1], "run") != 0) {
		fprintf(stderr, "usage: pidreuse burn SECONDS | run SECOND_EXE SECONDS REPORT\n");
		return 2;
	}
	const char *second = argv[2], *seconds = argv[3];
	FILE *report = fopen(argv[4], "w");
	if (!report) {
		perror(argv[4]);
		return 2;
	}
	pid_t first = fork();
	if (first == 0) {
		execl("/proc/self/exe", "pidreuse", "burn", seconds, (char *)NULL);
		_exit(127);
	}
	double first_cpu = reap(first);
	fprintf(report, "first %d %.3f\n", first, first_cpu);
	fflush(report);
	/* Other processes may take the PID between the write and the fork:
	 * try again (a child that got another PID exits at once). */
	for (int attempt = 0; attempt < 200; attempt++) {
		if (set_last_pid(first)) {
			perror("ns_last_pid");
			return 1;
		}
		pid_t child = fork();
		if (child == 0) {
			if (getpid() != first)
				_exit(3);
			execl(second, second, "burn", seconds, (char *)NULL);
			_exit(127);
		}
		if (child != first) {
			waitpid(child, NULL, 0);
			usleep(1000);
			continue;
		}
		double second_cpu = reap(child);
		fprintf(report, "second %d %.3f\ndone\n", child, second_cpu);
		return fclose(report) ? 1 : 0;
	}
	fprintf(stderr, "pidreuse: PID %d was not had again\n", first);
	return 1;
}
