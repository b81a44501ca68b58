/* A program that loads libpython late: it spins for SPIN seconds of its
 * own CPU time (samples of a process with no Python in it yet), then
 * dlopens Debian's libpython3.11.so.1.0 and runs Py_BytesMain with the
 * rest of its arguments, as `python3 ARGS` would. A profiler that judged
 * the process by its first samples would miss its Python frames.
 *
 * usage: latepy SPIN SCRIPT [ARGS...]   (built by tests/nonroot.rs; only
 * dlopen needed, so no Python.h) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	int (*py_main)(int, char **);
	void *lib;
	double until;

	if (argc < 3)
		return 2;
	until = cpu_now() + atof(argv[1]);
	while (cpu_now() < until)
		for (int i = 0; i < 100000; i++)
			sink += i;
	lib = dlopen("libpython3.11.so.1.0", RTLD_NOW | RTLD_GLOBAL);
	if (!lib) {
		fprintf(stderr, "latepy: %s\n", dlerror());
		return 2;
	}
	py_main = (int (*)(int, char **))dlsym(lib, "Py_BytesMain");
	if (!py_main)
		return 2;
	argv[1] = "python3.11";
	return py_main(argc - 1, argv + 1);
}
