//! The hardened OCI spec a sandbox runs under, and the bundle it lives in.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::options::SandboxOptions;
use crate::error::{Result, RuntimeError};

/// Inside the box the program runs as this user, mapped (with the rest of
/// ids 0..65535) to an unprivileged range on the host.
pub(crate) const SANDBOX_UID: u32 = 1000;
const HOST_ID_BASE: u32 = 100_000;
const ID_RANGE: u32 = 65_536;

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

/// Annotation asking init to bring `lo` up in the box's new network namespace.
pub(crate) const LOOPBACK_ANNOTATION: &str = "org.tinyrun.network.loopback";

fn io<'a>(op: &'static str, p: &'a Path) -> impl FnOnce(std::io::Error) -> RuntimeError + 'a {
    move |e| RuntimeError::io(op, p, e)
}

/// Writes `dir/config.json` (and, for the default root, `dir/rootfs`).
pub(crate) fn write_bundle(dir: &Path, id: &str, opts: &SandboxOptions, args: &[String]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io("create sandbox bundle", dir))?;
    let mut mounts = base_mounts(opts);
    let root = match (&opts.rootfs, &opts.bundle) {
        (Some(r), _) => std::fs::canonicalize(r).map_err(io("open --rootfs", r))?,
        (None, Some(b)) => bundle_rootfs(b)?,
        (None, None) => {
            let rootfs = dir.join("rootfs");
            host_root(&rootfs, &mut mounts)?;
            rootfs
        }
    };
    // Made here, as the host's root, the way runc makes mount points: the
    // box's own root can't create them in a root filesystem it doesn't own.
    mountpoints(&root, &mounts)?;
    reachable(&root)?;
    let spec = spec_json(id, &root, opts, args, mounts);
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_vec(&spec).unwrap_or_default()).map_err(io("write", &path))
}

fn bundle_rootfs(bundle: &Path) -> Result<PathBuf> {
    let b = crate::spec::load(bundle)?;
    Ok(b.rootfs)
}

/// An empty skeleton whose directories are filled by read-only binds of the
/// host's, and whose symlinks copy the host's (merged-/usr layouts).
fn host_root(rootfs: &Path, mounts: &mut Vec<Value>) -> Result<()> {
    std::fs::create_dir_all(rootfs.join("etc")).map_err(io("create", rootfs))?;
    for d in HOST_DIRS {
        let host = Path::new("/").join(d);
        let Ok(meta) = std::fs::symlink_metadata(&host) else { continue };
        let inside = rootfs.join(d);
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&host).map_err(io("readlink", &host))?;
            let _ = std::fs::remove_file(&inside);
            std::os::unix::fs::symlink(&target, &inside).map_err(io("symlink", &inside))?;
        } else if meta.is_dir() {
            mounts.push(bind_ro(&host, &format!("/{d}")));
        }
    }
    for e in HOST_ETC {
        let host = Path::new("/etc").join(e);
        match std::fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&host).map_err(io("readlink", &host))?;
                let _ = std::os::unix::fs::symlink(&target, rootfs.join("etc").join(e));
            }
            Ok(_) => mounts.push(bind_ro(&host, &format!("/etc/{e}"))),
            Err(_) => {}
        }
    }
    let etc = rootfs.join("etc");
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

/// The box runs as an unprivileged host uid, which must be able to walk
/// to its root filesystem: say so plainly instead of failing a mount later.
fn reachable(root: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for dir in root.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(dir) else { continue };
        if meta.permissions().mode() & 0o001 == 0 {
            return Err(RuntimeError::InvalidArgument(format!(
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
fn mountpoints(rootfs: &Path, mounts: &[Value]) -> Result<()> {
    for m in mounts {
        let Some(dest) = m["destination"].as_str() else { continue };
        let inside = rootfs.join(dest.trim_start_matches('/'));
        if std::fs::symlink_metadata(&inside).is_ok() {
            continue;
        }
        let is_file = m["type"] == "bind" && m["source"].as_str().is_some_and(|s| !Path::new(s).is_dir());
        if is_file {
            if let Some(parent) = inside.parent() {
                std::fs::create_dir_all(parent).map_err(io("create", parent))?;
            }
            std::fs::File::create(&inside).map_err(io("create", &inside))?;
        } else if !dest.starts_with("/dev/") {
            std::fs::create_dir_all(&inside).map_err(io("create", &inside))?;
        }
    }
    Ok(())
}

fn bind_ro(src: &Path, dest: &str) -> Value {
    json!({"destination": dest, "type": "bind", "source": src, "options": ["rbind", "ro", "nosuid", "nodev"]})
}

fn base_mounts(opts: &SandboxOptions) -> Vec<Value> {
    let tmpfs = format!("size={}", opts.tmpfs_size);
    vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777", tmpfs]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}),
        json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "nodev", "mode=1777", tmpfs]}),
        json!({"destination": "/work", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "nodev", "mode=0755", format!("uid={SANDBOX_UID}"), format!("gid={SANDBOX_UID}"), tmpfs]}),
    ]
}

fn spec_json(id: &str, root: &Path, opts: &SandboxOptions, args: &[String], mounts: Vec<Value>) -> Value {
    let mut env = vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        "HOME=/work".to_string(),
        "TMPDIR=/tmp".to_string(),
        "LANG=C.UTF-8".to_string(),
    ];
    env.extend(opts.env.iter().cloned());
    // Options made cpus positive and finite; `as` saturates anyway.
    #[allow(clippy::cast_possible_truncation, reason = "a quota in microseconds per 100 ms period")]
    let quota = (opts.cpus * 100_000.0).round().max(1000.0) as i64;
    let map = json!([{"containerID": 0, "hostID": HOST_ID_BASE, "size": ID_RANGE}]);
    let mut annotations = json!({"org.tinyrun.sandbox": "true"});
    if opts.loopback {
        annotations[LOOPBACK_ANNOTATION] = json!("up");
    }
    let mut linux = json!({
        "uidMappings": map,
        "gidMappings": map,
        "namespaces": [{"type": "user"}, {"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"},
                       {"type": "network"}, {"type": "cgroup"}],
        "cgroupsPath": format!("/tinyrun-sandbox/{id}"),
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
        if let Ok(profile) = serde_json::from_str::<Value>(SECCOMP_PROFILE) {
            linux["seccomp"] = profile;
        }
    }
    json!({
        "ociVersion": oci_spec::runtime::VERSION,
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
        "root": {"path": root, "readonly": !opts.writable_root},
        "hostname": "sandbox",
        "mounts": mounts,
        "annotations": annotations,
        "linux": linux
    })
}
