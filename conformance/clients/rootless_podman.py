"""The rootless-podman group of conformance/clients/run: an unprivileged
user runs Debian 12's podman (4.3) with the runtime, as developers do on
their own machines.

What it sets up, all private and removed by teardown():
  - a throw-away user (`useradd`, which also gives it ranges in /etc/subuid
    and /etc/subgid); `userdel` at the end, after every process of its ids
    is gone;
  - WORK/rootless, owned by that user (WORK itself becomes 0711 so it can
    reach it): its HOME, podman's storage (the vfs driver:
    no fuse, no kernel overlay in a user namespace needed), tmp dir, a
    containers.conf and a copy of the runtime (0755: root's build tree may
    not be readable by the user);
  - containers.conf: the runtime named `tinyrun` in [engine.runtimes] and in
    runtime_supports_json, cgroup_manager=cgroupfs (the user's cgroups are
    not delegated here: podman then runs containers without cgroup limits),
    file locks (this host's /dev/shm is 0755, so podman's shm lock file
    can't be made), netns=none except where a scenario asks for
    slirp4netns, low default_ulimits (no CAP_SYS_RESOURCE in the bounding
    set);
  - every podman call runs as the user through `setpriv`, with a clean
    environment, in a mount namespace of its own where /dev/net/tun is
    bound to a 0666 node (this host's is 0600 and slirp4netns opens it as
    the user); nothing changes on the host;
  - XDG_RUNTIME_DIR in /tmp/<user>-run: podman's cleanup command refuses a
    runroot longer than 50 characters;
  - the busybox image, `podman import`ed from WORK/rootfs.tar.
"""
import json
import os
import pwd
import shutil
import subprocess
import time
import urllib.request

from common import IMAGE, RUN_OPTS, Fail, alive, check, kill_pids, read, run, scenario, sh_quote, write

PACKAGES = ["podman", "conmon", "uidmap", "slirp4netns", "util-linux"]
NAME_PREFIX = "trpm"


def subid(path, name):
    for line in read(path).splitlines():
        f = line.split(":")
        if len(f) == 3 and f[0] == name:
            return int(f[1]), int(f[2])
    return 0, 0


class RootlessPodman:
    def __init__(self, env):
        self.env = env
        self.dir = os.path.join(env.work, "rootless")
        self.name = f"{NAME_PREFIX}{os.getpid()}"
        # Short: podman's cleanup command refuses a runroot
        # ($XDG_RUNTIME_DIR/containers) longer than 50 characters, and every
        # foreground run would then wait out a 20 s timeout.
        self.xdg = f"/tmp/{self.name}-run"
        self.uid = self.gid = None
        self.subuid = self.subgid = (0, 0)
        self.ok = False
        self.made_user = False

    @classmethod
    def stale(cls, name):
        """A handle on a user an interrupted run left, for teardown()."""
        self = cls.__new__(cls)
        pw = pwd.getpwnam(name)
        self.env, self.dir, self.name, self.ok, self.made_user = None, "", name, False, True
        self.xdg = f"/tmp/{name}-run"
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.subuid, self.subgid = subid("/etc/subuid", name), subid("/etc/subgid", name)
        return self

    # ---- set-up
    def setup(self):
        r = None
        for _ in range(30):
            r = run(["useradd", "--no-create-home", "--shell", "/bin/false", "--user-group", self.name])
            if r.rc == 0:
                break
            time.sleep(0.2)
        if r.rc != 0:
            raise RuntimeError(f"useradd: {r.brief()}")
        self.made_user = True
        pw = pwd.getpwnam(self.name)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.subuid = subid("/etc/subuid", self.name)
        self.subgid = subid("/etc/subgid", self.name)
        if self.subuid[1] < 65536 or self.subgid[1] < 65536:
            raise RuntimeError(f"useradd gave {self.name} no subordinate ids")
        os.chmod(self.env.work, 0o711)
        for sub in ("", "home", "tmp", "storage", "run", "bin", "vol", "tun"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
            os.chown(os.path.join(self.dir, sub), self.uid, self.gid)
        os.chmod(self.dir, 0o755)
        os.makedirs(self.xdg, mode=0o700, exist_ok=True)
        os.chown(self.xdg, self.uid, self.gid)
        self.runtime = os.path.join(self.dir, "bin", "tinyrun")
        shutil.copy(self.env.runtime, self.runtime)
        os.chmod(self.runtime, 0o755)
        d = self.dir
        write(os.path.join(d, "containers.conf"), f"""# written by conformance/clients/run (rootless-podman)
[containers]
netns = "none"
log_driver = "k8s-file"
# CAP_SYS_RESOURCE is not in this host's bounding set: rlimits cannot be
# raised above the caller's hard limits, and podman's defaults are higher.
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{d}/tmp/events.log"
# /dev/shm is not world-writable on this host: no shm lock file for users.
lock_type = "file"
tmp_dir = "{d}/tmp"
runtime = "tinyrun"
runtime_supports_json = ["crun", "runc", "kata", "runsc", "youki", "krun", "tinyrun"]

[engine.runtimes]
tinyrun = ["{self.runtime}"]
""")
        write(os.path.join(d, "storage.conf"), f"""[storage]
driver = "vfs"
graphroot = "{d}/storage"
runroot = "{d}/run"
""")
        write(os.path.join(d, "registries.conf"), "unqualified-search-registries = []\n")
        tar = os.path.join(self.env.work, "rootfs.tar")
        os.chmod(tar, 0o644)
        r = self.podman("import", tar, IMAGE, timeout=180)
        if r.rc != 0:
            raise RuntimeError(f"podman import as {self.name} failed: {r.brief()}")
        self.ok = True

    def argv(self, *args):
        """podman as the user, in a mount namespace of its own where
        /dev/net/tun is usable by the user (see the module doc)."""
        d = self.dir
        tun = os.path.join(d, "tun")
        env = [f"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", f"HOME={d}/home", f"USER={self.name}",
               f"LOGNAME={self.name}", f"XDG_RUNTIME_DIR={self.xdg}", f"TMPDIR={d}/tmp",
               f"CONTAINERS_CONF={d}/containers.conf", f"CONTAINERS_STORAGE_CONF={d}/storage.conf",
               f"CONTAINERS_REGISTRIES_CONF={d}/registries.conf"]
        inner = " ".join(sh_quote(a) for a in [
            "setpriv", "--reuid", str(self.uid), "--regid", str(self.gid), "--clear-groups",
            "env", "-i", *env, "podman", "--runtime", "tinyrun", *args])
        script = (f"mount -t tmpfs -o mode=755,size=16k tmpfs {sh_quote(tun)} && "
                  f"mknod -m 666 {sh_quote(tun)}/tun c 10 200 && "
                  f"mount --bind {sh_quote(tun)}/tun /dev/net/tun && exec {inner}")
        return ["unshare", "-m", "--propagation", "private", "sh", "-c", script]

    def podman(self, *args, **kw):
        return run(self.argv(*args), **kw)

    def ok_(self, *args, **kw):
        r = self.podman(*args, **kw)
        check(r.rc == 0, r.brief())
        return r

    def prun(self, opts, cmd, **kw):
        return self.podman("run", "--pull=never", *RUN_OPTS, *opts, IMAGE, *cmd, **kw)

    def rm(self, name):
        self.podman("rm", "-f", "-t", "0", name, timeout=60)

    def inspect(self, name, fmt):
        return self.ok_("inspect", "--format", fmt, name).out.strip()

    # ---- what is left, and teardown
    def processes(self):
        """Live processes whose real uid is the user's or in its subordinate range."""
        out = []
        lo, n = self.subuid
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                st = read(f"/proc/{p}/status")
            except OSError:
                continue
            uid = next((int(l.split()[1]) for l in st.splitlines() if l.startswith("Uid:")), -1)
            if (uid == self.uid or lo <= uid < lo + n) and alive(int(p)):
                out.append(int(p))
        return out

    def leftovers(self):
        if not self.ok:
            return []
        found = []
        r = self.podman("ps", "-aq")
        if r.out.strip():
            found.append(f"rootless containers: {r.out.split()}")
        state = os.path.join(self.xdg, "tinyrun")
        if os.path.isdir(state) and os.listdir(state):
            found.append(f"state dirs in {state}: {os.listdir(state)}")
        return found

    def rm_all(self):
        if self.ok:
            self.podman("rm", "-af", "-t", "0", timeout=120)

    def teardown(self, notes):
        if self.ok:
            self.podman("rm", "-af", "-t", "0", timeout=120)
            r = self.podman("system", "reset", "-f", timeout=120)
            if r.rc != 0:
                notes.append(f"rootless podman system reset: {r.brief()}")
        if self.uid is not None:
            # The pause process, conmons, slirp4netns, containers: all the user's.
            for _ in range(50):
                ps = self.processes()
                if not ps:
                    break
                kill_pids(ps)
                time.sleep(0.1)
            else:
                notes.append(f"processes of {self.name} left: {self.processes()}")
        if os.path.isdir(self.dir):
            subprocess.run(["umount", "-l", os.path.join(self.dir, "tun")], stderr=subprocess.DEVNULL)
            shutil.rmtree(self.dir, ignore_errors=True)
        if os.path.isdir(self.xdg):
            shutil.rmtree(self.xdg, ignore_errors=True)
        if self.made_user:
            for _ in range(30):
                if run(["userdel", self.name]).rc == 0:
                    break
                time.sleep(0.2)
            else:
                notes.append(f"userdel {self.name} failed")


def stale_users():
    """Users earlier runs made and could not remove (their run is gone)."""
    out = []
    for pw in pwd.getpwall():
        if pw.pw_name.startswith(NAME_PREFIX) and pw.pw_name[len(NAME_PREFIX):].isdigit():
            pid = int(pw.pw_name[len(NAME_PREFIX):])
            try:
                if "clients/run" in read(f"/proc/{pid}/cmdline"):
                    continue
            except OSError:
                pass
            out.append(pw.pw_name)
    return out


# --------------------------------------------------------------------------
# scenarios


def G(env):
    return env.rootless


@scenario("rootless-podman", "run")
def _(env):
    """The container's root is the user; its ids are the user's and its
    subordinate range (newuidmap, newgidmap)."""
    p = G(env)
    r = p.prun(["--rm"], ["sh", "-c", "id -u; cat /proc/self/uid_map /proc/self/gid_map; exit 3"])
    check(r.rc == 3, f"want exit 3: {r.brief()}")
    lines = [l.split() for l in r.out.splitlines()]
    check(lines[0] == ["0"], f"id -u: {r.brief()}")
    want_u = [["0", str(p.uid), "1"], ["1", str(p.subuid[0]), str(p.subuid[1])]]
    want_g = [["0", str(p.gid), "1"], ["1", str(p.subgid[0]), str(p.subgid[1])]]
    check(lines[1:3] == want_u and lines[3:5] == want_g, f"maps: want {want_u} {want_g}: {r.brief()}")


@scenario("rootless-podman", "exec-ps-stop-rm")
def _(env):
    p = G(env)
    n = "rl-detach"
    try:
        r = p.prun(["-d", "--name", n], ["sleep", "1000"])
        check(r.rc == 0, r.brief())
        check(p.inspect(n, "{{.State.Status}}") == "running", "not running after run -d")
        r = p.podman("exec", n, "sh", "-c", "echo hi from exec; id -u")
        check(r.rc == 0 and r.out == "hi from exec\n0\n", f"exec: {r.brief()}")
        r = p.podman("exec", n, "sh", "-c", "exit 3")
        check(r.rc == 3, f"exec exit status: want 3: {r.brief()}")
        r = p.podman("exec", "--user", "1000:1000", n, "id", "-u")
        check(r.rc == 0 and r.out == "1000\n", f"exec --user: {r.brief()}")
        r = p.podman("ps", "--format", "{{.Names}} {{.Status}}")
        check(r.rc == 0 and any(l.startswith(f"{n} Up") for l in r.out.splitlines()), f"ps: {r.brief()}")
        r = p.podman("top", n, "args")
        check(r.rc == 0 and "sleep 1000" in r.out, f"top: {r.brief()}")
        r = p.podman("stop", "-t", "1", n, timeout=60)
        check(r.rc == 0, f"stop: {r.brief()}")
        st = p.inspect(n, "{{.State.Status}} {{.State.ExitCode}}")
        check(st == "exited 137", f"after stop: want 'exited 137', got {st!r}")
        r = p.podman("rm", n)
        check(r.rc == 0, f"rm: {r.brief()}")
        check(p.podman("container", "exists", n).rc == 1, "container still exists after rm")
    finally:
        p.rm(n)


@scenario("rootless-podman", "userns-keep-id")
def _(env):
    """--userns=keep-id: the user keeps its own uid inside."""
    p = G(env)
    vol = os.path.join(p.dir, "vol")
    r = p.prun(["--rm", "--userns=keep-id", "-v", f"{vol}:/data"],
               ["sh", "-c", "id -u; id -g; touch /data/keep-id"])
    check(r.rc == 0, r.brief())
    check(r.out.splitlines()[:2] == [str(p.uid), str(p.gid)], f"want uid/gid {p.uid}/{p.gid}: {r.brief()}")
    st = os.stat(os.path.join(vol, "keep-id"))
    check((st.st_uid, st.st_gid) == (p.uid, p.gid), f"a file it makes is {st.st_uid}:{st.st_gid} on the host")


@scenario("rootless-podman", "port-publish")
def _(env):
    """-p 127.0.0.1:PORT:8080 with slirp4netns: the host's loopback reaches
    busybox httpd in the container."""
    p = G(env)
    n = "rl-port"
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    try:
        r = p.prun(["-d", "--name", n, "--network", "slirp4netns", "-p", f"127.0.0.1:{port}:8080"],
                   ["sh", "-c", "echo hello-rootless > /tmp/index.html; exec httpd -f -p 8080 -h /tmp"],
                   timeout=90)
        check(r.rc == 0, r.brief())
        body, err = None, None
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=3).read()
                break
            except OSError as e:
                err = e
                time.sleep(0.3)
        check(body == b"hello-rootless\n", f"GET 127.0.0.1:{port}: {body!r} {err}")
    finally:
        p.rm(n)


@scenario("rootless-podman", "read-only")
def _(env):
    p = G(env)
    r = p.prun(["--rm", "--read-only"],
               ["sh", "-c", "touch /x 2>&1; echo rc=$?; touch /tmp/y && echo tmp-ok"])
    check(r.rc == 0 and "Read-only file system" in r.out and "rc=1" in r.out and "tmp-ok" in r.out,
          f"want / read-only and /tmp writable: {r.brief()}")


@scenario("rootless-podman", "file-owners")
def _(env):
    """Files a container makes land on the host with the mapped ids: its
    root as the user, its uid 1000 as subuid start + 999."""
    p = G(env)
    vol = os.path.join(p.dir, "vol")
    r = p.prun(["--rm", "-v", f"{vol}:/data"],
               ["sh", "-c", "touch /data/by-root && touch /data/by-1000 && chown 1000:1000 /data/by-1000"])
    check(r.rc == 0, r.brief())
    a = os.stat(os.path.join(vol, "by-root"))
    b = os.stat(os.path.join(vol, "by-1000"))
    check((a.st_uid, a.st_gid) == (p.uid, p.gid), f"by-root: {a.st_uid}:{a.st_gid}, want {p.uid}:{p.gid}")
    want = (p.subuid[0] + 999, p.subgid[0] + 999)
    check((b.st_uid, b.st_gid) == want, f"by-1000: {b.st_uid}:{b.st_gid}, want {want[0]}:{want[1]}")
