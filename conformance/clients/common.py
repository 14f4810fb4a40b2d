"""Helpers shared by the groups of conformance/clients/run: running
commands, reading cgroups, building images, the scenario registry and the
process bookkeeping of the teardown. Plain functions; the state they share
is the three globals below, which `run` sets from its options."""
import gzip
import hashlib
import io
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import tarfile
import tempfile
import time

IMAGE = "localhost/tinyrun-busybox:latest"

DEFAULT_TIMEOUT = 60

VERBOSE = False
RUN_OPTS = []  # --run-opt
WORK = None   # the work dir, shown as $W in reports


def compact(text):
    """Reports stay readable: the work dir as $W, container ids cut to 12."""
    if WORK:
        text = text.replace(WORK, "$W")
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{52}\b", r"\1", text)


class Fail(Exception):
    pass


class Skip(Exception):
    pass


class Result:
    def __init__(self, argv, rc, out, err):
        self.argv, self.rc, self.out, self.err = argv, rc, out, err

    def brief(self):
        text = (self.err.strip() or self.out.strip()).replace("\n", " | ")
        if len(text) > 400:
            text = text[:400] + "..."
        rc = "timeout" if self.rc is None else f"exit {self.rc}"
        return compact(f"`{short(self.argv)}`: {rc}: {text}")


PODMAN_CTR_FLAGS = ("--root", "--runroot", "--address", "--runc-root", "--fifo-dir", "--tmpdir",
                    "--cgroup-manager", "--events-backend", "--runtime", "--runc-binary")
PRIVATE_FLAGS = {"podman": PODMAN_CTR_FLAGS, "ctr": PODMAN_CTR_FLAGS, "docker": ("--host",)}


def short(argv):
    """The command line as shown in reports: the long private flags left out."""
    if argv[0] == "script":
        return f"script -qec {sh_quote(short(shlex.split(argv[2])))} /dev/null"
    private = PRIVATE_FLAGS.get(os.path.basename(argv[0]), ())
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in private:
            skip = True
            continue
        out.append(a)
    return " ".join(out)


def run(argv, input=None, timeout=DEFAULT_TIMEOUT, env=None):
    """Run argv in its own process group with stdout/stderr in files (a
    detached container may keep inherited pipes open). On timeout the group
    (ours) is SIGKILLed and rc is None."""
    if VERBOSE:
        print(f"  + {short(argv)}", flush=True)
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        stdin = subprocess.DEVNULL
        fin = None
        if input is not None:
            fin = tempfile.TemporaryFile()
            fin.write(input.encode())
            fin.seek(0)
            stdin = fin
        try:
            p = subprocess.Popen(argv, stdin=stdin, stdout=fo, stderr=fe, env=env,
                                 start_new_session=True)
        except OSError as e:
            return Result(argv, 127, "", str(e))
        finally:
            if fin:
                fin.close()
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            rc = None
        fo.seek(0)
        fe.seek(0)
        return Result(argv, rc, fo.read().decode(errors="replace"),
                      fe.read().decode(errors="replace"))


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def wait_for(fn, what, timeout=15.0, step=0.1):
    """fn()'s first true value within timeout seconds, else Fail naming
    what (a string, or a function giving one when the time is up)."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = fn()
        if last:
            return last
        time.sleep(step)
    raise Fail(f"timed out after {timeout:.0f}s waiting for {what() if callable(what) else what}")


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def read(path):
    with open(path) as f:
        return f.read()


def cgroup_paths(pid):
    """{controller: path} from /proc/PID/cgroup ('' for the v2 entry)."""
    out = {}
    for line in read(f"/proc/{pid}/cgroup").splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in (ctrls.split(",") if ctrls else [""]):
            out[c.replace("name=", "")] = path
    return out


def cgroup_v2_only():
    return os.path.exists("/sys/fs/cgroup/cgroup.controllers")


def host_cgroup_file(pid, v1ctrl, v1file, v2file):
    paths = cgroup_paths(pid)
    if cgroup_v2_only():
        p = f"/sys/fs/cgroup{paths['']}/{v2file}"
    else:
        p = f"/sys/fs/cgroup/{v1ctrl}{paths[v1ctrl]}/{v1file}"
    try:
        return read(p).strip()
    except OSError as e:
        return f"<{e.strerror}: {p}>"


def cgroup_procs_file(pid):
    """The host path of cgroup.procs of PID's cgroup (pids controller on v1)."""
    paths = cgroup_paths(pid)
    if cgroup_v2_only():
        return f"/sys/fs/cgroup{paths['']}/cgroup.procs"
    return f"/sys/fs/cgroup/pids{paths['pids']}/cgroup.procs"


def freezer_state(pid):
    if cgroup_v2_only():
        v = host_cgroup_file(pid, "", "", "cgroup.freeze")
        return {"1": "FROZEN", "0": "THAWED"}.get(v, v)
    return host_cgroup_file(pid, "freezer", "freezer.state", "")


# --------------------------------------------------------------------------
# image building


def layer_tar(rootfs):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name in sorted(os.listdir(rootfs)):
            if name.startswith(".mkrootfs"):
                continue

            def owner(ti):
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                ti.mtime = 0
                return ti
            t.add(os.path.join(rootfs, name), arcname=name, filter=owner)
    return buf.getvalue()


def go_arch():
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def image_config(layer):
    """The image config (OCI and Docker share it) of a one-layer busybox
    image: the diff_id is the digest of the uncompressed layer."""
    return {
        "architecture": go_arch(), "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Cmd": ["sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers",
                   "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        "history": [{"created_by": "conformance/clients/run: bundles/mkrootfs"}],
    }


def write_tar(out, files):
    """A tar of (path, bytes) pairs, as regular files."""
    with tarfile.open(out, "w") as t:
        for path, data in files:
            ti = tarfile.TarInfo(path)
            ti.size = len(data)
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))


def oci_archive(layer, name, out):
    """A one-layer OCI image layout in a tar, as `ctr images import` takes it."""
    blobs = {}

    def blob(data):
        d = hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return f"sha256:{d}", len(data)

    gz = gzip.compress(layer, mtime=0)
    ldig, lsize = blob(gz)
    cdig, csize = blob(json.dumps(image_config(layer)).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": cdig, "size": csize},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": ldig, "size": lsize}],
    }
    mdig, msize = blob(json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": mdig, "size": msize,
            "platform": {"architecture": go_arch(), "os": "linux"},
            "annotations": {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]},
        }],
    }
    write_tar(out, [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                    ("index.json", json.dumps(index).encode()),
                    *((f"blobs/sha256/{d}", data) for d, data in blobs.items())])


def docker_archive(layer, name, out):
    """A one-layer image in the `docker save` format, which `docker load`
    of Docker 20.10 takes (it does not read OCI layouts): manifest.json
    naming the config and the uncompressed layer, each under its digest."""
    config = json.dumps(image_config(layer)).encode()
    cdig = hashlib.sha256(config).hexdigest()
    ldig = hashlib.sha256(layer).hexdigest()
    manifest = [{"Config": f"{cdig}.json", "RepoTags": [name], "Layers": [f"{ldig}/layer.tar"]}]
    write_tar(out, [(f"{cdig}.json", config), (f"{ldig}/layer.tar", layer),
                    ("manifest.json", json.dumps(manifest).encode())])


def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def in_script(argv):
    """argv run under script(1), which gives it a pty as stdin/stdout."""
    return ["script", "-qec", " ".join(sh_quote(a) for a in argv), "/dev/null"]



# --------------------------------------------------------------------------
# scenarios

SCENARIOS = []


def scenario(group, name):
    def deco(fn):
        SCENARIOS.append((group, f"{group}/{name}", fn))
        return fn
    return deco


TRAP = ('trap "echo got-TERM; exit 7" TERM; echo ready; '
        'while :; do sleep 0.1; done')


# --------------------------------------------------------------------------
# daemons and processes


def containerd_config(d, sock):
    """A private containerd's config.toml in d: root, state and sockets of
    its own; CRI, the /opt installer and tracing disabled. Returns its path."""
    for sub in ("root", "state"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    conf = os.path.join(d, "config.toml")
    write(conf, f"""# written by conformance/clients/run
version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""
""")
    return conf


def start_daemon(argv, log_path, what, ready, timeout=30):
    """Start argv in a session of its own with its output in log_path and
    wait until ready() is true. Returns the Popen; RuntimeError if it
    exits or does not get ready in time."""
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    with open(log_path, "wb") as log:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                             start_new_session=True)
    end = time.monotonic() + timeout
    while not ready():
        if p.poll() is not None:
            raise RuntimeError(f"{what} exited with {p.returncode}; see {compact(log_path)}")
        if time.monotonic() > end:
            raise RuntimeError(f"{what} did not answer within {timeout}s; see {compact(log_path)}")
        time.sleep(0.1)
    return p


def own_processes(work):
    """Processes whose command line names the work dir (conmon, shims, the
    wrapper, ctr/podman children), except this one."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            cmd = read(f"/proc/{p}/cmdline")
        except OSError:
            continue
        if work in cmd:
            out.append(int(p))
    return out


def alive(pid):
    """Running (not a zombie)."""
    try:
        return read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pids(pids, sig=signal.SIGKILL):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_processes(pids, grace, children=()):
    """SIGTERM pids, SIGKILL those still running after grace seconds; wait
    for the Popen children among them (ours to reap)."""
    kill_pids(pids, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and any(alive(p) for p in pids):
        for c in children:
            c.poll()
        time.sleep(0.1)
    kill_pids([p for p in pids if alive(p)])
    for c in children:
        c.wait()
