/*
 * timed OUT CMD [ARG...]: run CMD (stdio inherited) and write one line to
 * OUT: "wall_ns user_us sys_us maxrss_kb". Exits with CMD's status (128+N
 * if a signal killed it).
 *
 * bundles/bench measures every command through this instead of from
 * Python: a process's peak RSS survives execve, so a child forked from the
 * Python interpreter would report the interpreter's ~9 MB as its own. This
 * static helper is a few hundred KB, well under any runtime's figure.
 * CPU time and peak RSS cover CMD and every descendant it waited for (for
 * `run`, the container's init until it execs the workload).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct timespec a, b;
	struct rusage ru;
	int status;

	if (argc < 3) {
		fprintf(stderr, "usage: timed OUT CMD [ARG...]\n");
		return 125;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	pid_t pid = fork();
	if (pid < 0) {
		perror("timed: fork");
		return 125;
	}
	if (pid == 0) {
		execvp(argv[2], argv + 2);
		perror("timed: exec");
		_exit(127);
	}
	if (wait4(pid, &status, 0, &ru) < 0) {
		perror("timed: wait4");
		return 125;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	FILE *out = fopen(argv[1], "w");
	if (!out) {
		perror("timed: open OUT");
		return 125;
	}
	fprintf(out, "%lld %ld %ld %ld\n",
		(long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
		ru.ru_utime.tv_sec * 1000000L + ru.ru_utime.tv_usec,
		ru.ru_stime.tv_sec * 1000000L + ru.ru_stime.tv_usec, ru.ru_maxrss);
	if (fclose(out) != 0) {
		perror("timed: write OUT");
		return 125;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
