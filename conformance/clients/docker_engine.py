"""The docker group of conformance/clients/run: Debian 12's Docker 20.10
(docker.io) drives the runtime through containerd's runc shim, named
`tinyrun` in dockerd's `runtimes` and made the default runtime.

What it sets up, all private and removed by teardown():
  - a network namespace of its own, held by the processes in it (nothing
    in /run/netns): containerd, dockerd, the shims and docker-proxy run
    there, so docker0, the veths and published ports never touch the
    host's network, and no iptables rule is made (`iptables`, `ip-forward`
    and `ip-masq` are off; ports are published by the userland proxy);
  - a containerd on its own socket, root and state (the one dockerd would
    start itself enables the /opt installer plugin, which makes
    /opt/containerd);
  - dockerd with --config-file WORK/docker/daemon.json: data-root,
    exec-root, pidfile, socket and trust key under WORK/docker, the
    cgroupfs driver with cgroup-parent /tinyrun-test/clients-<pid>, low
    default ulimits (no CAP_SYS_RESOURCE in this host's bounding set);
  - the busybox image as a `docker save` archive built by hand, `docker
    load`ed;
  - the client: /usr/bin/docker (Debian's; a newer one may come first in
    PATH) with DOCKER_CONFIG under WORK.

The scenarios are in docker_scenarios.py.
"""
import json
import os
import re

import common
from common import (IMAGE, RUN_OPTS, alive, check, containerd_config, kill_pids, own_processes, read,
                    run, start_daemon, stop_processes, wait_for, write)

DOCKER = "/usr/bin/docker"
DOCKERD = "/usr/sbin/dockerd"
PACKAGES = ["docker.io", "iproute2", "util-linux"]
# dockerd makes /run/docker/plugins whatever its exec-root (plugin
# discovery). Removed at the end only if this run created them.
HOST_PATHS = ["/run/docker/plugins", "/run/docker"]
NS = "moby"    # dockerd's containerd namespace
# Expected with ip-forward off; it would hide the real stderr in reports.
FORWARD_WARNING = re.compile(r"^WARNING: IPv4 forwarding is disabled\. Networking will not work\.\n?", re.M)
# Docker 20.10's default capabilities: CHOWN DAC_OVERRIDE FOWNER FSETID
# KILL SETGID SETUID SETPCAP NET_BIND_SERVICE NET_RAW SYS_CHROOT MKNOD
# AUDIT_WRITE SETFCAP.
DEFAULT_CAPS = 0xa80425fb


class Docker:
    def __init__(self, env):
        self.env = env
        self.dir = os.path.join(env.work, "docker")
        self.sock = os.path.join(self.dir, "docker.sock")
        self.ctrd_dir = os.path.join(self.dir, "ctrd")
        self.ctrd_sock = os.path.join(self.ctrd_dir, "containerd.sock")
        self.conf = os.path.join(self.dir, "daemon.json")
        self.daemon = None    # Popen of dockerd
        self.ctrd = None      # Popen of its containerd
        self.netns = None     # /proc/PID/ns/net of a process in our network namespace
        self.ok = False
        self.cli_env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
        self.cli_env["DOCKER_CONFIG"] = os.path.join(self.dir, "cli")

    # ---- setup
    def setup(self):
        os.makedirs(os.path.join(self.dir, "cli"), exist_ok=True)
        # A new network namespace with loopback up, for containerd and
        # everything started from it or joined to it.
        conf = containerd_config(self.ctrd_dir, self.ctrd_sock)
        self.ctrd = start_daemon(
            ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
             "containerd", "--config", conf],
            os.path.join(self.ctrd_dir, "containerd.log"), "docker's containerd",
            lambda: os.path.exists(self.ctrd_sock))
        self.netns = f"/proc/{self.ctrd.pid}/ns/net"
        self.write_daemon_json()
        self.daemon = start_daemon(
            ["nsenter", f"--net={self.netns}", DOCKERD, "--config-file", self.conf],
            os.path.join(self.dir, "dockerd.log"), "dockerd",
            lambda: os.path.exists(self.sock) and self.dk("version", timeout=10).rc == 0)
        r = self.dk("load", "-i", os.path.join(self.env.work, "busybox-docker.tar"), timeout=120)
        if r.rc != 0:
            raise RuntimeError(f"docker load failed: {r.brief()}")
        r = self.dk("image", "inspect", "-f", "{{.Id}}", IMAGE)
        if r.rc != 0:
            raise RuntimeError(f"docker load did not create {IMAGE}: {r.brief()}")
        self.ok = True

    def write_daemon_json(self):
        d = self.dir
        conf = {
            "data-root": f"{d}/data",
            "exec-root": f"{d}/exec",
            "pidfile": f"{d}/docker.pid",
            "hosts": [f"unix://{self.sock}"],
            "containerd": self.ctrd_sock,
            "deprecated-key-path": f"{d}/key.json",    # else /etc/docker/key.json
            "runtimes": {"tinyrun": {"path": self.env.wrapper}},
            "default-runtime": "tinyrun",
            "exec-opts": ["native.cgroupdriver=cgroupfs"],
            "cgroup-parent": self.env.cg_parent,
            # CAP_SYS_RESOURCE is not in this host's bounding set: rlimits
            # above the caller's hard limits cannot be set.
            "default-ulimits": {"nofile": {"Name": "nofile", "Soft": 1024, "Hard": 1024},
                                "nproc": {"Name": "nproc", "Soft": 4096, "Hard": 4096}},
            "iptables": False, "ip-forward": False, "ip-masq": False,
            "storage-driver": "overlay2",
            "log-driver": "json-file",
            "shutdown-timeout": 5,
        }
        write(self.conf, json.dumps(conf, indent=2) + "\n")

    # ---- the client
    def argv(self, *args):
        return [DOCKER, "--host", f"unix://{self.sock}", *args]

    def dk(self, *args, **kw):
        r = run(self.argv(*args), env=self.cli_env, **kw)
        r.err = FORWARD_WARNING.sub("", r.err)
        return r

    def dk_ok(self, *args, **kw):
        r = self.dk(*args, **kw)
        check(r.rc == 0, r.brief())
        return r

    def run_opts(self, opts):
        return ["run", "--pull=never", "--runtime", "tinyrun", *RUN_OPTS, *opts, IMAGE]

    def drun(self, opts, cmd, **kw):
        """docker run --runtime tinyrun with the harness's options, then IMAGE and cmd."""
        return self.dk(*self.run_opts(opts), *cmd, **kw)

    def detach(self, name, opts, cmd):
        r = self.drun(["-d", "--name", name, *opts], cmd)
        check(r.rc == 0, r.brief())
        return r.out.strip()

    def inspect(self, name, fmt):
        return self.dk_ok("inspect", "-f", fmt, name).out.strip()

    def pid_of(self, name):
        pid = int(self.inspect(name, "{{.State.Pid}}"))
        check(pid > 0, f"{name} has no process")
        return pid

    def rm(self, *names):
        self.dk("rm", "-f", *names)

    def rm_all(self):
        ids = self.dk("ps", "-aq").out.split()
        if ids:
            self.dk("rm", "-f", *ids, timeout=120)

    def logs(self, name):
        return self.dk("logs", name)

    # ---- where things live
    def task_dir(self, cid):
        return os.path.join(self.ctrd_dir, "state", "io.containerd.runtime.v2.task", NS, cid)

    def runtime_root(self, cid):
        """The --root the shim gives the runtime for this container (Docker
        20.10 passes <exec-root>/runtime-runc for every runtime)."""
        opts = json.loads(read(os.path.join(self.task_dir(cid), "options.json")))
        return os.path.join(opts["root"], NS)

    def in_netns(self, argv, **kw):
        return run(["nsenter", f"--net={self.netns}", *argv], **kw)

    def leftovers(self):
        found = []
        for d in (os.path.join(self.dir, "exec", "runtime-runc", NS),
                  os.path.join(self.dir, "exec", "runtime-tinyrun", NS),
                  os.path.dirname(self.task_dir("x"))):
            if os.path.isdir(d) and os.listdir(d):
                found.append(f"state dirs in {common.compact(d)}: {os.listdir(d)}")
        return found

    # ---- teardown
    def daemons(self, *kinds):
        """Our dockerd and/or its containerd, found by their command lines
        (which name our dir), so that an interrupted run's are found too."""
        want = {"dockerd": (DOCKERD, self.conf),
                "containerd": ("containerd", os.path.join(self.ctrd_dir, "config.toml"))}
        out = []
        for p in own_processes(self.env.work):
            try:
                argv = read(f"/proc/{p}/cmdline").split("\0")
            except OSError:
                continue
            if any(argv[0] == want[k][0] and want[k][1] in argv for k in kinds):
                out.append(p)
        return out

    def netns_inode(self):
        for p in self.daemons("dockerd", "containerd"):
            try:
                return os.stat(f"/proc/{p}/ns/net").st_ino
            except OSError:
                pass
        return None

    def teardown(self, notes):
        """Remove the containers through dockerd, stop dockerd and its
        containerd, then kill whatever is left in our network namespace
        (docker-proxy, shims), which takes the namespace with it."""
        ino = self.netns_inode()
        if os.path.exists(self.sock) and self.dk("version", timeout=10).rc == 0:
            self.rm_all()
        stop_processes(self.daemons("dockerd"), 20, [self.daemon] if self.daemon else [])
        stop_processes(self.daemons("containerd"), 10, [self.ctrd] if self.ctrd else [])
        if ino is None or ino == os.stat("/proc/self/ns/net").st_ino:
            return
        stray = in_netns(ino)
        if stray:
            notes.append(f"killed {len(stray)} processes left in docker's network namespace: {stray}")
            kill_pids(stray)
            try:
                wait_for(lambda: not any(alive(p) for p in stray), "them to die", 5)
            except common.Fail as e:
                notes.append(str(e))


def in_netns(ino):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}/ns/net").st_ino == ino:
                    out.append(int(p))
            except OSError:
                pass
    return out
