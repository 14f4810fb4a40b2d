//! Where a box's limits come from. Runs in the runtime process, while the
//! box's spec is written.
//!
//! Root's boxes get a cgroup of their own under `--cgroup-parent` with the
//! preset's memory, cpu and pids limits, always. An ordinary user's box
//! (module `unprivileged`) gets the same where the user has a cgroup v2
//! subtree delegated to it (systemd's `user@.service` delegates `memory
//! pids cpu`): a child cgroup under the topmost writable ancestor of its
//! own cgroup, where the runtime may move the box's init. Where there is
//! none (a cgroup v1 host, no systemd user instance) the box is refused,
//! naming what is missing, unless `--limits best-effort` asks for the
//! rlimits that still apply; the result then lists what was and was not
//! applied ([`Report`]). A limit is never reported applied that is not.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::options::{LimitsMode, SandboxOptions};

/// The controllers a box's limits need.
const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// How one box is limited.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    /// A cgroup of its own under `parent` (a cgroup path), with the
    /// preset's limits.
    Cgroup { parent: String },
    /// No cgroup: these rlimits (OCI `process.rlimits` entries), and the
    /// report to give with each result.
    Rlimits { rlimits: Vec<Value>, report: Report },
}

/// How an ordinary user's box is limited and mapped, as its results show
/// it (root's boxes have none: their limits are always enforced).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// `"enforced"` (a cgroup of its own) or `"best-effort"` (rlimits).
    pub limits: String,
    /// With best-effort: the limits that hold, each with what it covers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits_applied: Vec<String>,
    /// With best-effort: the preset's limits that do not hold, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits_not_applied: Vec<String>,
    /// `"caller-only"` when the box maps only the caller's own id (it has
    /// no subordinate ids), so the command ran as that id (0 inside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<String>,
}

impl Report {
    /// The report of a box with `plan`, if an ordinary user makes it.
    pub(crate) fn of(plan: &Plan) -> Option<Report> {
        if !crate::unprivileged::active() {
            return None;
        }
        let single = crate::unprivileged::mode() == crate::unprivileged::Mode::SingleId;
        let ids = single.then(|| "caller-only".to_string());
        Some(match plan {
            Plan::Cgroup { .. } => {
                Report { limits: "enforced".into(), limits_applied: vec![], limits_not_applied: vec![], ids }
            }
            Plan::Rlimits { report, .. } => Report { ids, ..report.clone() },
        })
    }
}

/// How a box of `opts` is limited here.
pub(crate) fn plan(opts: &SandboxOptions) -> Result<Plan> {
    if !crate::unprivileged::active() {
        return Ok(Plan::Cgroup { parent: opts.cgroup_parent.clone() });
    }
    match delegated(Path::new("/sys/fs/cgroup"), &own_cgroup()?) {
        Ok(dir) => Ok(Plan::Cgroup { parent: format!("{dir}{}", opts.cgroup_parent) }),
        Err(missing) if opts.limits == LimitsMode::BestEffort => Ok(best_effort(opts, &missing)),
        Err(missing) => Err(Error::InvalidArgument(format!(
            "an ordinary user's sandbox enforces its limits in a cgroup v2 subtree delegated to the user, and {missing}; \
             or pass --limits best-effort for rlimits only"
        ))),
    }
}

/// Makes `parent` (a plan's) and enables the box's controllers in it and
/// above it, up to the delegated subtree: the runtime makes the box's own
/// cgroup below.
pub(crate) fn prepare(parent: &str) -> Result<()> {
    if !crate::unprivileged::active() {
        return Ok(());
    }
    let fs = Path::new("/sys/fs/cgroup");
    let dir = fs.join(parent.trim_start_matches('/'));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("create", &dir, e))?;
    let enable: String = CONTROLLERS.iter().map(|c| format!("+{c} ")).collect();
    let mut at = dir.as_path();
    let mut chain = vec![at];
    while let Some(up) = at.parent().filter(|p| p.starts_with(fs) && writable(p)) {
        chain.push(up);
        at = up;
    }
    for d in chain.iter().rev() {
        let f = d.join("cgroup.subtree_control");
        std::fs::write(&f, enable.trim_end()).map_err(|e| Error::io("write", &f, e))?;
    }
    Ok(())
}

/// This process's cgroup v2 path (`0::/...` of /proc/self/cgroup).
fn own_cgroup() -> Result<String> {
    let p = Path::new("/proc/self/cgroup");
    let text = std::fs::read_to_string(p).map_err(|e| Error::io("read", p, e))?;
    Ok(text.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("").to_string())
}

/// The delegated subtree boxes go under (a cgroup path): the topmost
/// writable ancestor of `own` (this process's cgroup) under the cgroup2
/// mount `fs`, which has the box's controllers. Otherwise what is missing
/// and how to get it.
fn delegated(fs: &Path, own: &str) -> std::result::Result<String, String> {
    let controllers = fs.join("cgroup.controllers");
    if !controllers.exists() {
        return Err(format!(
            "this host has no cgroup v2 at {} (cgroup v1 or hybrid): boot with systemd.unified_cgroup_hierarchy=1, \
             as Debian 11 and later do by default",
            fs.display()
        ));
    }
    let mut top: Option<PathBuf> = None;
    let mut at = fs.join(own.trim_start_matches('/'));
    while let Some(up) = at.parent().filter(|p| p.starts_with(fs) && *p != fs && writable(p)) {
        top = Some(up.to_path_buf());
        at = up.to_path_buf();
    }
    let Some(top) = top else {
        return Err(format!(
            "none is: this process's cgroup {own} has no writable parent (with systemd: `loginctl enable-linger \
             $USER`, then run tinyrun under your user manager, e.g. `systemd-run --user --scope tinyrun sandbox ...`)"
        ));
    };
    let have = std::fs::read_to_string(top.join("cgroup.controllers")).unwrap_or_default();
    if let Some(c) = CONTROLLERS.iter().find(|c| !have.split_whitespace().any(|h| h == **c)) {
        return Err(format!(
            "the subtree delegated to you, {}, lacks the {c} controller (with systemd: `Delegate=pids memory cpu` in \
             a drop-in for user@.service, then `systemctl daemon-reload` and log in again)",
            top.display()
        ));
    }
    Ok(format!("/{}", top.strip_prefix(fs).unwrap_or(&top).display()))
}

fn writable(dir: &Path) -> bool {
    use nix::unistd::{access, AccessFlags};
    access(dir, AccessFlags::W_OK).is_ok() && access(&dir.join("cgroup.procs"), AccessFlags::W_OK).is_ok()
}

/// The rlimits a box of `opts` gets without a cgroup: each at most the
/// caller's hard limit (nothing here may raise it), and what they leave
/// out. `missing` says why there is no cgroup.
fn best_effort(opts: &SandboxOptions, missing: &str) -> Plan {
    use nix::sys::resource::Resource;
    let mut rlimits = Vec::new();
    let mut applied = Vec::new();
    let mut add = |r: Resource, name: &str, want: u64, what: &str| {
        let hard = nix::sys::resource::getrlimit(r).map_or(u64::MAX, |(_, h)| h);
        let value = want.min(hard);
        let capped = if value < want { " (the caller's hard limit)" } else { "" };
        rlimits.push(json!({"type": name, "soft": value, "hard": value}));
        applied.push(format!("{name}={value}{capped}: {what}"));
    };
    let pids = u64::try_from(opts.pids).unwrap_or(1);
    add(Resource::RLIMIT_NPROC, "RLIMIT_NPROC", pids, "processes of each user of the box");
    add(Resource::RLIMIT_AS, "RLIMIT_AS", opts.memory, "address space of each process");
    add(Resource::RLIMIT_DATA, "RLIMIT_DATA", opts.memory, "data segment of each process");
    add(Resource::RLIMIT_FSIZE, "RLIMIT_FSIZE", opts.tmpfs_size, "size of each file written");
    let mut not_applied = vec![
        format!("memory {} bytes for the box as a whole: no memory cgroup", opts.memory),
        format!("cpus {}: no cpu cgroup", opts.cpus),
        format!("pids {} for the box as a whole: no pids cgroup", opts.pids),
        "oom_killed, cpu_ms and peak_memory_bytes: not measured without a cgroup".to_string(),
    ];
    if opts.timeout < std::time::Duration::from_secs(u64::from(u32::MAX)) {
        // CPU seconds a process could use in the wall-clock limit at its
        // share of the CPU: a spinning process ends at the timeout anyway.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "positive, bounded above")]
        let secs = (opts.timeout.as_secs_f64() * opts.cpus).ceil().max(1.0) as u64;
        add(Resource::RLIMIT_CPU, "RLIMIT_CPU", secs, "CPU seconds of each process");
    } else {
        not_applied.push("RLIMIT_CPU: a launched box has no timeout of its own".to_string());
    }
    // Not an rlimit, and no cgroup's: the box's storage is a tmpfs of that
    // size in the caller's mount namespace (module `storage`).
    applied.push(format!("tmpfs-size={}: the box's files as a whole (a tmpfs of its own)", opts.tmpfs_size));
    not_applied.push(format!("why no cgroup: {missing}"));
    Plan::Rlimits {
        rlimits,
        report: Report {
            limits: "best-effort".into(),
            limits_applied: applied,
            limits_not_applied: not_applied,
            ids: None,
        },
    }
}

/// Keeps `report` in the bundle dir `bundle` for later results.
pub(crate) fn keep(bundle: &Path, report: &Report) -> Result<()> {
    let p = bundle.join(REPORT);
    let bytes = serde_json::to_vec(report).map_err(|e| Error::InvalidSpec(format!("limits report: {e}")))?;
    std::fs::write(&p, bytes).map_err(|e| Error::io("write", &p, e))
}

/// The report of the box whose bundle dir is `bundle`, if it has one.
pub(crate) fn report(bundle: &Path) -> Option<Report> {
    serde_json::from_slice(&std::fs::read(bundle.join(REPORT)).ok()?).ok()
}

const REPORT: &str = "limits.json";

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(dirs: &[&str], controllers: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("cgroup.controllers"), "cpu memory pids io").unwrap();
        for d in dirs {
            let p = t.path().join(d);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("cgroup.procs"), "").unwrap();
            std::fs::write(p.join("cgroup.controllers"), controllers).unwrap();
        }
        t
    }

    #[test]
    fn the_topmost_writable_ancestor_is_the_delegated_subtree() {
        let t = tree(&["u", "u/app.slice", "u/app.slice/run.scope"], "cpu memory pids");
        assert_eq!(delegated(t.path(), "/u/app.slice/run.scope").unwrap(), "/u");
    }

    #[test]
    fn what_is_missing_is_named() {
        let v1 = tempfile::tempdir().unwrap();
        let e = delegated(v1.path(), "/").unwrap_err();
        assert!(e.contains("no cgroup v2") && e.contains("systemd.unified_cgroup_hierarchy=1"), "{e}");
        let t = tree(&["u", "u/s"], "memory pids");
        let e = delegated(t.path(), "/u/s").unwrap_err();
        assert!(e.contains("lacks the cpu controller") && e.contains("Delegate=pids memory cpu"), "{e}");
        let e = delegated(t.path(), "/").unwrap_err();
        assert!(e.contains("enable-linger") && e.contains("systemd-run --user"), "{e}");
    }

    #[test]
    fn best_effort_never_asks_above_the_hard_limits() {
        let opts = SandboxOptions::default();
        let Plan::Rlimits { rlimits, report } = best_effort(&opts, "no v2") else { panic!("rlimits") };
        let hard = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC).unwrap().1;
        let nproc = rlimits.iter().find(|r| r["type"] == "RLIMIT_NPROC").unwrap();
        assert_eq!(nproc["hard"].as_u64().unwrap(), u64::try_from(opts.pids).unwrap().min(hard));
        assert!(report.limits_applied.iter().any(|a| a.starts_with("RLIMIT_AS=")), "{report:?}");
        assert!(report.limits_not_applied.iter().any(|a| a.contains("no memory cgroup")), "{report:?}");
        assert!(report.limits_not_applied.iter().any(|a| a.contains("why no cgroup: no v2")), "{report:?}");
        // The box's storage is a tmpfs of its own whatever its limits: its size holds.
        assert!(report.limits_applied.iter().any(|a| a.starts_with("tmpfs-size=")), "{report:?}");
        assert!(!report.limits_not_applied.iter().any(|a| a.contains("tmpfs")), "{report:?}");
        assert_eq!(report.limits, "best-effort");
    }
}
