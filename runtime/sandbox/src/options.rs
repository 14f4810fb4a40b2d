//! Sizes, presets and the options a sandbox is made from.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::ids::IdRange;

/// Size presets: each step roughly doubles the one before. `pids` counts
/// threads too (the kernel's tasks): each leaves a threaded program room
/// for a few hundred threads, and a fork bomb a few hundred processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// 128 MiB, a quarter of a core, 128 pids, 5 s.
    Nano,
    /// 256 MiB, half a core, 256 pids, 10 s.
    Micro,
    /// 512 MiB, one core, 512 pids, 30 s.
    Small,
    /// 1 GiB, two cores, 1024 pids, 60 s.
    Medium,
    /// 2 GiB, four cores, 2048 pids, 120 s.
    Large,
}

impl std::str::FromStr for Preset {
    type Err = Error;
    fn from_str(s: &str) -> Result<Preset> {
        Ok(match s {
            "nano" => Preset::Nano,
            "micro" => Preset::Micro,
            "small" => Preset::Small,
            "medium" => Preset::Medium,
            "large" => Preset::Large,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unknown sandbox type {s:?} (nano|micro|small|medium|large)"
                )))
            }
        })
    }
}

/// `--limits`: what an ordinary user's box does where no cgroup v2 subtree
/// is delegated to the user (module `limits`); root's boxes always have
/// their cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LimitsMode {
    /// Refuse the box, naming what is missing (the default).
    #[default]
    Enforced,
    /// Make it with the rlimits that apply, and list in each result what
    /// was and was not applied.
    BestEffort,
}

/// Everything a sandbox is made from.
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// Memory limit in bytes (swap is not allowed on top).
    pub memory: u64,
    /// CPU limit in cores (a CFS quota).
    pub cpus: f64,
    /// Most processes at once.
    pub pids: i64,
    /// Wall-clock limit; the whole process tree is killed when it passes.
    pub timeout: Duration,
    /// Size of each tmpfs (/tmp and /work).
    pub tmpfs_size: u64,
    /// A root filesystem to use instead of the host's directories.
    pub rootfs: Option<PathBuf>,
    /// An OCI bundle whose config is hardened and used instead.
    pub bundle: Option<PathBuf>,
    /// Give the box a network namespace of its own with loopback up (the
    /// default); false shares nothing either way, it only skips `lo`.
    pub loopback: bool,
    /// `--network egress`: a veth pair and NAT to the host's uplink, with
    /// the metadata and private ranges and the host itself refused (module
    /// `net`). Needs `loopback`.
    pub egress: Option<crate::net::Egress>,
    /// Extra `NAME=VALUE` variables.
    pub env: Vec<String>,
    /// Keep the root writable (an explicit loosening).
    pub writable_root: bool,
    /// Run without the seccomp allowlist (an explicit loosening).
    pub no_seccomp: bool,
    /// Most bytes of stdout and of stderr kept for `--json`.
    pub output_cap: usize,
    /// The pool each box's own range of 65536 host ids is taken from.
    pub host_ids: IdRange,
    /// `--image`: a root filesystem or OCI image layout directory (or
    /// `LAYOUT:TAG`), the read-only lower layer of the box's root.
    pub image: Option<PathBuf>,
    /// `--image-cache-size`: the most bytes the image cache keeps of layers
    /// no box uses (default: 4 GiB, or half the cache's file system if
    /// that is less).
    pub image_cache_size: Option<u64>,
    /// `--user USER[:GROUP]`: who the box's process runs as, instead of
    /// the image's `User` or the sandbox's user 1000; names are looked up
    /// in the box root's /etc/passwd and /etc/group.
    pub user: Option<String>,
    /// `--copy-in`: host files put into the box before the command runs.
    pub copy_in: Vec<CopyIn>,
    /// The cap on the bytes of all `--copy-in`s together.
    pub copy_limit: u64,
    /// `--report-writes`: the box directory whose new and changed files
    /// the result lists.
    pub report_writes: Option<PathBuf>,
    /// `launch --lifetime`: how long a launched box lives before it is
    /// terminated and purged (default: [`crate::DEFAULT_LIFETIME`]).
    pub lifetime: Option<Duration>,
    /// `launch --idle-timeout`: a launched box that no command has touched
    /// (exec, shell, cp, extend) for this long is terminated too; none if
    /// `None`.
    pub idle_timeout: Option<Duration>,
    /// `--cgroup-parent`: the cgroup each box's own cgroup is made under.
    pub cgroup_parent: String,
    /// `-i`: the command gets our stdin (otherwise /dev/null).
    pub interactive: bool,
    /// `--limits`.
    pub limits: LimitsMode,
}

/// The cgroup boxes go under unless `--cgroup-parent` says otherwise.
pub const DEFAULT_CGROUP_PARENT: &str = "/tinyrun-sandbox";

/// The smallest memory limit a box can start with: below it the kernel
/// kills the box's init while it sets itself up.
pub const MIN_MEMORY: u64 = 8 << 20;

impl Default for SandboxOptions {
    /// With no preset: 256 MiB, half a core, 64 pids, a 10 s timeout.
    fn default() -> SandboxOptions {
        SandboxOptions::preset(Preset::Micro)
    }
}

impl SandboxOptions {
    /// The sizes of `p`, everything else at its hardened default.
    pub fn preset(p: Preset) -> SandboxOptions {
        let (mib, cpus, pids, secs) = match p {
            Preset::Nano => (128, 0.25, 128, 5),
            Preset::Micro => (256, 0.5, 256, 10),
            Preset::Small => (512, 1.0, 512, 30),
            Preset::Medium => (1024, 2.0, 1024, 60),
            Preset::Large => (2048, 4.0, 2048, 120),
        };
        SandboxOptions {
            memory: mib << 20,
            cpus,
            pids,
            timeout: Duration::from_secs(secs),
            tmpfs_size: (mib << 20) / 4,
            rootfs: None,
            bundle: None,
            loopback: true,
            egress: None,
            env: Vec::new(),
            writable_root: false,
            no_seccomp: false,
            output_cap: 1 << 20,
            host_ids: IdRange::default(),
            image: None,
            image_cache_size: None,
            user: None,
            copy_in: Vec::new(),
            copy_limit: DEFAULT_COPY_LIMIT,
            report_writes: None,
            lifetime: None,
            idle_timeout: None,
            cgroup_parent: DEFAULT_CGROUP_PARENT.to_string(),
            interactive: false,
            limits: LimitsMode::Enforced,
        }
    }

    /// Lowers the CPU and memory limits to what the host has, saying what
    /// it lowered: for a preset's sizes, which name a class of box, not a
    /// machine. An explicit limit above the host is refused instead (see
    /// [`SandboxOptions::validate`]).
    pub fn fit_to_host(&mut self) -> Vec<String> {
        let host = Host::read();
        let mut notes = Vec::new();
        if self.cpus > host.cpus {
            notes.push(format!(
                "the preset's {} CPUs are more than this host's {}: the box gets {}",
                self.cpus, host.cpus, host.cpus
            ));
            self.cpus = host.cpus;
        }
        if self.memory > host.memory {
            notes.push(format!(
                "the preset's {} MiB of memory are more than this host's {} MiB: the box gets {} MiB",
                self.memory >> 20,
                host.memory >> 20,
                host.memory >> 20
            ));
            self.memory = host.memory;
        }
        notes
    }

    /// Refuses options no box could start with, or that ask for more than
    /// the host has, naming the option.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.memory < MIN_MEMORY {
            return bad(format!(
                "invalid --memory: {} bytes is below the minimum of {} MiB a box needs to start",
                self.memory,
                MIN_MEMORY >> 20
            ));
        }
        if !(self.cpus > 0.0 && self.cpus.is_finite()) {
            return bad(format!("invalid --cpus {}: must be above 0", self.cpus));
        }
        if self.pids < 1 {
            return bad(format!("invalid --pids {}: must be at least 1", self.pids));
        }
        let host = Host::read();
        if self.cpus > host.cpus {
            return bad(format!("invalid --cpus {}: this host has {} CPUs", self.cpus, host.cpus));
        }
        if self.memory > host.memory {
            return bad(format!(
                "invalid --memory: {} MiB is more than this host's {} MiB of memory",
                self.memory >> 20,
                host.memory >> 20
            ));
        }
        if let Some(e) = self.env.iter().find(|e| e.split_once('=').is_none_or(|(n, _)| n.is_empty())) {
            return bad(format!("invalid --env {e:?}: use NAME=VALUE"));
        }
        let p = &self.cgroup_parent;
        let parts_ok = p.split('/').skip(1).all(|c| !c.is_empty() && c != "." && c != "..");
        if !p.starts_with('/') || p.len() < 2 || !parts_ok || p.contains(':') {
            return bad(format!(
                "invalid --cgroup-parent {p:?}: use an absolute cgroup path such as {DEFAULT_CGROUP_PARENT}, \
                 without . or .. components"
            ));
        }
        self.check_unprivileged()
    }

    /// What an ordinary user's box can't have, refused by name; and pasta,
    /// which its `--network egress` needs.
    fn check_unprivileged(&self) -> Result<()> {
        if !crate::unprivileged::active() {
            return Ok(());
        }
        let Some(egress) = &self.egress else { return Ok(()) };
        if egress.range != crate::net::DEFAULT_RANGE {
            return Err(Error::InvalidArgument(
                "--egress-range: an ordinary user's box has no link of its own to number (pasta gives it a copy of \
                 the host's address); leave it out"
                    .into(),
            ));
        }
        crate::net::pasta::program().map(drop)
    }
}

/// What the host has, for limits that ask for more.
struct Host {
    /// Online CPUs: a quota above them limits nothing.
    cpus: f64,
    /// Physical memory, in bytes.
    memory: u64,
}

impl Host {
    fn read() -> Host {
        let cpus = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN).ok().flatten().unwrap_or(1).max(1);
        let memory = nix::sys::sysinfo::sysinfo().map_or(u64::MAX, |s| s.ram_total());
        #[allow(clippy::cast_precision_loss, reason = "a count of CPUs")]
        Host { cpus: cpus as f64, memory }
    }
}

/// `256M`, `1G`, `512k`, `1024` (bytes); binary multiples, as docker reads them.
pub fn parse_size(s: &str) -> Result<u64> {
    let bad =
        || Error::InvalidArgument(format!("invalid size {s:?}: use a positive number with an optional k/M/G/T suffix"));
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_lowercase();
            let m: u64 = match unit.trim_end_matches("ib").trim_end_matches('b') {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(bad()),
            };
            (&t[..i], m)
        }
        None => (t, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| bad())?;
    if !n.is_finite() || n <= 0.0 {
        return Err(bad());
    }
    let bytes = (n * mult as f64).round();
    if bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "positive and in range, checked above")]
    Ok(bytes as u64)
}

/// `10s`, `500ms`, `2m`, `1h30m`; a bare number means seconds.
pub fn parse_duration(s: &str) -> Result<Duration> {
    if let Ok(secs) = s.trim().parse::<f64>() {
        if secs.is_finite() && secs > 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(s.trim())
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Error::InvalidArgument(format!("invalid duration {s:?}: use e.g. 10s, 500ms, 2m")))
}

/// The default cap on the bytes of one copy (or of all `--copy-in`s of a
/// box together).
pub const DEFAULT_COPY_LIMIT: u64 = 1 << 30;
/// `--copy-in SRC:DST`: host path SRC becomes box path DST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyIn {
    /// On the host.
    pub src: PathBuf,
    /// In the box, absolute.
    pub dst: PathBuf,
}

impl std::str::FromStr for CopyIn {
    type Err = Error;

    /// `SRC:DST`, split at the last colon (a host path may have colons).
    fn from_str(s: &str) -> Result<CopyIn> {
        let bad = |why: &str| Error::InvalidArgument(format!("invalid --copy-in {s:?}: {why} (use HOSTPATH:/BOXPATH)"));
        let (src, dst) = s.rsplit_once(':').ok_or_else(|| bad("no colon"))?;
        if src.is_empty() || !dst.starts_with('/') {
            return Err(bad("the box path must be absolute"));
        }
        tinyrun::tree::components(Path::new(dst)).map_err(|e| bad(&e))?;
        Ok(CopyIn { src: src.into(), dst: dst.into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_suffixes() {
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("512k").unwrap(), 512 << 10);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12X").is_err() && parse_size("-1M").is_err() && parse_size("").is_err());
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("0s").is_err() && parse_duration("soon").is_err());
    }

    #[test]
    fn presets_double_and_default_is_micro() {
        let n = SandboxOptions::preset(Preset::Nano);
        let s = SandboxOptions::preset(Preset::Small);
        assert_eq!(n.memory, 128 << 20);
        assert_eq!(s.memory, 4 * n.memory);
        let d = SandboxOptions::default();
        assert_eq!((d.memory, d.cpus, d.pids, d.timeout), (256 << 20, 0.5, 256, Duration::from_secs(10)));
    }

    #[test]
    fn limits_above_the_host_are_refused_or_fitted() {
        let host = Host::read();
        let over = SandboxOptions { cpus: host.cpus + 1.0, ..SandboxOptions::default() };
        assert!(over.validate().unwrap_err().to_string().contains("this host has"), "cpus");
        let over = SandboxOptions { memory: host.memory.saturating_add(1 << 30), ..SandboxOptions::default() };
        assert!(over.validate().unwrap_err().to_string().contains("more than this host's"), "memory");
        let mut big = SandboxOptions { cpus: host.cpus * 4.0, ..SandboxOptions::preset(Preset::Large) };
        let notes = big.fit_to_host();
        assert!(!notes.is_empty() && big.cpus == host.cpus, "{notes:?}");
        assert!(big.validate().is_ok());
        assert!(SandboxOptions { pids: 0, ..SandboxOptions::default() }.validate().is_err());
    }
}
