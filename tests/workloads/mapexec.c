// Maps the file argv[1] executable (its first page), says "ready", and
// spins in spin(): a process whose mappings another user chose
// (tests/hostile_processes.rs).
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void spin(void)
{
	for (;;)
		sink++;
}

int main(int argc, char **argv)
{
	int fd = argc > 1 ? open(argv[1], O_RDONLY) : -1;
	if (fd < 0 || mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
		perror(argc > 1 ? argv[1] : "usage: mapexec FILE");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	spin();
	return 0;
}
