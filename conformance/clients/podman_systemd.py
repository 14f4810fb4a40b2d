"""The podman-systemd group of conformance/clients/run: podman (4.3) as root
with `cgroup_manager = "systemd"`, as on a systemd node. podman then calls
the runtime with `--systemd-cgroup` and the cgroupsPath `SLICE:libpod:ID`,
so the container is the transient unit `libpod-ID.scope` in the slice
(conmon gets `libpod-conmon-ID.scope`, made by podman itself). The slice is
the run's own, `tinyrun_clients_<pid>.slice` (`--cgroup-parent`), not
podman's default machine.slice: the leftover checks and the teardown then
see only this run's units, also on a host with containers of its own.
Limits are read back twice: as the scope's systemd properties and from its
cgroup files.

It needs systemd as PID 1 on a pure cgroup v2 host; this project's machines
have neither, so conformance/run-systemd-clients runs it in a guest booted
with systemd (conformance/vm/run --systemd), once with tinyrun and once
with runc. On other hosts `run` leaves the group out unless `--only
podman-systemd` asks for it (its scenarios then fail at set-up).

What it sets up, all under WORK/pm-sd and removed by teardown():
podman's own --root, --runroot, tmp dir and containers.conf, as the podman
group has them (run's Env.setup_podman) but with the systemd cgroup manager;
the busybox image, `podman import`ed; the slice, which systemd makes with
the first scope in it and teardown() stops.
"""
import copy
import os
import re

from common import Fail, Skip, check, cgroup_paths, cgroup_v2_only, read, run, scenario, wait_for

PACKAGES = ["podman", "conmon", "systemd"]


def systemd_host():
    """systemd is PID 1 (sd_booted's test) on a pure cgroup v2 hierarchy."""
    return os.path.isdir("/run/systemd/system") and cgroup_v2_only()


def unit_props(unit, *names):
    """{name: value} from `systemctl show` (a unit that is gone shows
    LoadState=not-found)."""
    r = run(["systemctl", "show", *(f"--property={n}" for n in names), unit])
    check(r.rc == 0, r.brief())
    return dict(line.split("=", 1) for line in r.out.splitlines() if "=" in line)


def usec(text):
    """A systemd timespan as `systemctl show` prints it ("500ms", "1.500000s",
    "1min 30s", "infinity") in microseconds (None for infinity)."""
    if text == "infinity":
        return None
    scale = {"us": 1, "ms": 1000, "s": 10**6, "min": 60 * 10**6, "h": 3600 * 10**6}
    total = 0.0
    parts = text.split()
    for part in parts:
        m = re.fullmatch(r"([0-9.]+)(us|ms|s|min|h)", part)
        if not m:
            raise Fail(f"not a systemd timespan: {text!r}")
        total += float(m.group(1)) * scale[m.group(2)]
    return round(total)


class SystemdPodman:
    def __init__(self, env):
        self.env = env
        # Short: podman refuses a runroot longer than 50 characters.
        self.dir = os.path.join(env.work, "pm-sd")
        self.pm = None      # a copy of run's Env with podman pointed at self.dir
        self.ok = False

    @property
    def slice(self):
        """The run's slice, named after the pid in its cgroupfs parent (which
        owner.json keeps, so a later run can reap an interrupted one's). No
        '-': systemd reads each as one more level of parent slices."""
        return f"tinyrun_clients_{self.env.cg_parent.rsplit('-', 1)[1]}.slice"

    def podman_env(self):
        pm = copy.copy(self.env)
        pm.set_podman_dir(self.dir, "systemd")
        pm.pm_slice = self.slice
        return pm

    def setup(self):
        if not systemd_host():
            raise RuntimeError("needs systemd as PID 1 on a pure cgroup v2 host "
                               "(conformance/run-systemd-clients boots a guest with it)")
        self.pm = self.podman_env()
        # (No `podman info` to check the manager: it takes 10 s under
        # emulation; the scenarios find the scopes or fail.)
        self.pm.setup_podman()
        self.ok = True

    # ---- what the scenarios use
    def start(self, name, opts=(), cmd=("sleep", "1000")):
        """`podman run -d`; (container id, init's host pid)."""
        r = self.pm.prun(["-d", "--name", name, *opts], list(cmd))
        check(r.rc == 0, r.brief())
        cid = self.pm.pm_inspect(name, "{{.Id}}")
        pid = int(self.pm.pm_inspect(name, "{{.State.Pid}}"))
        return cid, pid

    def rm(self, *names):
        if self.pm:
            self.pm.pm_rm(*names)

    def libpod_units(self):
        """{unit: slice} of the libpod units systemd knows, loaded or not
        (containers' and conmon's scopes), in any slice."""
        r = run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "libpod-*"])
        names = [line.split()[0] for line in r.out.splitlines() if line.strip()]
        if not names:
            return {}
        r = run(["systemctl", "show", "--property=Id", "--property=Slice", *names])
        out = {}
        for block in r.out.split("\n\n"):
            p = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            if "Id" in p:
                out[p["Id"]] = p.get("Slice", "")
        return out

    def units(self):
        """The libpod units in the run's slice."""
        return [u for u, sl in self.libpod_units().items() if sl == self.slice]

    def cgroup_dirs(self):
        base = f"/sys/fs/cgroup/{self.slice}"
        try:
            return [d for d in os.listdir(base) if d.startswith("libpod-")]
        except FileNotFoundError:
            return []

    def gone(self, cid):
        """What is still there of container cid: its scope, conmon's, their
        cgroups (empty when nothing is)."""
        names = (f"libpod-{cid}.scope", f"libpod-conmon-{cid}.scope")
        return ([u for u in self.libpod_units() if u in names] +
                [f"/sys/fs/cgroup/{self.slice}/{d}" for d in self.cgroup_dirs() if d in names])

    # ---- for run's cleanup scenario and teardown
    def rm_all(self):
        if self.ok:
            self.pm.podman("rm", "-af", "-t", "0", timeout=120)

    def leftovers(self):
        if not self.ok:
            return []
        return ([f"unit {u}" for u in self.units()] +
                [f"/sys/fs/cgroup/{self.slice}/{d}" for d in self.cgroup_dirs()])

    def teardown(self, notes):
        """Also for a work dir an interrupted run left: whatever podman
        made there, if its config is still there."""
        if not os.path.exists(os.path.join(self.dir, "containers.conf")):
            return
        pm = self.pm or self.podman_env()
        pm.pm_env = pm.podman_env()
        pm.podman("rm", "-af", "-t", "0", timeout=120)
        r = pm.podman("system", "reset", "-f", timeout=120)
        if r.rc != 0:
            notes.append(f"podman-systemd: podman system reset: {r.brief()}")
        # Whatever podman lost track of: stopping the run's slice stops every
        # unit in it (systemd kills what is in them and removes the cgroups).
        if systemd_host():
            left = self.units()
            r = run(["systemctl", "stop", self.slice], timeout=60)
            if r.rc not in (0, 5):   # 5: not loaded, nothing was made in it
                notes.append(f"podman-systemd: {r.brief()}")
            for u in left:
                run(["systemctl", "reset-failed", u], timeout=30)


def sd(env):
    s = env.sd_podman
    if not s.ok:
        raise Skip("podman with the systemd cgroup manager was not set up")
    return s


# --------------------------------------------------------------------------
# scenarios


@scenario("podman-systemd", "run-rm")
def _(env):
    """`run --rm`: init runs in the container's scope, below the cgroup
    namespace's root, and the scope is gone once podman returns."""
    s = sd(env)
    cidfile = os.path.join(s.dir, "run-rm.cid")
    r = s.pm.prun(["--rm", "--cidfile", cidfile], ["cat", "/proc/self/cgroup"])
    check(r.rc == 0 and r.out == "0::/\n", f"want '0::/' (a private cgroup namespace): {r.brief()}")
    cid = read(cidfile).strip()
    wait_for(lambda: not s.gone(cid), lambda: f"scope and cgroup of {cid[:12]} to go: {s.gone(cid)}", 15)


@scenario("podman-systemd", "limits-update")
def _(env):
    """--memory/--cpus/--pids-limit: the scope libpod-ID.scope in the
    run's slice holds init, with Delegate=yes and the limits as its
    properties (MemoryMax, CPUQuotaPerSecUSec, TasksMax), and in its cgroup
    files, read from the host and from inside. Then `podman update --memory
    --cpus --cpu-shares` (`RUNTIME --systemd-cgroup update --resources FILE
    ID`) changes both. Shares 512 are CPUWeight 59 by the conversion runc
    (1.3.2 and later), crun (1.23 and later) and the cgroup v2 files use;
    runc before 1.3.2 converted linearly, to 20, so runc may give either."""
    s = sd(env)
    n = "sd-limits"
    try:
        cid, pid = s.start(n, ["--memory", "64m", "--cpus", "0.5", "--pids-limit", "42"])
        unit = f"libpod-{cid}.scope"
        path = f"/{s.slice}/{unit}"
        check(cgroup_paths(pid).get("") == path,
              f"init's cgroup: want {path}, got {cgroup_paths(pid).get('')}")
        p = unit_props(unit, "ActiveState", "Slice", "Delegate", "MemoryMax", "TasksMax",
                       "CPUQuotaPerSecUSec")
        p["CPUQuotaPerSecUSec"] = usec(p.get("CPUQuotaPerSecUSec", "?"))
        files = ("memory.max", "pids.max", "cpu.max")
        for f in files:
            p[f] = read(f"/sys/fs/cgroup{path}/{f}").strip()
        r = s.pm.podman("exec", n, "cat", *(f"/sys/fs/cgroup/{f}" for f in files))
        inside = r.out.strip().splitlines() if r.rc == 0 else [f"<{r.brief()}>"]
        p["inside"] = dict(zip(files, inside))
        want = {"ActiveState": "active", "Slice": s.slice, "Delegate": "yes", "MemoryMax": str(64 << 20),
                "TasksMax": "42", "CPUQuotaPerSecUSec": 500_000,
                "memory.max": str(64 << 20), "pids.max": "42", "cpu.max": "50000 100000"}
        want["inside"] = {f: want[f] for f in files}
        bad = {k: f"want {want[k]}, got {p.get(k)}" for k in want if p.get(k) != want[k]}
        check(not bad, f"at run: {bad}")

        r = s.pm.podman("update", "--memory", "128m", "--cpus", "1.5", "--cpu-shares", "512", n)
        check(r.rc == 0, f"update: {r.brief()}")
        p = unit_props(unit, "MemoryMax", "CPUQuotaPerSecUSec", "CPUWeight", "TasksMax")
        p["CPUQuotaPerSecUSec"] = usec(p.get("CPUQuotaPerSecUSec", "?"))
        for f in ("memory.max", "cpu.max", "cpu.weight", "pids.max"):
            p[f] = read(f"/sys/fs/cgroup{path}/{f}").strip()
        weights = ("20", "59") if os.path.basename(env.runtime) == "runc" else ("59",)
        weight = p.get("CPUWeight") if p.get("CPUWeight") in weights else weights[-1]
        want = {"MemoryMax": str(128 << 20), "CPUQuotaPerSecUSec": 1_500_000, "CPUWeight": weight,
                "TasksMax": "42", "memory.max": str(128 << 20), "cpu.max": "150000 100000",
                "cpu.weight": weight, "pids.max": "42"}
        bad = {k: f"want {want[k]}, got {p.get(k)}" for k in want if p.get(k) != want[k]}
        check(not bad, f"after update: {bad}")
    finally:
        s.rm(n)


@scenario("podman-systemd", "exec-stop-rm")
def _(env):
    """`podman exec`: output and exit status, and the process joins the
    container's scope (it is in the cgroup namespace's root, and in the
    scope's cgroup.procs with init); the container's and conmon's scopes
    are both in the run's slice. Then `stop` (sleep as pid 1 ignores
    TERM: KILL, 137) leaves the scope stopped, and after `rm` neither it nor
    conmon's scope is left, as a unit or as a cgroup."""
    s = sd(env)
    n = "sd-exec"
    try:
        cid, _ = s.start(n)
        units = s.libpod_units()
        for u in (f"libpod-{cid}.scope", f"libpod-conmon-{cid}.scope"):
            check(units.get(u) == s.slice, f"no unit {u} in {s.slice}: {units}")
        r = s.pm.podman("exec", n, "sh", "-c",
                        "echo $$; cat /proc/self/cgroup; cat /sys/fs/cgroup/cgroup.procs; exit 3")
        check(r.rc == 3, f"exec exit status: want 3: {r.brief()}")
        lines = r.out.split()
        check(len(lines) >= 3 and lines[1] == "0::/" and lines[0] in lines[2:] and "1" in lines[2:],
              f"exec's cgroup: want '0::/', and its pid and init's in the scope's cgroup.procs: {r.out!r}")

        r = s.pm.podman("stop", "-t", "1", n, timeout=60)
        check(r.rc == 0, f"stop: {r.brief()}")
        st = s.pm.pm_inspect(n, "{{.State.Status}} {{.State.ExitCode}}")
        check(st == "exited 137", f"after stop: want 'exited 137', got {st!r}")
        wait_for(lambda: unit_props(f"libpod-{cid}.scope", "ActiveState")["ActiveState"] != "active",
                 "the container's scope to stop", 15)
        r = s.pm.podman("rm", n)
        check(r.rc == 0, f"rm: {r.brief()}")
        wait_for(lambda: not s.gone(cid), lambda: f"scopes and cgroups of {cid[:12]} to go: {s.gone(cid)}", 15)
    finally:
        s.rm(n)
