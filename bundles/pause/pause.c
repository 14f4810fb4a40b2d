/*
 * pause: the program of a pod's sandbox ("infra") container, for CRI tests
 * that import their images instead of pulling registry.k8s.io/pause.
 *
 * It holds the pod's namespaces open by staying alive. When the pod shares
 * one pid namespace it is pid 1 there, so it reaps the orphans its
 * containers leave. It exits 0 on SIGTERM or SIGINT (as pid 1 of a pid
 * namespace it would ignore both without handlers).
 *
 * Built with `gcc -static`: the image holds nothing but this binary.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>

static volatile sig_atomic_t stopping;

static void on_stop(int sig)
{
	(void)sig;
	stopping = 1;
}

/* Only there so SIGCHLD interrupts sigsuspend; the loop reaps. */
static void on_child(int sig)
{
	(void)sig;
}

int main(void)
{
	static const int handled[] = { SIGTERM, SIGINT, SIGCHLD };
	struct sigaction sa = { 0 };
	sigset_t blocked, during_wait;

	/*
	 * Blocked outside sigsuspend, so a signal arriving between the check of
	 * `stopping` and the wait is not lost: sigsuspend unblocks atomically.
	 */
	sigemptyset(&blocked);
	for (size_t i = 0; i < sizeof(handled) / sizeof(handled[0]); i++)
		sigaddset(&blocked, handled[i]);
	if (sigprocmask(SIG_BLOCK, &blocked, &during_wait) != 0)
		return 1;
	for (size_t i = 0; i < sizeof(handled) / sizeof(handled[0]); i++)
		sigdelset(&during_wait, handled[i]);

	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_stop;
	if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
		return 1;
	sa.sa_handler = on_child;
	sa.sa_flags = SA_NOCLDSTOP;
	if (sigaction(SIGCHLD, &sa, NULL) != 0)
		return 1;

	while (!stopping) {
		sigsuspend(&during_wait);
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
	}
	return 0;
}
