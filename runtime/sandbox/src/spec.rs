//! The hardened OCI spec a sandbox runs under, and the bundle it lives in.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::ids::BLOCK;
use super::options::SandboxOptions;
use crate::error::{Error, Result};
use crate::image::{self, Source};
use crate::storage;
use tinyrun::tree::Tree;

/// Inside the box the program runs as this user, mapped (with the rest of
/// ids 0..65535) to the box's own range of host ids (see [`super::ids`]).
pub(crate) const SANDBOX_UID: u32 = 1000;

/// Host directories that make up the default root, bind-mounted read-only
/// (or reproduced as symlinks where the host has merged /usr).
const HOST_DIRS: [&str; 7] = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];
/// The few /etc entries programs need: the dynamic loader's cache, time
/// zone, name service and certificate stores. Users come from our own files.
const HOST_ETC: [&str; 9] = [
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "alternatives",
    "ssl",
    "ca-certificates",
    "mime.types",
];

/// The seccomp allowlist shipped in bundles/profiles.
const SECCOMP_PROFILE: &str = include_str!("../../../bundles/profiles/sandbox-seccomp.json");

fn io<'a>(op: &'static str, p: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(op, p, e)
}

/// What a box's root filesystem is made of.
enum Root {
    /// A directory named by `--rootfs` or by `--bundle`'s config.
    Given(PathBuf),
    /// An empty skeleton in the bundle dir, filled by read-only binds of the
    /// host's directories (in the mounts) and these symlinks (path inside
    /// the root, target), which copy the host's merged-/usr layout.
    Skeleton(Vec<(PathBuf, PathBuf)>),
    /// `--image`: an overlay over the image, mounted in the bundle dir.
    Image(Source),
}

/// The parts of a box's spec that come from the host or the options' paths,
/// read once, before anything is written.
struct Plan {
    root: Root,
    mounts: Vec<Value>,
}

/// `scratch` is where the box's storage is mounted (module `storage`).
fn plan(opts: &SandboxOptions, scratch: &Path) -> Result<Plan> {
    if let Some(img) = &opts.image {
        return Ok(Plan { root: Root::Image(Source::open(img)?), mounts: base_mounts(opts, None) });
    }
    let mut mounts = base_mounts(opts, Some(scratch));
    let root = match (&opts.rootfs, &opts.bundle) {
        (Some(r), _) => Root::Given(std::fs::canonicalize(r).map_err(io("open --rootfs", r))?),
        (None, Some(b)) => Root::Given(bundle_rootfs(b)?),
        (None, None) => Root::Skeleton(host_root(&mut mounts)?),
    };
    Ok(Plan { root, mounts })
}

/// Writes `dir/config.json` (and, for the default root, `dir/rootfs`) for
/// box `id`, whose ids inside map to host ids `host_id..host_id + 65536`.
pub(crate) fn write_bundle(dir: &Path, id: &str, opts: &SandboxOptions, args: &[String], host_id: u32) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io("create sandbox bundle", dir))?;
    let Plan { root, mut mounts } = plan(opts, &dir.join(storage::SCRATCH))?;
    storage::mount_bundle(dir, opts.tmpfs_size, host_id)?;
    if let Some(dns) = opts.egress.as_ref().and_then(|e| e.dns) {
        // The box's resolver, whatever root it has: a file of ours on top.
        let conf = dir.join("resolv.conf");
        std::fs::write(&conf, crate::net::resolv_conf(dns)).map_err(io("write", &conf))?;
        mounts.push(bind_ro(&conf, "/etc/resolv.conf"));
    }
    storage::mount_scratch(dir, opts.tmpfs_size, host_id, matches!(root, Root::Image(_)))?;
    let (root, image_env) = match root {
        Root::Given(r) => (r, None),
        Root::Skeleton(links) => {
            let rootfs = dir.join("rootfs");
            skeleton(&rootfs, &links)?;
            (rootfs, None)
        }
        Root::Image(src) => {
            let img = image::prepare(storage::state_root(dir), &src, host_id, image::Limits::default())?;
            (storage::mount_image(dir, &img, host_id)?, Some(img.env))
        }
    };
    if opts.egress.as_ref().is_some_and(|e| e.dns.is_some()) {
        crate::net::resolv_conf_mountpoint(&root, image_env.is_some(), host_id)?;
    }
    // Made here, as the host's root, the way runc makes mount points: the
    // box's own root can't create them in a root filesystem it doesn't own.
    mountpoints(&root, &mounts)?;
    reachable(&root, host_id)?;
    let spec = spec_json(id, &root, opts, args, mounts, host_id, image_env.as_deref())?;
    let bytes = serde_json::to_vec(&spec).map_err(|e| Error::InvalidSpec(format!("sandbox spec: {e}")))?;
    write_private(&dir.join("config.json"), &bytes)
}

/// Writes a file only root may read: a box's config holds its environment,
/// secrets included.
fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io("create", path))?;
    f.write_all(bytes).map_err(io("write", path))
}

/// Fields of a box's spec that differ from box to box of the same options.
const PER_BOX: [&str; 4] = ["/process/args", "/linux/cgroupsPath", "/linux/uidMappings", "/linux/gidMappings"];

/// A short digest of everything that shapes a box's isolation: the spec a
/// box of these options gets, less [`PER_BOX`], plus the skeleton's
/// symlinks (the one part of the root written outside the spec) and
/// whether `lo` comes up (a create option, not part of the spec). So any
/// option that changes the box changes the digest. Not in it: the timeout
/// and output cap, which each run applies itself, and the pool of host ids,
/// which only picks where the box's own range comes from.
pub(crate) fn isolation_digest(opts: &SandboxOptions) -> Result<String> {
    // The storage, skeleton and overlay live in the box's own bundle dir.
    let Plan { root, mounts } = plan(opts, Path::new(storage::SCRATCH))?;
    let (root, links, image) = match root {
        Root::Given(r) => (r, Vec::new(), None),
        Root::Skeleton(links) => (PathBuf::new(), links, None),
        Root::Image(src) => (PathBuf::new(), Vec::new(), Some(src.identity()?)),
    };
    let env = image.as_ref().map(|_| Vec::new());
    // The seccomp profile is one fixed text: its bytes stand for it below.
    // Parsed into the spec and written out again, it would be most of the
    // work of every `run --pool`.
    let unfiltered = SandboxOptions { no_seccomp: true, ..opts.clone() };
    let mut spec = spec_json("", &root, &unfiltered, &[], mounts, 0, env.as_deref())?;
    for field in PER_BOX {
        if let Some(v) = spec.pointer_mut(field) {
            *v = Value::Null;
        }
    }
    // cgroupsPath is per box; where it goes is not.
    let egress = opts.egress.as_ref().map(|e| format!("{e:?}"));
    let whole = json!({"spec": spec, "skeleton": links, "loopback": opts.loopback, "image": image, "egress": egress,
                       "cgroup_parent": opts.cgroup_parent, "seccomp": !opts.no_seccomp});
    let bytes = serde_json::to_vec(&whole).map_err(|e| Error::InvalidSpec(format!("sandbox spec: {e}")))?;
    // A JSON object ends where it ends, so the profile after it can't be
    // mistaken for part of it.
    let profile = if opts.no_seccomp { "" } else { SECCOMP_PROFILE };
    let sum = Sha256::new().chain_update(&bytes).chain_update(profile.as_bytes()).finalize();
    Ok(sum.iter().take(8).map(|b| format!("{b:02x}")).collect())
}

fn bundle_rootfs(bundle: &Path) -> Result<PathBuf> {
    let b = tinyrun::spec::load(bundle)?;
    Ok(b.rootfs)
}

/// Which host directories the default root binds (added to `mounts`) and
/// which it reproduces as symlinks (returned).
fn host_root(mounts: &mut Vec<Value>) -> Result<Vec<(PathBuf, PathBuf)>> {
    let mut links = Vec::new();
    let entries = HOST_DIRS.iter().map(|d| (Path::new("/").join(d), PathBuf::from(d)));
    let etc = HOST_ETC.iter().map(|e| (Path::new("/etc").join(e), Path::new("etc").join(e)));
    for (host, inside) in entries.chain(etc) {
        let Ok(meta) = std::fs::symlink_metadata(&host) else { continue };
        if meta.file_type().is_symlink() {
            links.push((inside, std::fs::read_link(&host).map_err(io("readlink", &host))?));
        } else if meta.is_dir() || inside.starts_with("etc") {
            mounts.push(bind_ro(&host, &format!("/{}", inside.display())));
        }
    }
    Ok(links)
}

/// Makes the default root: its symlinks, and the few /etc files of its own.
fn skeleton(rootfs: &Path, links: &[(PathBuf, PathBuf)]) -> Result<()> {
    let etc = rootfs.join("etc");
    std::fs::create_dir_all(&etc).map_err(io("create", rootfs))?;
    for (inside, target) in links {
        let path = rootfs.join(inside);
        std::os::unix::fs::symlink(target, &path).map_err(io("symlink", &path))?;
    }
    let files = [
        ("passwd", format!("root:x:0:0:root:/root:/bin/sh\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/work:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")),
        ("group", format!("root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")),
        ("hosts", "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n".to_string()),
        ("hostname", "sandbox\n".to_string()),
    ];
    for (name, text) in files {
        let p = etc.join(name);
        std::fs::write(&p, text).map_err(io("write", &p))?;
    }
    Ok(())
}

/// The box's root is host id `base`, which must be able to walk to its
/// root filesystem: say so plainly instead of failing a mount later.
fn reachable(root: &Path, base: u32) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    for dir in root.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(dir) else { continue };
        let search = match (meta.uid() == base, meta.gid() == base) {
            (true, _) => 0o100,
            (false, true) => 0o010,
            (false, false) => 0o001,
        };
        if meta.mode() & search == 0 {
            return Err(Error::InvalidArgument(format!(
                "sandbox root filesystem {} is not reachable by the sandbox's unprivileged user: \
                 {} is not searchable by others (chmod o+x it, or choose another --root)",
                root.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Makes every mount point ahead of time: inside its user namespace the
/// box's root can't create anything in a directory the host's root owns.
/// The root may be an image's: each destination is resolved inside it, a
/// symlink on the way followed as the box would see it, never to the host.
/// Those under /dev are made by init, in the box's own /dev tmpfs.
fn mountpoints(rootfs: &Path, mounts: &[Value]) -> Result<()> {
    let tree = Tree::open(rootfs)?;
    for m in mounts {
        let Some(dest) = m["destination"].as_str().filter(|d| !d.starts_with("/dev/")) else { continue };
        let is_file = m["type"] == "bind" && m["source"].as_str().is_some_and(|s| !Path::new(s).is_dir());
        tree.ensure(Path::new(dest), is_file)?;
    }
    Ok(())
}

fn bind_ro(src: &Path, dest: &str) -> Value {
    json!({"destination": dest, "type": "bind", "source": src, "options": ["rbind", "ro", "nosuid", "nodev"]})
}

/// The mounts of every box. /tmp and /work come from the box's storage at
/// `scratch`; with an image (`None`) they are directories of its overlay.
fn base_mounts(opts: &SandboxOptions, scratch: Option<&Path>) -> Vec<Value> {
    let tmpfs = format!("size={}", opts.tmpfs_size);
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777", tmpfs]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}),
    ];
    if let Some(scratch) = scratch {
        for d in ["tmp", "work"] {
            mounts.push(json!({"destination": format!("/{d}"), "type": "bind", "source": scratch.join(d),
                               "options": ["bind", "nosuid", "nodev"]}));
        }
    }
    mounts
}

fn spec_json(
    id: &str,
    root: &Path,
    opts: &SandboxOptions,
    args: &[String],
    mounts: Vec<Value>,
    host_id: u32,
    image_env: Option<&[String]>,
) -> Result<Value> {
    // /work/.local/bin first: what `pip install` puts there runs by name.
    // PIP_BREAK_SYSTEM_PACKAGES: the host's Python is "externally managed"
    // (PEP 668), which makes pip refuse even a user install; in the box
    // the system's packages are a read-only mount nothing can break, and
    // pip installs into the box's own user site under /work (or a venv).
    let defaults = [
        "PATH=/work/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/work",
        "TMPDIR=/tmp",
        "LANG=C.UTF-8",
        "PIP_BREAK_SYSTEM_PACKAGES=1",
    ];
    let env = merge_env(&defaults, image_env.unwrap_or_default(), &opts.env);
    // Options made cpus positive and finite; `as` saturates anyway.
    #[allow(clippy::cast_possible_truncation, reason = "a quota in microseconds per 100 ms period")]
    let quota = (opts.cpus * 100_000.0).round().max(1000.0) as i64;
    let map = json!([{"containerID": 0, "hostID": host_id, "size": BLOCK}]);
    let annotations = json!({"org.tinyrun.sandbox": "true"});
    let mut linux = json!({
        "uidMappings": map,
        "gidMappings": map,
        "namespaces": [{"type": "user"}, {"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"},
                       {"type": "network"}, {"type": "cgroup"}],
        "cgroupsPath": format!("{}/{id}", opts.cgroup_parent),
        "resources": {
            "memory": {"limit": opts.memory, "swap": opts.memory},
            "cpu": {"quota": quota, "period": 100_000},
            "pids": {"limit": opts.pids}
        },
        "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
                        "/sys/kernel", "/sys/fs/cgroup"],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
    });
    if !opts.no_seccomp {
        linux["seccomp"] = seccomp_profile()?;
    }
    Ok(json!({
        "ociVersion": tinyrun::SPEC_VERSION,
        "process": {
            "terminal": false,
            "user": {"uid": SANDBOX_UID, "gid": SANDBOX_UID},
            "args": args,
            "env": env,
            "cwd": "/work",
            "capabilities": {"bounding": [], "effective": [], "permitted": [], "inheritable": [], "ambient": []},
            "rlimits": [{"type": "RLIMIT_CORE", "hard": 0, "soft": 0}],
            "noNewPrivileges": true
        },
        "root": {"path": root, "readonly": !opts.writable_root && image_env.is_none()},
        "hostname": "sandbox",
        "mounts": mounts,
        "annotations": annotations,
        "linux": linux
    }))
}

/// The box's environment: our defaults, then the image's (but HOME and
/// TMPDIR stay ours: the box's home is /work), then the caller's; a later
/// NAME replaces an earlier one in place.
fn merge_env(defaults: &[&str], image: &[String], caller: &[String]) -> Vec<String> {
    let mut env: Vec<String> = defaults.iter().map(|s| s.to_string()).collect();
    let ours = |v: &&String| !(v.starts_with("HOME=") || v.starts_with("TMPDIR="));
    for v in image.iter().filter(ours).chain(caller) {
        let name = v.split_once('=').map_or(v.as_str(), |(n, _)| n);
        match env.iter_mut().find(|e| e.split_once('=').map_or(e.as_str(), |(n, _)| n) == name) {
            Some(e) => e.clone_from(v),
            None => env.push(v.clone()),
        }
    }
    env
}

/// The shipped allowlist; a profile that doesn't parse is an error, never
/// a box without a filter.
pub(super) fn seccomp_profile() -> Result<Value> {
    parse_profile(SECCOMP_PROFILE)
}

pub(super) fn parse_profile(text: &str) -> Result<Value> {
    serde_json::from_str(text)
        .map_err(|e| Error::InvalidSpec(format!("the sandbox seccomp profile does not parse: {e}")))
}
