/*
 * probe: a tiny static program that tests run INSIDE containers to observe
 * what the runtime set up. Output is one `key=value` per line (except the
 * verbatim dumps: mounts, env, cat) so tests can parse it without a JSON
 * library. Exit 0 on success; on failure a message goes to stderr and the
 * exit status is nonzero (see usage()).
 *
 * Plain C, no dependencies: it must run in a rootfs that has nothing but
 * busybox, so it is built with `gcc -static` by bundles/mkrootfs.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *errname(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : "EUNKNOWN";
}

static int fail(const char *what, const char *arg)
{
	fprintf(stderr, "probe: %s %s: %s (%s)\n", what, arg ? arg : "",
		strerror(errno), errname(errno));
	return 1;
}

/* Copy a file to stdout byte for byte (mountinfo, status, cat). */
static int dump(const char *path)
{
	char buf[65536];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("open", path);
	while ((n = read(fd, buf, sizeof buf)) > 0)
		fwrite(buf, 1, n, stdout);
	if (n < 0)
		return fail("read", path);
	close(fd);
	return 0;
}

static int do_hostname(void)
{
	struct utsname u;
	if (uname(&u) < 0)
		return fail("uname", NULL);
	printf("hostname=%s\ndomainname=%s\n", u.nodename, u.domainname);
	return 0;
}

static int do_ids(void)
{
	gid_t groups[NGROUPS_MAX];
	int n = getgroups(NGROUPS_MAX, groups);
	mode_t mask = umask(0); /* umask can only be read by setting it */
	umask(mask);
	if (n < 0)
		return fail("getgroups", NULL);
	printf("uid=%u\ngid=%u\neuid=%u\negid=%u\ngroups=", getuid(), getgid(),
	       geteuid(), getegid());
	for (int i = 0; i < n; i++)
		printf(i ? ",%u" : "%u", groups[i]);
	printf("\numask=%04o\n", mask);
	return 0;
}

/* Print selected "Name:\tvalue" lines of /proc/self/status as Name=value. */
static int do_caps(void)
{
	static const char *keys[] = { "CapInh", "CapPrm", "CapEff", "CapBnd",
				      "CapAmb", "NoNewPrivs", "Seccomp", NULL };
	char line[512];
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return fail("open", "/proc/self/status");
	while (fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		*colon = 0;
		for (int i = 0; keys[i]; i++)
			if (!strcmp(line, keys[i]))
				printf("%s=%s", line, colon + 1 + strspn(colon + 1, " \t"));
	}
	fclose(f);
	return 0;
}

static int do_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	if (!d)
		return fail("opendir", "/proc/self/fd");
	while ((e = readdir(d))) {
		char target[PATH_MAX];
		ssize_t n;
		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
			continue;
		n = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
		target[n < 0 ? 0 : n] = 0;
		printf("fd.%s=%s\n", e->d_name, target);
	}
	closedir(d);
	return 0;
}

static int do_cwd(void)
{
	char buf[PATH_MAX];
	if (!getcwd(buf, sizeof buf))
		return fail("getcwd", NULL);
	printf("cwd=%s\n", buf);
	return 0;
}

static int do_env(void)
{
	for (char **e = environ; *e; e++)
		printf("%s\n", *e);
	return 0;
}

static void print_rlim(const char *name, const char *which, rlim_t v)
{
	if (v == RLIM_INFINITY)
		printf("%s.%s=unlimited\n", name, which);
	else
		printf("%s.%s=%llu\n", name, which, (unsigned long long)v);
}

static int do_rlimits(void)
{
#define R(x) { #x, x }
	static const struct { const char *name; int res; } lims[] = {
		R(RLIMIT_AS), R(RLIMIT_CORE), R(RLIMIT_CPU), R(RLIMIT_DATA),
		R(RLIMIT_FSIZE), R(RLIMIT_LOCKS), R(RLIMIT_MEMLOCK),
		R(RLIMIT_MSGQUEUE), R(RLIMIT_NICE), R(RLIMIT_NOFILE),
		R(RLIMIT_NPROC), R(RLIMIT_RSS), R(RLIMIT_RTPRIO),
		R(RLIMIT_RTTIME), R(RLIMIT_SIGPENDING), R(RLIMIT_STACK),
	};
#undef R
	for (size_t i = 0; i < sizeof lims / sizeof lims[0]; i++) {
		struct rlimit r;
		if (getrlimit(lims[i].res, &r) < 0)
			return fail("getrlimit", lims[i].name);
		print_rlim(lims[i].name, "soft", r.rlim_cur);
		print_rlim(lims[i].name, "hard", r.rlim_max);
	}
	return 0;
}

static int do_ns(void)
{
	DIR *d = opendir("/proc/self/ns");
	struct dirent *e;
	if (!d)
		return fail("opendir", "/proc/self/ns");
	while ((e = readdir(d))) {
		char target[256];
		ssize_t n;
		if (e->d_name[0] == '.')
			continue;
		n = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
		target[n < 0 ? 0 : n] = 0;
		printf("%s=%s\n", e->d_name, target);
	}
	closedir(d);
	return 0;
}

static int do_oom(void)
{
	printf("oom_score_adj=");
	fflush(stdout);
	return dump("/proc/self/oom_score_adj");
}

/* lstat, so a symlink (e.g. /dev/ptmx -> pts/ptmx) is reported as such. */
static int do_stat(const char *path)
{
	struct stat st;
	const char *type = "unknown";
	if (lstat(path, &st) < 0)
		return fail("stat", path);
	switch (st.st_mode & S_IFMT) {
	case S_IFREG: type = "reg"; break;
	case S_IFDIR: type = "dir"; break;
	case S_IFLNK: type = "lnk"; break;
	case S_IFCHR: type = "chr"; break;
	case S_IFBLK: type = "blk"; break;
	case S_IFIFO: type = "fifo"; break;
	case S_IFSOCK: type = "sock"; break;
	}
	printf("type=%s\nmode=%04o\nuid=%u\ngid=%u\nsize=%lld\n", type,
	       st.st_mode & 07777, st.st_uid, st.st_gid, (long long)st.st_size);
	if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
		printf("rdev=%u:%u\n", major(st.st_rdev), minor(st.st_rdev));
	if (S_ISLNK(st.st_mode)) {
		char target[PATH_MAX];
		ssize_t n = readlink(path, target, sizeof target - 1);
		target[n < 0 ? 0 : n] = 0;
		printf("target=%s\n", target);
	}
	return 0;
}

/* Tests want the errno *name* (EROFS vs EACCES), so it goes to stdout too. */
static int do_write(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, "probe\n", 6) != 6 || close(fd) < 0) {
		int e = errno;
		printf("write=%s\n", errname(e));
		errno = e; /* printf may clobber it */
		return fail("write", path);
	}
	printf("write=ok\n");
	return 0;
}

static int do_sleep(const char *arg)
{
	double s = strtod(arg, NULL);
	struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	return 0;
}

static int parse_signal(const char *s)
{
	if (s[0] >= '0' && s[0] <= '9')
		return atoi(s);
	if (!strncmp(s, "SIG", 3))
		s += 3;
	for (int i = 1; i < NSIG; i++) {
		const char *abbrev = sigabbrev_np(i);
		if (abbrev && !strcmp(abbrev, s))
			return i;
	}
	return -1;
}

static int do_signal_self(const char *arg)
{
	int sig = parse_signal(arg);
	sigset_t all;
	if (sig <= 0) {
		fprintf(stderr, "probe: unknown signal %s\n", arg);
		return 2;
	}
	fflush(stdout);
	/* Undo anything inherited from the runtime so the default action runs. */
	signal(sig, SIG_DFL);
	sigfillset(&all);
	sigprocmask(SIG_UNBLOCK, &all, NULL);
	kill(getpid(), sig);
	/* Still alive: e.g. pid 1 of a pid namespace ignores default-action
	 * signals sent from inside it, or the signal's default is to ignore. */
	printf("survived=%s\n", arg);
	fprintf(stderr, "probe: survived signal %d\n", sig);
	return 3;
}

static int do_sysctl(const char *name)
{
	char path[PATH_MAX] = "/proc/sys/";
	size_t off = strlen(path);
	/* net.ipv4.ip_forward -> net/ipv4/ip_forward; a name with '/' is a path. */
	for (const char *p = name; *p && off < sizeof path - 1; p++)
		path[off++] = (*p == '.' && !strchr(name, '/')) ? '/' : *p;
	path[off] = 0;
	printf("%s=", name);
	fflush(stdout);
	return dump(path);
}

static int usage(void)
{
	fprintf(stderr,
		"usage: probe VERB [ARG]\n"
		"  hostname | ids | caps | fds | mounts | cwd | env | rlimits | pid\n"
		"  ns | oom | stat PATH | write PATH | sleep SECONDS | exit N\n"
		"  signal-self SIG | sysctl NAME | cat PATH | tiocsti TEXT\n"
		"exit status: 0 ok, 1 operation failed (message on stderr),\n"
		"  2 usage error, 3 signal-self survived its signal\n");
	return 2;
}

/*
 * Push TEXT and a newline into the input queue of the terminal on stdin, as
 * if typed there (TIOCSTI): what an escape from a box tries first. Prints
 * tiocsti=ok, or the error of the first refused character.
 */
static int do_tiocsti(const char *text)
{
	static const char nl = '\n';

	for (const char *p = text;; p++) {
		if (ioctl(0, TIOCSTI, *p ? p : &nl) < 0) {
			printf("tiocsti=%s\n", errname(errno));
			return 0;
		}
		if (!*p)
			break;
	}
	printf("tiocsti=ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *verb = argc > 1 ? argv[1] : "";
	const char *arg = argc > 2 ? argv[2] : NULL;
	int rc;
	static const char *need_arg[] = { "stat", "write", "sleep", "exit",
					  "signal-self", "sysctl", "cat", "tiocsti",
					  NULL };

	for (int i = 0; need_arg[i]; i++)
		if (!strcmp(verb, need_arg[i]) && !arg)
			return usage();

	if (!strcmp(verb, "hostname")) rc = do_hostname();
	else if (!strcmp(verb, "ids")) rc = do_ids();
	else if (!strcmp(verb, "caps")) rc = do_caps();
	else if (!strcmp(verb, "fds")) rc = do_fds();
	else if (!strcmp(verb, "mounts")) rc = dump("/proc/self/mountinfo");
	else if (!strcmp(verb, "cwd")) rc = do_cwd();
	else if (!strcmp(verb, "env")) rc = do_env();
	else if (!strcmp(verb, "rlimits")) rc = do_rlimits();
	else if (!strcmp(verb, "pid")) rc = printf("pid=%d\nppid=%d\n", getpid(), getppid()) < 0;
	else if (!strcmp(verb, "ns")) rc = do_ns();
	else if (!strcmp(verb, "oom")) rc = do_oom();
	else if (!strcmp(verb, "stat")) rc = do_stat(arg);
	else if (!strcmp(verb, "write")) rc = do_write(arg);
	else if (!strcmp(verb, "sleep")) rc = do_sleep(arg);
	else if (!strcmp(verb, "exit")) rc = atoi(arg);
	else if (!strcmp(verb, "signal-self")) rc = do_signal_self(arg);
	else if (!strcmp(verb, "sysctl")) rc = do_sysctl(arg);
	else if (!strcmp(verb, "cat")) rc = dump(arg);
	else if (!strcmp(verb, "tiocsti")) rc = do_tiocsti(arg);
	else return usage();

	/* A failed flush (e.g. EPIPE, full disk) must not look like success. */
	if (fflush(stdout) != 0 && rc == 0)
		rc = fail("write", "stdout");
	return rc;
}
