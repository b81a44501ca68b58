/* A C program embedding libpython: runs the Python script argv[1] with
 * sys.argv = argv[1..], as `python3 SCRIPT ARGS` would, through the
 * shared libpython3.11 it links (Debian's libpython3.11-dev). Built by
 * tests/python_frames.rs; not beside the other workloads, which
 * scripts/vmtest builds for guests that have no Python.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	PyConfig config;
	FILE *f;
	int rc;

	if (argc < 2)
		return 2;
	PyConfig_InitPythonConfig(&config);
	config.parse_argv = 0;
	if (PyStatus_Exception(PyConfig_SetBytesArgv(&config, argc - 1, argv + 1)))
		return 2;
	if (PyStatus_Exception(Py_InitializeFromConfig(&config)))
		return 2;
	PyConfig_Clear(&config);
	f = fopen(argv[1], "r");
	if (!f)
		return 2;
	rc = PyRun_SimpleFileEx(f, argv[1], 1);
	Py_Finalize();
	return rc ? 1 : 0;
}
