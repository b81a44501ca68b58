/*
 * The second process of tests/workloads/pidreuse.c: the same program
 * built as another executable, laid out differently, that renames itself
 * "reuse_b" and burns CPU in reuse_second.
 *
 * usage: pidreuse2 burn SECONDS
 */
#define REUSE_SECOND
#include "pidreuse.c"
