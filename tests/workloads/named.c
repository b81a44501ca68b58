/*
 * A process that names itself (prctl PR_SET_NAME, as any process may)
 * with NAME, then burns CPU until killed: for tests of names that try to
 * forge flare's output (a line break and a count inside the name).
 *
 * usage: named NAME
 */
#include <stdio.h>
#include <sys/prctl.h>

static volatile unsigned long sink;

__attribute__((noinline)) void burn(void)
{
	for (;;)
		sink++;
}

int main(int argc, char **argv)
{
	if (argc < 2 || prctl(PR_SET_NAME, argv[1], 0, 0, 0))
		return 2;
	printf("ready\n");
	fflush(stdout);
	burn();
	return 0;
}
