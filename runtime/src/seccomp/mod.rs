//! Seccomp filters from `linux.seccomp` (runtime-spec `config-linux.md`
//! "Seccomp"), compiled with libseccomp.
//!
//! Two processes take part:
//! - the **runtime** checks the profile and compiles it to a BPF program
//!   ([`Filter::compile`]) before cloning init, so a bad profile is a
//!   `create` error that names the field, and all the allocation and library
//!   work happens before the fork;
//! - **init** installs the program with one `seccomp(2)` call
//!   ([`Filter::load`]); with `SCMP_ACT_NOTIFY` it gets the notification fd
//!   back and passes it to the runtime, which hands it to the agent at
//!   `listenerPath` ([`notify`]).
//!
//! Rules, as runc applies them: `SCMP_ACT_KILL` is `KILL_THREAD`; `errnoRet`
//! defaults to EPERM for ERRNO and TRACE; a rule whose action equals the
//! default action is dropped; a syscall name libseccomp can't resolve for
//! the native architecture is skipped (an older kernel or library simply
//! doesn't have it); conditions on distinct arguments are ANDed in one rule,
//! and several conditions on the *same* argument become separate rules (OR).
//! When `flags` is absent, `SECCOMP_FILTER_FLAG_SPEC_ALLOW` is used if the
//! kernel has it; `SECCOMP_FILTER_FLAG_TSYNC` is accepted and has nothing to
//! do (init is single-threaded). Where the spec says MUST, tinyrun is
//! stricter than runc: an `errnoRet` on an action without an errno, empty
//! `names`, and `listenerMetadata` without `listenerPath` are errors.
//!
//! Compiling takes libseccomp a millisecond or two for a long allowlist,
//! most of what an `exec` costs the runtime in CPU. So `create` keeps the
//! program it compiled in the state directory ([`Filter::cache`]), next to
//! the config snapshot the profile came from, and `exec` takes it from
//! there when the profile it would compile is byte for byte the one the
//! program was made from ([`Filter::from_spec_cached`]); anything else
//! (no file, another profile, a short or odd file, a profile with
//! `SCMP_ACT_NOTIFY`) compiles afresh. The state directory is the
//! runtime's own (root's, 0711), trusted like the config snapshot itself.
//! A program is only as good as the code that compiled it, so every cache
//! file starts with the build that wrote it ([`cache_header`]: tinyrun's
//! version and build id, libseccomp's version); a file of another build
//! is never used, and without a build id nothing is cached.
//!
//! Where init loads the filter (runc's order): with `noNewPrivileges` false,
//! just before the user and capability switch, while it still holds
//! CAP_SYS_ADMIN (needed to install a filter without no_new_privs); with it
//! true, as late as possible: after PATH lookup and marking fds
//! close-on-exec, right before reporting Ready. A profile must therefore
//! also allow what init itself still does afterwards: `sendto`, `recvfrom`,
//! `prctl`, `accept4`, `read`, `close`, `rt_sigaction`, `rt_sigprocmask`,
//! `execve`, `exit_group` (and `write` on a late error); plus, with NNP
//! false, the user switch (`capget`, `capset`, `setgroups`, `setresgid`,
//! `setresuid`), `getcwd`, `umask`, `openat`, `newfstatat`/`statx`,
//! `access`/`faccessat`, `close_range`; and whatever startContainer hooks
//! run. `SCMP_ACT_NOTIFY` is refused as the default action and for `sendto`
//! and `sendmsg`, the calls init needs to hand the notification fd over
//! (runc refuses it for `write`, for the same reason).

mod compile;
mod enosys;
pub(crate) mod notify;
pub(crate) mod refusals;

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use libseccomp::{ScmpAction, ScmpArch, ScmpFilterContext};
use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction, LinuxSeccompFilterFlag, Spec};

use crate::error::{Result, RuntimeError, SysError};

pub(crate) use compile::check;

/// Actions tinyrun recognises in `defaultAction` and `syscalls[].action`.
pub(crate) const ACTIONS: &[&str] = &[
    "SCMP_ACT_ALLOW",
    "SCMP_ACT_ERRNO",
    "SCMP_ACT_KILL",
    "SCMP_ACT_KILL_PROCESS",
    "SCMP_ACT_KILL_THREAD",
    "SCMP_ACT_LOG",
    "SCMP_ACT_NOTIFY",
    "SCMP_ACT_TRACE",
    "SCMP_ACT_TRAP",
];

/// Operators tinyrun recognises in `syscalls[].args[].op`.
pub(crate) const OPERATORS: &[&str] =
    &["SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT", "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE"];

/// Filter flags tinyrun recognises in `flags`.
pub(crate) const KNOWN_FLAGS: &[&str] = &[
    "SECCOMP_FILTER_FLAG_TSYNC",
    "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
    "SECCOMP_FILTER_FLAG_LOG",
    "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
];

/// The architectures config.json can name, with libseccomp's token. Which
/// of them work depends on the libseccomp linked in ([`archs`]).
const ARCHS: &[(&str, ScmpArch)] = &[
    ("SCMP_ARCH_AARCH64", ScmpArch::Aarch64),
    ("SCMP_ARCH_ARM", ScmpArch::Arm),
    ("SCMP_ARCH_LOONGARCH64", ScmpArch::Loongarch64),
    ("SCMP_ARCH_M68K", ScmpArch::M68k),
    ("SCMP_ARCH_MIPS", ScmpArch::Mips),
    ("SCMP_ARCH_MIPS64", ScmpArch::Mips64),
    ("SCMP_ARCH_MIPS64N32", ScmpArch::Mips64N32),
    ("SCMP_ARCH_MIPSEL", ScmpArch::Mipsel),
    ("SCMP_ARCH_MIPSEL64", ScmpArch::Mipsel64),
    ("SCMP_ARCH_MIPSEL64N32", ScmpArch::Mipsel64N32),
    ("SCMP_ARCH_PARISC", ScmpArch::Parisc),
    ("SCMP_ARCH_PARISC64", ScmpArch::Parisc64),
    ("SCMP_ARCH_PPC", ScmpArch::Ppc),
    ("SCMP_ARCH_PPC64", ScmpArch::Ppc64),
    ("SCMP_ARCH_PPC64LE", ScmpArch::Ppc64Le),
    ("SCMP_ARCH_RISCV64", ScmpArch::Riscv64),
    ("SCMP_ARCH_S390", ScmpArch::S390),
    ("SCMP_ARCH_S390X", ScmpArch::S390X),
    ("SCMP_ARCH_SH", ScmpArch::Sh),
    ("SCMP_ARCH_SHEB", ScmpArch::Sheb),
    ("SCMP_ARCH_X32", ScmpArch::X32),
    ("SCMP_ARCH_X86", ScmpArch::X86),
    ("SCMP_ARCH_X86_64", ScmpArch::X8664),
];

/// Where the runtime sends the notification fd (`listenerPath`).
#[derive(Debug, Clone)]
pub(crate) struct Listener {
    pub path: PathBuf,
    pub metadata: Option<String>,
}

/// A compiled `linux.seccomp` profile: the BPF program and the
/// `seccomp(2)` flags to install it with, exactly as `create` builds them
/// for a container (public as [`crate::SeccompFilter`], for callers that
/// check a profile of their own before writing it into a config).
pub struct Filter {
    program: Vec<libc::sock_filter>,
    flags: u32,
    listener: Option<Listener>,
    /// The shared cache file holding this very program (see
    /// [`Filter::from_shared_cache`]), which [`Filter::cache`] links to.
    shared: Option<std::path::PathBuf>,
    /// With refusals recorded ([`Filter::record_refusals`]): the program
    /// that notifies them instead, and the errno to answer.
    recording: Option<(Vec<libc::sock_filter>, i32)>,
}

impl Filter {
    /// Checks and compiles `linux.seccomp`. Runs in the runtime process.
    ///
    /// # Errors
    /// A profile `create` would refuse, with the same error naming the
    /// field (an unknown action, operator, architecture or flag, ...).
    pub fn compile(s: &LinuxSeccomp) -> Result<Filter> {
        compile::compile(s)
    }

    /// The filter for a config, if it has `linux.seccomp`.
    pub(crate) fn from_spec(spec: &Spec) -> Result<Option<Filter>> {
        spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()).map(Filter::compile).transpose()
    }

    /// Installs the filter on the calling thread, for good; returns the
    /// notification fd when the profile uses `SCMP_ACT_NOTIFY`. Runs in
    /// init, or in a throw-away child that tries a profile out.
    ///
    /// # Preconditions
    /// no_new_privs is set, or the caller holds CAP_SYS_ADMIN in its user
    /// namespace.
    ///
    /// # Errors
    /// The kernel's refusal of `seccomp(2)`.
    pub fn load(&self) -> Result<Option<OwnedFd>, SysError> {
        match &self.recording {
            Some((program, _)) => crate::sys::seccomp::set_filter(program, self.flags | compile::NEW_LISTENER),
            None => crate::sys::seccomp::set_filter(&self.program, self.flags),
        }
    }

    /// From now on the filter notifies its refusals instead of failing
    /// them, for a supervisor to answer and record (see [`refusals`]);
    /// `load` then returns the listener. The cached program stays the
    /// profile's own.
    ///
    /// # Errors
    /// A profile with an `SCMP_ACT_NOTIFY` agent of its own, or one that
    /// refuses with several errnos, can't be recorded: unsupported, naming
    /// `linux.seccomp`.
    pub(crate) fn record_refusals(&mut self) -> Result<()> {
        if self.listener.is_some() {
            return Err(RuntimeError::unsupported("linux.seccomp", "refusals can't be recorded with a listenerPath"));
        }
        let Some(notifying) = refusals::notifying(&self.program) else {
            return Err(RuntimeError::unsupported(
                "linux.seccomp",
                "refusals can be recorded only when they all carry one errno",
            ));
        };
        self.recording = Some(notifying);
        Ok(())
    }

    /// The errno refusals are answered with, when they are recorded.
    pub(crate) fn refusal_errno(&self) -> Option<i32> {
        self.recording.as_ref().map(|(_, e)| *e)
    }

    /// The filter for a config, taken from the cache file `cache` when it
    /// holds the program of this very profile, else compiled.
    pub(crate) fn from_spec_cached(spec: &Spec, cache: &std::path::Path) -> Result<Option<Filter>> {
        let Some(s) = spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()) else { return Ok(None) };
        let cached = cache_header().zip(serde_json::to_vec(s).ok()).and_then(|(header, profile)| {
            let bytes = std::fs::read(cache).ok()?;
            Filter::from_cache(&bytes, header, &profile)
        });
        match cached {
            Some(f) => Ok(Some(f)),
            None => Filter::compile(s).map(Some),
        }
    }

    /// The filter for a config, through `dir`, a cache shared by many
    /// containers (`Supervised::seccomp_cache`): the program of this
    /// profile if it is there, else compiled and added. A dir that is not
    /// the caller's own, or that others can write, is not used.
    pub(crate) fn from_shared_cache(spec: &Spec, dir: &std::path::Path) -> Result<Option<Filter>> {
        let Some(s) = spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()) else { return Ok(None) };
        let (Some(header), Ok(profile)) = (cache_header(), serde_json::to_vec(s)) else {
            return Filter::compile(s).map(Some);
        };
        let Some(path) = shared_path(header, &profile, dir) else { return Filter::compile(s).map(Some) };
        if let Some(mut f) = std::fs::read(&path).ok().and_then(|bytes| Filter::from_cache(&bytes, header, &profile)) {
            f.shared = Some(path);
            return Ok(Some(f));
        }
        let mut f = Filter::compile(s)?;
        if f.listener.is_none() && crate::state::write_atomic(&path, &f.cache_bytes(header, &profile), 0o600).is_ok() {
            f.shared = Some(path);
            // A miss is rare (a new profile or a new build): the time to
            // drop what older builds left, which nothing will read again.
            prune_other_builds(dir, header);
        }
        Ok(Some(f))
    }

    /// Writes the program to `cache`, for [`Filter::from_spec_cached`].
    /// Best effort: without the file, `exec` compiles. A profile with
    /// `SCMP_ACT_NOTIFY` is not kept (its listener is read from the spec).
    pub(crate) fn cache(&self, spec: &Spec, cache: &std::path::Path) {
        let Some(s) = spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()) else { return };
        if self.listener.is_some() {
            return;
        }
        // The shared cache's file is never written in place (a new program
        // replaces it by rename), so a link keeps this program: no copy, no
        // new inode.
        if self.shared.as_ref().is_some_and(|src| std::fs::hard_link(src, cache).is_ok()) {
            return;
        }
        if let (Some(header), Ok(profile)) = (cache_header(), serde_json::to_vec(s)) {
            let _ = crate::state::write_atomic(cache, &self.cache_bytes(header, &profile), 0o600);
        }
    }

    /// The cache file: the header line ([`cache_header`]), the profile's
    /// length (u64) and JSON, the flags (u32), then the program, all in
    /// native byte order.
    fn cache_bytes(&self, header: &[u8], profile: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(header.len() + 12 + profile.len() + self.program.len() * 8);
        b.extend_from_slice(header);
        b.extend_from_slice(&(profile.len() as u64).to_ne_bytes());
        b.extend_from_slice(profile);
        b.extend_from_slice(&self.flags.to_ne_bytes());
        for i in &self.program {
            b.extend_from_slice(&i.code.to_ne_bytes());
            b.extend_from_slice(&[i.jt, i.jf]);
            b.extend_from_slice(&i.k.to_ne_bytes());
        }
        b
    }

    /// The filter in a cache file, if the file was made from `profile` by
    /// the build `header` names, and is whole.
    fn from_cache(bytes: &[u8], header: &[u8], profile: &[u8]) -> Option<Filter> {
        let rest = bytes.strip_prefix(header)?;
        let (len, rest) = rest.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_ne_bytes(*len)).ok()?;
        let (theirs, rest) = rest.split_at_checked(len)?;
        if theirs != profile {
            return None;
        }
        let (flags, rest) = rest.split_first_chunk::<4>()?;
        if rest.is_empty() || rest.len() % 8 != 0 {
            return None;
        }
        let program = rest
            .chunks_exact(8)
            .map(|c| libc::sock_filter {
                code: u16::from_ne_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        Some(Filter { program, flags: u32::from_ne_bytes(*flags), listener: None, shared: None, recording: None })
    }

    /// The agent to hand the notification fd to (set iff the profile uses
    /// `SCMP_ACT_NOTIFY`).
    pub(crate) fn listener(&self) -> Option<&Listener> {
        self.listener.as_ref()
    }

    /// The `seccomp(2)` flags the filter is installed with.
    #[cfg(test)]
    pub(crate) fn flags(&self) -> u32 {
        self.flags
    }

    /// Number of BPF instructions.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.program.len()
    }
}

/// Where profile `s` compiled by the build `header` names is kept in the
/// shared cache `dir` (made 0700 if missing), or None if `dir` is not fit
/// to trust: not a directory of the caller's, or writable by group or
/// others. Each build has its own files, so two builds sharing a root do
/// not replace each other's.
fn shared_path(header: &[u8], profile: &[u8], dir: &std::path::Path) -> Option<std::path::PathBuf> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    let meta = std::fs::symlink_metadata(dir).ok()?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return None;
    }
    // The name only spreads profiles over files; a hit is checked against
    // the whole profile kept in the file.
    let mut h = std::hash::DefaultHasher::new();
    header.hash(&mut h);
    profile.hash(&mut h);
    Some(dir.join(format!("{:016x}.bpf", h.finish())))
}

/// How every cache file starts, whatever build wrote it; a new layout gets
/// a new number.
const CACHE_MAGIC: &str = "tinyrun-seccomp-cache 2";

/// The first line of a cache file written by this build, or None when the
/// build can't be told apart from another (no build id; no libseccomp
/// version): then nothing is cached.
fn cache_header() -> Option<&'static [u8]> {
    static HEADER: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    HEADER
        .get_or_init(|| Some(header_for(env!("CARGO_PKG_VERSION"), &crate::sys::build_id()?, &libseccomp_version()?)))
        .as_deref()
}

/// The header line of tinyrun `version` with linker build id `build_id`,
/// linked with libseccomp `libseccomp`: everything that decides which
/// program a profile compiles to, besides the profile.
fn header_for(version: &str, build_id: &[u8], libseccomp: &str) -> Vec<u8> {
    let id: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    format!("{CACHE_MAGIC} tinyrun {version} build {id} libseccomp {libseccomp}\n").into_bytes()
}

/// Removes the cache files of `dir` that another build (or layout) wrote.
/// Best effort: a file left is only never read.
fn prune_other_builds(dir: &std::path::Path, header: &[u8]) {
    use std::io::Read;
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for path in entries.filter_map(|e| Some(e.ok()?.path())) {
        if path.extension().is_none_or(|x| x != "bpf") {
            continue;
        }
        let mut start = vec![0u8; header.len()];
        let Ok(n) = std::fs::File::open(&path).and_then(|mut f| f.read(&mut start)) else { continue };
        // Only files of ours (any layout, any build) that are not this
        // build's.
        if start[..n].starts_with(b"tinyrun-seccomp-cache ") && start[..n] != *header {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The version of the libseccomp linked in, e.g. `2.5.4`.
pub fn libseccomp_version() -> Option<String> {
    libseccomp::ScmpVersion::current().ok().map(|v| format!("{}.{}.{}", v.major, v.minor, v.micro))
}

/// The architecture names tinyrun accepts, limited to those the linked
/// libseccomp knows. (Whether one can join a filter for this host is
/// another matter: libseccomp refuses to mix byte orders.)
pub(crate) fn archs() -> Vec<&'static str> {
    let known = |a: ScmpArch| {
        let Ok(mut ctx) = ScmpFilterContext::new(ScmpAction::Allow) else { return false };
        ctx.remove_arch(ScmpArch::native()).is_ok() && ctx.add_arch(a).is_ok()
    };
    ARCHS.iter().filter(|(_, a)| known(*a)).map(|(n, _)| *n).collect()
}

/// The [`KNOWN_FLAGS`] this kernel accepts (TSYNC always: it has nothing to
/// do for a single-threaded init).
pub(crate) fn supported_flags() -> Vec<&'static str> {
    KNOWN_FLAGS.iter().copied().filter(|f| compile::flag_bits(f).is_some_and(flag_supported)).collect()
}

fn flag_supported(bits: u32) -> bool {
    bits == 0 || crate::sys::seccomp::flags_supported(bits)
}

/// A better message than serde's for an unknown action, operator,
/// architecture or flag: the field that holds it and what is accepted.
/// `config` is the raw config.json that failed to parse.
pub(crate) fn diagnose(config: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(config).ok()?;
    let s = v.get("linux")?.get("seccomp")?;
    let bad = |field: String, what: &str, value: &serde_json::Value, known: &[&str]| -> Option<String> {
        let name = value.as_str()?;
        (!known.contains(&name))
            .then(|| format!("{field}: unknown seccomp {what} {name:?} (known: {})", known.join(", ")))
    };
    let archs: Vec<&str> = ARCHS.iter().map(|(n, _)| *n).collect();
    let list = |key: &str| s.get(key).and_then(|x| x.as_array()).cloned().unwrap_or_default();
    if let Some(m) =
        s.get("defaultAction").and_then(|a| bad("linux.seccomp.defaultAction".into(), "action", a, ACTIONS))
    {
        return Some(m);
    }
    for (i, a) in list("architectures").iter().enumerate() {
        if let Some(m) = bad(format!("linux.seccomp.architectures[{i}]"), "architecture", a, &archs) {
            return Some(m);
        }
    }
    for (i, f) in list("flags").iter().enumerate() {
        if let Some(m) = bad(format!("linux.seccomp.flags[{i}]"), "flag", f, KNOWN_FLAGS) {
            return Some(m);
        }
    }
    for (i, call) in list("syscalls").iter().enumerate() {
        if let Some(m) =
            call.get("action").and_then(|a| bad(format!("linux.seccomp.syscalls[{i}].action"), "action", a, ACTIONS))
        {
            return Some(m);
        }
        let args = call.get("args").and_then(|x| x.as_array()).cloned().unwrap_or_default();
        for (j, arg) in args.iter().enumerate() {
            let field = format!("linux.seccomp.syscalls[{i}].args[{j}].op");
            if let Some(m) = arg.get("op").and_then(|o| bad(field, "operator", o, OPERATORS)) {
                return Some(m);
            }
        }
    }
    None
}

/// The spec's name for an action, e.g. `SCMP_ACT_ERRNO`.
fn action_name(a: LinuxSeccompAction) -> String {
    serde_json::to_value(a).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| format!("{a:?}"))
}

/// The spec's name for a flag, e.g. `SECCOMP_FILTER_FLAG_LOG`.
fn flag_name(f: LinuxSeccompFilterFlag) -> String {
    serde_json::to_value(f).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| format!("{f:?}"))
}

fn invalid(field: impl std::fmt::Display, why: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::InvalidSpec(format!("{field}: {why}"))
}

#[cfg(test)]
mod profile_tests;
#[cfg(test)]
mod tests;
