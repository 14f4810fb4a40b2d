"""The docker group's scenarios (conformance/clients/run): each runs
containers through `docker run --runtime tinyrun` on the daemon that
docker_engine.Docker sets up, and checks what Docker and the host see."""
import json
import os
import sys
import time

import common
from common import (TRAP, alive, cgroup_v2_only, check, freezer_state, host_cgroup_file, in_script,
                    read, run, scenario, wait_for)
from docker_engine import DEFAULT_CAPS


def dk(env):
    return env.docker


@scenario("docker", "run-rm-echo")
def _(env):
    r = dk(env).drun(["--rm"], ["echo", "hello from docker"])
    check(r.rc == 0 and r.out == "hello from docker\n", r.brief())


@scenario("docker", "runtime-in-use")
def _(env):
    """The container really is the runtime's: Docker records the runtime,
    the shim was given the runtime's path, and the runtime's own `state`
    in the root the shim uses reports the container's pid."""
    d, n = dk(env), "dk-runtime"
    try:
        cid = d.detach(n, [], ["sleep", "1000"])
        check(d.inspect(n, "{{.HostConfig.Runtime}}") == "tinyrun", "HostConfig.Runtime is not tinyrun")
        opts = json.loads(read(os.path.join(d.task_dir(cid), "options.json")))
        check(opts.get("binary_name") == env.wrapper, f"the shim's BinaryName: {opts}")
        r = run([env.runtime, "--root", d.runtime_root(cid), "state", cid])
        check(r.rc == 0, f"state: {r.brief()}")
        st = json.loads(r.out)
        check(st.get("status") == "running" and st.get("pid") == d.pid_of(n),
              f"state: want running with pid {d.pid_of(n)}: {st}")
    finally:
        d.rm(n)


@scenario("docker", "exit-status")
def _(env):
    d = dk(env)
    for code in (0, 42):
        r = d.drun(["--rm"], ["sh", "-c", f"exit {code}"])
        check(r.rc == code, f"want exit {code}: {r.brief()}")
    r = d.drun(["--rm"], ["/nonexistent-cmd"])
    check(r.rc == 127 and "nonexistent-cmd" in r.err,
          f"a missing command: want exit 127 naming it: {r.brief()}")


@scenario("docker", "exit-not-executable")
def _(env):
    """dockerd maps the runtime's error to the exit status: `permission
    denied` is 126, `no such file or directory` 127."""
    r = dk(env).drun(["--rm"], ["/etc/passwd"])
    check(r.rc == 126 and "/etc/passwd" in r.err,
          f"a file without execute permission: want exit 126 naming it: {r.brief()}")


@scenario("docker", "run-interactive")
def _(env):
    d = dk(env)
    r = d.drun(["--rm", "-i"], ["sh", "-c", 'read a; read b; echo "got:$a:$b"'], input="one\ntwo\n")
    check(r.rc == 0 and r.out == "got:one:two\n", r.brief())
    r = d.drun(["--rm", "-i"], ["cat"], input="x\ny\n", timeout=30)
    check(r.rc == 0 and r.out == "x\ny\n", f"cat until EOF: {r.brief()}")


@scenario("docker", "run-tty")
def _(env):
    d = dk(env)
    argv = d.argv(*d.run_opts(["--rm", "-t"]),
                  "sh", "-c", "test -t 0 && test -t 1 && echo TTY-OK; tty; exit 4")
    r = run(in_script(argv), env=d.cli_env)
    check(r.rc == 4, f"want exit 4: {r.brief()}")
    check("TTY-OK" in r.out and "/dev/pts/" in r.out, f"no tty inside: {r.brief()}")


@scenario("docker", "exec")
def _(env):
    d, n = dk(env), "dk-exec"
    try:
        d.detach(n, [], ["sleep", "1000"])
        r = d.dk("exec", n, "echo", "hi from exec")
        check(r.rc == 0 and r.out == "hi from exec\n", f"exec: {r.brief()}")
        r = d.dk("exec", n, "sh", "-c", "exit 3")
        check(r.rc == 3, f"exec exit status: want 3: {r.brief()}")
        # (docker exec reports any failure to start the process as 126)
        r = d.dk("exec", n, "/nonexistent-cmd")
        check(r.rc == 126 and "nonexistent-cmd" in r.out + r.err,
              f"exec of a missing command: want exit 126 naming it: {r.brief()}")
        r = d.dk("exec", "--user", "1000:1000", "--workdir", "/tmp", n, "sh", "-c", "id -u; pwd")
        check(r.rc == 0 and r.out.split() == ["1000", "/tmp"], f"exec --user --workdir: {r.brief()}")
        r = d.dk("exec", n, "cat", "/proc/self/cgroup")
        check(r.rc == 0 and f"{env.cg_parent}/" in r.out, f"exec not in the container's cgroup: {r.brief()}")
        r = run(in_script(d.argv("exec", "-t", n, "sh", "-c", "test -t 0 && test -t 1 && echo EXEC-TTY-OK")),
                env=d.cli_env)
        check(r.rc == 0 and "EXEC-TTY-OK" in r.out, f"exec -t: {r.brief()}")
    finally:
        d.rm(n)


@scenario("docker", "logs")
def _(env):
    d, n = dk(env), "dk-logs"
    try:
        d.detach(n, [], ["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 5"])
        r = d.dk("wait", n, timeout=30)
        check(r.rc == 0 and r.out.strip() == "5", f"wait: want 5: {r.brief()}")
        r = d.logs(n)
        check(r.rc == 0 and r.out == "to-stdout\n" and r.err == "to-stderr\n",
              f"logs: want stdout and stderr apart: {r.out!r} {r.err!r}")
    finally:
        d.rm(n)


@scenario("docker", "stop")
def _(env):
    """`stop -t N` sends SIGTERM, and SIGKILL only after N seconds."""
    d, n = dk(env), "dk-stop"
    try:
        d.detach(n, [], ["sh", "-c", TRAP])
        wait_for(lambda: "ready" in d.logs(n).out, "the trap to be set")
        t = time.monotonic()
        d.dk_ok("stop", "-t", "20", n, timeout=40)
        took = time.monotonic() - t
        check(d.inspect(n, "{{.State.ExitCode}}") == "7" and "got-TERM" in d.logs(n).out,
              f"stop of a TERM trap: want exit 7 and its output, got {d.inspect(n, '{{.State.ExitCode}}')}")
        check(took < 10, f"stop took {took:.1f}s although the trap exits at once")
        d.rm(n)
        # sleep as pid 1 ignores SIGTERM: killed after the grace period
        d.detach(n, [], ["sleep", "1000"])
        t = time.monotonic()
        d.dk_ok("stop", "-t", "2", n, timeout=30)
        took = time.monotonic() - t
        check(d.inspect(n, "{{.State.Status}} {{.State.ExitCode}}") == "exited 137",
              f"after stop: want 'exited 137', got {d.inspect(n, '{{.State.Status}} {{.State.ExitCode}}')!r}")
        check(2 <= took < 10, f"stop -t 2 of a process ignoring SIGTERM took {took:.1f}s")
    finally:
        d.rm(n)


@scenario("docker", "kill")
def _(env):
    d, n = dk(env), "dk-kill"
    try:
        d.detach(n, [], ["sh", "-c", TRAP])
        wait_for(lambda: "ready" in d.logs(n).out, "the trap to be set")
        d.dk_ok("kill", "-s", "TERM", n)
        r = d.dk("wait", n, timeout=20)
        check(r.rc == 0 and r.out.strip() == "7", f"wait after kill -s TERM: want 7: {r.brief()}")
        check("got-TERM" in d.logs(n).out, "the TERM trap did not run")
        d.rm(n)
        d.detach(n, [], ["sleep", "1000"])
        d.dk_ok("kill", n)
        r = d.dk("wait", n, timeout=20)
        check(r.rc == 0 and r.out.strip() == "137", f"wait after kill (KILL): want 137: {r.brief()}")
    finally:
        d.rm(n)


@scenario("docker", "restart-policy")
def _(env):
    """`--restart on-failure:2` runs the command three times in all, and
    `docker restart` gives a new process."""
    d, n = dk(env), "dk-restart"
    try:
        d.detach(n, ["--restart", "on-failure:2"], ["sh", "-c", "echo attempt; exit 3"])

        def done():
            st = d.inspect(n, "{{.State.Status}} {{.RestartCount}} {{.State.ExitCode}}")
            return st == "exited 2 3" and st
        wait_for(done, lambda: f"{n} to exit after 2 restarts "
                 f"(now {d.inspect(n, '{{.State.Status}} {{.RestartCount}}')})", 30)
        runs = d.logs(n).out.split().count("attempt")
        check(runs == 3, f"want 3 runs, the logs show {runs}")
        d.rm(n)
        d.detach(n, [], ["sleep", "1000"])
        pid1 = d.pid_of(n)
        d.dk_ok("restart", "-t", "1", n, timeout=30)
        check(d.inspect(n, "{{.State.Status}}") == "running", "not running after restart")
        pid2 = d.pid_of(n)
        check(pid2 != pid1 and not alive(pid1), f"after restart: old pid {pid1}, new {pid2}")
        r = d.dk("exec", n, "echo", "alive")
        check(r.rc == 0 and r.out == "alive\n", f"exec after restart: {r.brief()}")
    finally:
        d.rm(n)


@scenario("docker", "pause-unpause")
def _(env):
    """A paused container's counter stops (freezer FROZEN) and goes on
    after unpause."""
    d, n = dk(env), "dk-pause"
    try:
        d.detach(n, [], ["sh", "-c", "i=0; while :; do i=$((i+1)); echo $i; sleep 0.05; done"])
        pid = d.pid_of(n)
        count = lambda: len(d.logs(n).out.split())    # noqa: E731
        wait_for(lambda: count() > 3, "the counter to run")
        d.dk_ok("pause", n)
        check(d.inspect(n, "{{.State.Status}}") == "paused", "status after pause is not paused")
        check(freezer_state(pid) == "FROZEN", f"freezer after pause: {freezer_state(pid)}")
        c1 = count()
        time.sleep(1)
        c2 = count()
        check(c2 == c1, f"the counter went on while paused: {c1} -> {c2} lines")
        d.dk_ok("unpause", n)
        check(d.inspect(n, "{{.State.Status}}") == "running", "status after unpause is not running")
        check(freezer_state(pid) == "THAWED", f"freezer after unpause: {freezer_state(pid)}")
        wait_for(lambda: count() > c2 + 3, "the counter to go on after unpause", 10)
    finally:
        d.rm(n)


def limits_of(pid):
    """(memory limit, pids limit, cpu quota, cpu period) from the host's
    cgroup files of pid."""
    mem = host_cgroup_file(pid, "memory", "memory.limit_in_bytes", "memory.max")
    pids = host_cgroup_file(pid, "pids", "pids.max", "pids.max")
    if cgroup_v2_only():
        quota, period = host_cgroup_file(pid, "", "", "cpu.max").split()
    else:
        quota = host_cgroup_file(pid, "cpu", "cpu.cfs_quota_us", "")
        period = host_cgroup_file(pid, "cpu", "cpu.cfs_period_us", "")
    return mem, pids, quota, period


@scenario("docker", "update")
def _(env):
    """`docker update` runs `RUNTIME update --resources - ID`; the new
    limits are seen in the cgroup."""
    d, n = dk(env), "dk-update"
    try:
        d.detach(n, ["--memory", "64m", "--pids-limit", "50", "--cpus", "0.5"], ["sleep", "1000"])
        pid = d.pid_of(n)
        got = limits_of(pid)
        check(got == (str(64 << 20), "50", "50000", "100000"), f"before update: {got}")
        d.dk_ok("update", "--memory", "128m", "--memory-swap", "256m", "--pids-limit", "60",
                "--cpus", "1.5", n)
        got = limits_of(pid)
        check(got == (str(128 << 20), "60", "150000", "100000"),
              f"after update: want ({128 << 20}, 60, 150000, 100000), got {got}")
    finally:
        d.rm(n)


@scenario("docker", "memory-oom")
def _(env):
    """A hog (`tail /dev/zero` buffers forever) is OOM-killed at --memory
    and Docker says so."""
    d, n = dk(env), "dk-oom"
    try:
        r = d.drun(["--name", n, "--memory", "32m", "--memory-swap", "32m"], ["tail", "/dev/zero"],
                   timeout=60)
        check(r.rc == 137, f"want exit 137 (SIGKILL): {r.brief()}")
        st = d.inspect(n, "{{.State.OOMKilled}} {{.State.ExitCode}}")
        check(st == "true 137", f"inspect: want 'true 137' (OOMKilled, exit code), got {st!r}")
    finally:
        d.rm(n)


@scenario("docker", "pids-limit")
def _(env):
    """A fork loop stops at --pids-limit: the loop's shell dies at its first
    failed fork; pid 1 then counts the processes with builtins only."""
    r = dk(env).drun(
        ["--rm", "--pids-limit", "16"],
        ["sh", "-c", "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max; "
                     "sh -c 'i=0; while [ $i -lt 100 ]; do i=$((i+1)); sleep 20 & done' 2>&1; "
                     "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n"], timeout=60)
    check(r.rc == 0, r.brief())
    lines = r.out.splitlines()
    check(lines and lines[0] == "16", f"pids.max inside: want 16: {r.out!r}")
    check("can't fork" in r.out, f"no fork was refused: {r.out!r}")
    procs = [int(line[6:]) for line in lines if line.startswith("procs=")]
    check(procs and 14 <= procs[0] <= 16, f"processes left after the loop: want 14-16: {r.out!r}")


def cpu_usage_ns(pid):
    if cgroup_v2_only():
        stat = dict(line.split() for line in host_cgroup_file(pid, "", "", "cpu.stat").splitlines())
        return int(stat["usage_usec"]) * 1000
    return int(host_cgroup_file(pid, "cpuacct", "cpuacct.usage", ""))


def nr_throttled(pid):
    stat = host_cgroup_file(pid, "cpu", "cpu.stat", "cpu.stat")
    return int(dict(line.split() for line in stat.splitlines())["nr_throttled"])


@scenario("docker", "cpus")
def _(env):
    """--cpus 0.5: the CFS quota is set, and a busy loop is throttled to
    about half a CPU."""
    d, n = dk(env), "dk-cpus"
    try:
        d.detach(n, ["--cpus", "0.5"], ["sh", "-c", "while :; do :; done"])
        pid = d.pid_of(n)
        got = limits_of(pid)[2:]
        check(got == ("50000", "100000"), f"cpu quota, period: want (50000, 100000), got {got}")
        wait_for(lambda: nr_throttled(pid) > 0, "the busy loop to be throttled", 10)
        u0, t0 = cpu_usage_ns(pid), time.monotonic()
        time.sleep(2)
        rate = (cpu_usage_ns(pid) - u0) / 1e9 / (time.monotonic() - t0)
        check(rate < 0.65, f"the busy loop used {rate:.2f} CPUs under --cpus 0.5")
    finally:
        d.rm(n)


@scenario("docker", "read-only")
def _(env):
    r = dk(env).drun(["--rm", "--read-only", "--tmpfs", "/scratch"],
                     ["sh", "-c", "touch /etc/x 2>&1; echo rc=$?; touch /scratch/y && echo tmpfs-writable"])
    check(r.rc == 0, r.brief())
    check("Read-only file system" in r.out and "rc=1" in r.out, f"/etc writable with --read-only: {r.out!r}")
    check("tmpfs-writable" in r.out, f"--tmpfs /scratch not writable: {r.out!r}")


def caps(out):
    return {k: int(v, 16) for k, v in (line.split("=", 1) for line in out.split() if "=" in line)
            if k.startswith("Cap")}


@scenario("docker", "cap-drop")
def _(env):
    d = dk(env)
    r = d.drun(["--rm"], ["sh", "-c", "/bin/probe caps && chown 1000 /tmp && echo chown-ok"])
    check(r.rc == 0 and "chown-ok" in r.out, f"default capabilities: chown failed: {r.brief()}")
    c = caps(r.out)
    check(c.get("CapEff") == DEFAULT_CAPS and c.get("CapBnd") == DEFAULT_CAPS,
          f"default capabilities: want {DEFAULT_CAPS:x}, got { {k: f'{v:x}' for k, v in c.items()} }")
    r = d.drun(["--rm", "--cap-drop", "CHOWN"],
               ["sh", "-c", "/bin/probe caps; chown 1000 /tmp 2>&1; echo rc=$?"])
    check(r.rc == 0, r.brief())
    c = caps(r.out)
    want = DEFAULT_CAPS & ~1
    check(c.get("CapEff") == want and c.get("CapBnd") == want,
          f"--cap-drop CHOWN: want {want:x}, got { {k: f'{v:x}' for k, v in c.items()} }")
    check("Operation not permitted" in r.out and "rc=1" in r.out,
          f"chown without CAP_CHOWN did not fail with EPERM: {r.out!r}")


@scenario("docker", "no-new-privileges")
def _(env):
    d = dk(env)
    r = d.drun(["--rm", "--security-opt", "no-new-privileges"], ["grep", "NoNewPrivs", "/proc/self/status"])
    check(r.rc == 0 and r.out.split() == ["NoNewPrivs:", "1"], f"with the option: {r.brief()}")
    r = d.drun(["--rm"], ["grep", "NoNewPrivs", "/proc/self/status"])
    check(r.rc == 0 and r.out.split() == ["NoNewPrivs:", "0"], f"without it: {r.brief()}")


@scenario("docker", "user")
def _(env):
    r = dk(env).drun(["--rm", "--user", "1000:1000"],
                     ["sh", "-c", "/bin/probe ids; touch /tmp/f; stat -c %u:%g /tmp/f"])
    check(r.rc == 0, r.brief())
    words = r.out.split()
    check("uid=1000" in words and "gid=1000" in words and "1000:1000" in words,
          f"--user 1000:1000: want uid, gid and a new file's owner 1000: {r.out!r}")


@scenario("docker", "port-publish")
def _(env):
    """-p 127.0.0.1:8080:80 to busybox httpd, fetched on loopback (in the
    daemon's network namespace, where docker-proxy listens)."""
    d, n = dk(env), "dk-web"
    fetch = ("import urllib.request\n"
             "page = urllib.request.urlopen('http://127.0.0.1:8080/', timeout=5).read()\n"
             "print(page.decode(), end='')")
    try:
        d.detach(n, ["-p", "127.0.0.1:8080:80"],
                 ["sh", "-c", "mkdir /www && echo hello-from-httpd > /www/index.html && "
                              "exec httpd -f -p 80 -h /www"])
        r = d.dk_ok("port", n)
        check(r.out.strip() == "80/tcp -> 127.0.0.1:8080", f"docker port: {r.out!r}")
        last = []

        def fetched():
            last[:] = [d.in_netns([sys.executable, "-c", fetch])]
            return last[0].rc == 0 and last[0]
        r = wait_for(fetched, lambda: f"the page from 127.0.0.1:8080 ({last[0].brief()})", 10)
        check(r.out == "hello-from-httpd\n", f"fetched {r.out!r}")
    finally:
        d.rm(n)


def footprint(d, name):
    """What a running container has on the host: process, cgroup dirs,
    the runtime's state dir, the shim's task dir, mounts."""
    cid = d.inspect(name, "{{.Id}}")
    pid = d.pid_of(name)
    cgroups = [f"/sys/fs/cgroup/{h}{d.env.cg_parent}/{cid}" for h in sorted(os.listdir("/sys/fs/cgroup"))]
    cgroups = [c for c in cgroups if os.path.isdir(c)]
    if cgroup_v2_only():
        cgroups = [f"/sys/fs/cgroup{d.env.cg_parent}/{cid}"]
    state = os.path.join(d.runtime_root(cid), cid)
    merged = d.inspect(name, "{{.GraphDriver.Data.MergedDir}}")
    sandbox = d.inspect(name, "{{.NetworkSettings.SandboxKey}}")
    fp = {"cid": cid, "pid": pid, "cgroups": cgroups, "dirs": [state, d.task_dir(cid)],
          "mounts": [m for m in (merged, sandbox) if m]}
    check(cgroups and all(os.path.isdir(p) for p in cgroups + fp["dirs"]),
          f"while running, missing some of {common.compact(str(fp))}")
    mounts = mount_points()
    check(all(m in mounts for m in fp["mounts"]), f"while running, not mounted: {fp['mounts']}")
    return fp


def mount_points():
    return [line.split()[4] for line in read("/proc/self/mountinfo").splitlines()]


def gone(fp):
    left = []
    if alive(fp["pid"]):
        left.append(f"process {fp['pid']}")
    left += [p for p in fp["cgroups"] + fp["dirs"] if os.path.exists(p)]
    left += [m for m in mount_points() if m in fp["mounts"] or fp["cid"] in m]
    return [common.compact(x) for x in left]


@scenario("docker", "rm-nothing-left")
def _(env):
    """`rm -f` of a running container, and a `run --rm` one stopped: no
    process, cgroup, runtime state, shim dir or mount of theirs is left."""
    d = dk(env)
    try:
        d.detach("dk-rm", [], ["sleep", "1000"])
        fp = footprint(d, "dk-rm")
        d.dk_ok("rm", "-f", "dk-rm")
        wait_for(lambda: not gone(fp), lambda: f"docker rm -f to leave nothing (left: {gone(fp)})", 10)
        d.detach("dk-rmrm", ["--rm"], ["sleep", "1000"])
        fp = footprint(d, "dk-rmrm")
        d.dk_ok("stop", "-t", "0", "dk-rmrm")
        wait_for(lambda: d.dk("inspect", "dk-rmrm").rc != 0, "run --rm to remove the container", 10)
        wait_for(lambda: not gone(fp), lambda: f"run --rm to leave nothing (left: {gone(fp)})", 10)
    finally:
        d.rm("dk-rm", "dk-rmrm")
