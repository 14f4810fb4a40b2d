//! The hardened OCI spec a sandbox runs under, and the bundle it lives in.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::ids::{BoxIds, SANDBOX_UID};
use crate::image::{self, Config, Source};
use crate::limits::{self, Plan as Limits};
use crate::options::SandboxOptions;
use crate::process::{self, BoxRoot, User};
use crate::storage::{self, Lower, RootKind};
use tinyrun::tree::Tree;

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

/// What a box may not see (`linux.maskedPaths`); the guarded class uses
/// them too.
pub(crate) const MASKED_PATHS: [&str; 12] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/proc/scsi",
    "/sys/kernel",
    "/sys/fs/cgroup",
];
/// What a box may read but not change (`linux.readonlyPaths`).
pub(crate) const READONLY_PATHS: [&str; 5] = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// The seccomp allowlist shipped in bundles/profiles.
const SECCOMP_PROFILE: &str = include_str!("../../../bundles/profiles/sandbox-seccomp.json");

fn io<'a>(op: &'static str, p: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(op, p, e)
}

/// What a box's root filesystem is made of.
enum Root {
    /// A directory named by `--rootfs` or by `--bundle`'s config: the
    /// read-only lower layer of an overlay in the bundle dir.
    Given(PathBuf),
    /// An empty skeleton in the bundle dir, filled by read-only binds of the
    /// host's directories (in the mounts) and these symlinks (path inside
    /// the root, target), which copy the host's merged-/usr layout.
    Skeleton(Vec<(PathBuf, PathBuf)>),
    /// `--image`: an overlay over the image, mounted in the bundle dir.
    Image(Source),
}

impl Root {
    fn kind(&self) -> RootKind {
        match self {
            Root::Given(_) => RootKind::Given,
            Root::Skeleton(_) => RootKind::Skeleton,
            Root::Image(_) => RootKind::Image,
        }
    }
}

/// What a box's init runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Program<'a> {
    /// The caller's command (empty if none was given): an image's
    /// `Entrypoint` goes before it, and its `Cmd` stands in for a missing
    /// one (module `process`).
    Command(&'a [String]),
    /// A program as it is: a launched box's idle init.
    Exactly(&'a [String]),
}

/// The box's process, resolved (module `process`).
struct BoxProcess {
    user: User,
    cwd: String,
    env: Vec<String>,
    args: Vec<String>,
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

/// Writes `dir/config.json` (and the box's root at `dir/rootfs`) for box
/// `id`, whose ids inside map to host ids `ids`.
pub(crate) fn write_bundle(
    dir: &Path,
    id: &str,
    opts: &SandboxOptions,
    program: Program<'_>,
    ids: BoxIds,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io("create sandbox bundle", dir))?;
    let Plan { root, mut mounts } = plan(opts, &dir.join(storage::SCRATCH))?;
    let kind = root.kind();
    let limits = limits::plan(opts)?;
    storage::mount_bundle(dir, opts.tmpfs_size, ids.root)?;
    match &limits {
        Limits::Cgroup { parent } => limits::prepare(parent)?,
        Limits::Rlimits { .. } => {}
    }
    if let Some(report) = limits::Report::of(&limits) {
        limits::keep(dir, &report)?;
    }
    if let Some(dns) = opts.egress.as_ref().and_then(|e| e.dns) {
        // The box's resolver, whatever root it has: a file of ours on top.
        let conf = dir.join("resolv.conf");
        std::fs::write(&conf, crate::net::resolv_conf(dns)).map_err(io("write", &conf))?;
        mounts.push(bind_ro(&conf, "/etc/resolv.conf"));
    }
    storage::mount_scratch(dir, opts.tmpfs_size, ids, kind)?;
    let (rootfs, config) = make_root(dir, root, opts, ids)?;
    let tree = Tree::open_one_mount(&rootfs)?;
    let user = process::user(opts.user.as_deref(), config.as_ref(), Some(BoxRoot { tree: &tree, ids }))?;
    storage::box_dirs(dir, &rootfs, kind, ids, (user.uid, user.gid))?;
    if opts.egress.as_ref().is_some_and(|e| e.dns.is_some()) {
        crate::net::resolv_conf_mountpoint(&rootfs, kind != RootKind::Skeleton, ids.root)?;
    }
    // Made here, as the host's root, the way runc makes mount points: the
    // box's own root can't create them in a root filesystem it doesn't own.
    mountpoints(&rootfs, &mounts)?;
    reachable(&rootfs, ids.root)?;
    let p = box_process(opts, config.as_ref(), kind, user, program)?;
    let mut spec = spec_json(id, &rootfs, opts, &p, mounts, (ids, &limits), kind)?;
    if let Some(netns) = crate::net::box_netns(dir, opts.egress.as_ref()) {
        // Made before the container (`net::prepare`), and joined.
        for ns in spec["linux"]["namespaces"].as_array_mut().into_iter().flatten() {
            if ns["type"] == "network" {
                ns["path"] = json!(netns);
            }
        }
    }
    let bytes = serde_json::to_vec(&spec).map_err(|e| Error::InvalidSpec(format!("sandbox spec: {e}")))?;
    write_private(&dir.join("config.json"), &bytes)
}

/// Makes the box's root in its bundle dir `dir`; returns its path and, for
/// an image layout, the image's config.
fn make_root(dir: &Path, root: Root, opts: &SandboxOptions, ids: BoxIds) -> Result<(PathBuf, Option<Config>)> {
    match root {
        Root::Given(r) => Ok((storage::mount_overlay(dir, Lower::Host(&r))?, None)),
        Root::Skeleton(links) => {
            let rootfs = dir.join("rootfs");
            skeleton(&rootfs, &links)?;
            Ok((rootfs, None))
        }
        Root::Image(src) => {
            let state = crate::layout::root_of(dir);
            let cache_size = opts.image_cache_size.unwrap_or_else(|| image::default_cache_size(state));
            let target = image::Target { root: state, bundle: dir, limits: image::Limits::default(), cache_size };
            let img = image::prepare(&src, &target)?;
            let lower = Lower::Mapped { dir: &img.dir, layers: &img.layers, base: ids.base };
            Ok((storage::mount_overlay(dir, lower)?, img.config))
        }
    }
}

/// The box's process: `user`, and what the options and the image's
/// `config` give it (module `process`).
fn box_process(
    opts: &SandboxOptions,
    config: Option<&Config>,
    kind: RootKind,
    user: User,
    program: Program<'_>,
) -> Result<BoxProcess> {
    let args = match program {
        Program::Command(c) => process::command(config, c)?,
        Program::Exactly(a) => a.to_vec(),
    };
    let env = process::env(config, kind == RootKind::Image, &user, &opts.env);
    Ok(BoxProcess { cwd: process::cwd(config)?, env, args, user })
}

/// The command a run of `cmd` under `opts` runs: with an image layout, its
/// `Entrypoint` and `Cmd` applied.
pub(crate) fn command(opts: &SandboxOptions, cmd: &[String]) -> Result<Vec<String>> {
    let config = match &opts.image {
        Some(img) => Source::open(img)?.config()?,
        None => None,
    };
    process::command(config.as_ref(), cmd)
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
/// symlinks (the one part of the root written outside the spec), whether
/// `lo` comes up (a create option, not part of the spec), and the image
/// (its manifest's digest, which covers its config and so its `User`,
/// `WorkingDir`, `Entrypoint`...) and `--user` as given (names are looked
/// up in the box's root, which this has none of). So any option that
/// changes the box changes the digest. Not in it: the timeout and output
/// cap, which each run applies itself, the pool of host ids, which only
/// picks where the box's own range comes from, and the image cache's cap.
pub(crate) fn isolation_digest(opts: &SandboxOptions) -> Result<String> {
    // The storage, skeleton and overlay live in the box's own bundle dir.
    let Plan { root, mounts } = plan(opts, Path::new(storage::SCRATCH))?;
    let kind = root.kind();
    let (root, links, image, config) = match root {
        Root::Given(r) => (r, Vec::new(), None, None),
        Root::Skeleton(links) => (PathBuf::new(), links, None, None),
        Root::Image(src) => {
            let (identity, config) = src.identity()?;
            (PathBuf::new(), Vec::new(), Some(identity), config)
        }
    };
    let user = process::user(opts.user.as_deref(), config.as_ref(), None)?;
    let p = box_process(opts, config.as_ref(), kind, user, Program::Exactly(&[]))?;
    // The seccomp profile is one fixed text: its bytes stand for it below.
    // Parsed into the spec and written out again, it would be most of the
    // work of every `run --pool`.
    let unfiltered = SandboxOptions { no_seccomp: true, ..opts.clone() };
    let plan = Limits::Cgroup { parent: opts.cgroup_parent.clone() };
    let mut spec = spec_json("", &root, &unfiltered, &p, mounts, (BoxIds::block(0), &plan), kind)?;
    for field in PER_BOX {
        if let Some(v) = spec.pointer_mut(field) {
            *v = Value::Null;
        }
    }
    // cgroupsPath is per box; where it goes is not.
    let egress = opts.egress.as_ref().map(|e| format!("{e:?}"));
    let whole = json!({"spec": spec, "skeleton": links, "loopback": opts.loopback, "image": image, "egress": egress,
                       "cgroup_parent": opts.cgroup_parent, "limits": format!("{:?}", opts.limits), "seccomp": !opts.no_seccomp, "user": opts.user});
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
pub(crate) fn reachable(root: &Path, base: u32) -> Result<()> {
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
pub(crate) fn mountpoints(rootfs: &Path, mounts: &[Value]) -> Result<()> {
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
    p: &BoxProcess,
    mounts: Vec<Value>,
    (ids, limits): (BoxIds, &Limits),
    kind: RootKind,
) -> Result<Value> {
    // Options made cpus positive and finite; `as` saturates anyway.
    #[allow(clippy::cast_possible_truncation, reason = "a quota in microseconds per 100 ms period")]
    let quota = (opts.cpus * 100_000.0).round().max(1000.0) as i64;
    let map = ids.map();
    let annotations = json!({"org.tinyrun.sandbox": "true"});
    let mut linux = json!({
        "uidMappings": map,
        "gidMappings": map,
        "namespaces": [{"type": "user"}, {"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"},
                       {"type": "network"}, {"type": "cgroup"}],
        "maskedPaths": MASKED_PATHS,
        "readonlyPaths": READONLY_PATHS
    });
    let mut rlimits = vec![json!({"type": "RLIMIT_CORE", "hard": 0, "soft": 0})];
    match limits {
        Limits::Cgroup { parent } => {
            linux["cgroupsPath"] = json!(format!("{parent}/{id}"));
            linux["resources"] = json!({
                "memory": {"limit": opts.memory, "swap": opts.memory},
                "cpu": {"quota": quota, "period": 100_000},
                "pids": {"limit": opts.pids}
            });
        }
        Limits::Rlimits { rlimits: r, .. } => rlimits.extend(r.iter().cloned()),
    }
    if !opts.no_seccomp {
        linux["seccomp"] = seccomp_profile()?;
    }
    let mut user = json!({"uid": p.user.uid, "gid": p.user.gid});
    if !p.user.groups.is_empty() {
        user["additionalGids"] = json!(p.user.groups);
    }
    Ok(json!({
        "ociVersion": tinyrun::SPEC_VERSION,
        "process": {
            "terminal": false,
            "user": user,
            "args": p.args,
            "env": p.env,
            "cwd": p.cwd,
            "capabilities": {"bounding": [], "effective": [], "permitted": [], "inheritable": [], "ambient": []},
            "rlimits": rlimits,
            "noNewPrivileges": true
        },
        // An image's overlay is the box's own writable root; any other
        // root is read-only unless loosened.
        "root": {"path": root, "readonly": !opts.writable_root && kind != RootKind::Image},
        "hostname": "sandbox",
        "mounts": mounts,
        "annotations": annotations,
        "linux": linux
    }))
}

/// The shipped allowlist; a profile that doesn't parse is an error, never
/// a box without a filter.
pub(crate) fn seccomp_profile() -> Result<Value> {
    parse_profile(SECCOMP_PROFILE)
}

pub(super) fn parse_profile(text: &str) -> Result<Value> {
    serde_json::from_str(text)
        .map_err(|e| Error::InvalidSpec(format!("the sandbox seccomp profile does not parse: {e}")))
}
