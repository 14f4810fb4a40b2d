//! `linux.uidMappings` and `gidMappings`: written by the runtime into a new
//! user namespace's `uid_map` and `gid_map`.
//!
//! Root writes any map. A caller without CAP_SETUID over the host ids (a
//! rootless user) may write only a single line mapping its own id, and for
//! `gid_map` only after denying `setgroups`; for anything more it asks the
//! set-uid helpers `newuidmap`/`newgidmap`, which grant the ranges
//! `/etc/subuid` and `/etc/subgid` give it. The ranges are checked here
//! first, so a config asking for ids that are not the caller's fails with
//! an error naming the field, and the helpers only ever see ranges the
//! caller owns. As runc does, the direct write is tried first and the
//! helper used only when the kernel refuses it (EPERM).
//!
//! An unprivileged caller can open `/proc/<pid>/uid_map` only while the
//! child is dumpable (a non-dumpable process's /proc files belong to root);
//! init makes itself dumpable just for this (see [`needs_dumpable_child`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::unistd::Pid;
use oci_spec::runtime::{LinuxIdMapping, Spec};

use crate::error::{RuntimeError, SysError};
use crate::sys;

type Result<T> = std::result::Result<T, RuntimeError>;

/// Whether init must be dumpable while its maps are written: the runtime is
/// not root of the initial user namespace, so it cannot open a
/// non-dumpable process's /proc files (nor can the set-uid helpers check
/// that it owns the process).
pub(crate) fn needs_dumpable_child() -> bool {
    !nix::unistd::geteuid().is_root() || in_user_namespace()
}

/// Whether this process runs in a user namespace other than the initial one.
pub(crate) fn in_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"])
        .unwrap_or(false)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Uid,
    Gid,
}

impl Kind {
    fn file(self) -> &'static str {
        match self {
            Kind::Uid => "uid_map",
            Kind::Gid => "gid_map",
        }
    }
    fn field(self) -> &'static str {
        match self {
            Kind::Uid => "linux.uidMappings",
            Kind::Gid => "linux.gidMappings",
        }
    }
    fn helper(self) -> &'static str {
        match self {
            Kind::Uid => "newuidmap",
            Kind::Gid => "newgidmap",
        }
    }
    fn subid_file(self) -> &'static str {
        match self {
            Kind::Uid => "/etc/subuid",
            Kind::Gid => "/etc/subgid",
        }
    }
    fn own(self) -> u32 {
        match self {
            Kind::Uid => nix::unistd::geteuid().as_raw(),
            Kind::Gid => nix::unistd::getegid().as_raw(),
        }
    }
}

/// Writes `pid`'s uid and gid maps from the config.
pub(crate) fn write(pid: Pid, spec: &Spec) -> Result<()> {
    let linux = spec.linux().as_ref();
    let uid = linux.and_then(|l| l.uid_mappings().as_deref()).unwrap_or_default();
    let gid = linux.and_then(|l| l.gid_mappings().as_deref()).unwrap_or_default();
    let rootless = !nix::unistd::geteuid().is_root();
    if rootless && !gid.is_empty() && is_only_own(gid, Kind::Gid) {
        // The kernel takes an unprivileged gid_map only with setgroups
        // denied (runc does the same, for this map only).
        write_file(pid, "setgroups", "deny")?;
    }
    write_map(pid, uid, Kind::Uid, rootless)?;
    write_map(pid, gid, Kind::Gid, rootless)
}

fn is_only_own(maps: &[LinuxIdMapping], kind: Kind) -> bool {
    matches!(maps, [m] if m.container_id() == 0 && m.size() == 1 && m.host_id() == kind.own())
}

fn write_map(pid: Pid, maps: &[LinuxIdMapping], kind: Kind, rootless: bool) -> Result<()> {
    if maps.is_empty() {
        return Ok(());
    }
    let text: String = maps.iter().map(|m| format!("{} {} {}\n", m.container_id(), m.host_id(), m.size())).collect();
    match write_file(pid, kind.file(), &text) {
        Err(RuntimeError::Sys(e)) if rootless && e.errno == nix::errno::Errno::EPERM => {
            check_owned(maps, kind, &owned_ranges(kind)?)?;
            run_helper(pid, maps, kind)
        }
        r => r,
    }
}

fn write_file(pid: Pid, file: &str, text: &str) -> Result<()> {
    let path = format!("/proc/{pid}/{file}");
    // The kernel takes the whole map in a single write.
    std::fs::OpenOptions::new().write(true).open(&path).and_then(|mut f| f.write_all(text.as_bytes())).map_err(|e| {
        RuntimeError::Sys(SysError::new(
            "write",
            format_args!("{path} ({})", text.trim().replace('\n', "; ")),
            sys::io_errno(&e),
        ))
    })
}

/// The host ids the caller may map: its own, and its subordinate ranges.
fn owned_ranges(kind: Kind) -> Result<Vec<(u64, u64)>> {
    let own = kind.own();
    let mut out = vec![(u64::from(own), 1)];
    let name = nix::unistd::User::from_uid(nix::unistd::geteuid()).ok().flatten().map(|u| u.name);
    let text = match std::fs::read_to_string(kind.subid_file()) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(RuntimeError::io("read", kind.subid_file(), e)),
    };
    out.extend(parse_subids(&text, &nix::unistd::geteuid().as_raw().to_string(), name.as_deref()));
    Ok(out)
}

/// The `start:count` ranges of `/etc/subuid`-style `text` for the user
/// named `name` or numbered `uid`.
fn parse_subids(text: &str, uid: &str, name: Option<&str>) -> Vec<(u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let (who, start, count) = (f.next()?, f.next()?, f.next()?);
            if f.next().is_some() || !(who == uid || Some(who) == name) {
                return None;
            }
            Some((start.parse::<u64>().ok()?, count.parse::<u64>().ok()?))
        })
        .filter(|(_, c)| *c > 0)
        .collect()
}

/// Each mapping's host range must lie inside one owned range.
fn check_owned(maps: &[LinuxIdMapping], kind: Kind, owned: &[(u64, u64)]) -> Result<()> {
    for m in maps {
        let (start, size) = (u64::from(m.host_id()), u64::from(m.size()));
        let inside = size > 0 && owned.iter().any(|(s, c)| start >= *s && start + size <= s + c);
        if !inside {
            let have = owned.iter().map(|(s, c)| format!("{s}-{}", s + c - 1)).collect::<Vec<_>>().join(", ");
            return Err(RuntimeError::InvalidSpec(format!(
                "{}: host ids {start}-{} are not the caller's: it may map {have} (its own id and {})",
                kind.field(),
                start + size.max(1) - 1,
                kind.subid_file()
            )));
        }
    }
    Ok(())
}

/// The helper on `PATH`, as runc finds it.
fn helper_path(kind: Kind) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(kind.helper()))
        .find(|p| nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::X_OK).is_ok())
}

fn run_helper(pid: Pid, maps: &[LinuxIdMapping], kind: Kind) -> Result<()> {
    let Some(tool) = helper_path(kind) else {
        return Err(RuntimeError::InvalidSpec(format!(
            "{}: mapping more than the caller's own id needs {} (Debian: the uidmap package), which is not on PATH",
            kind.field(),
            kind.helper()
        )));
    };
    let mut cmd = Command::new(&tool);
    cmd.arg(pid.to_string());
    for m in maps {
        cmd.args([m.container_id().to_string(), m.host_id().to_string(), m.size().to_string()]);
    }
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| RuntimeError::io("run", &tool, e))?;
    if out.status.success() {
        return Ok(());
    }
    Err(RuntimeError::InvalidSpec(format!(
        "{}: {} {pid} failed ({}): {}",
        kind.field(),
        Path::new(&tool).display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// The user namespace [`enter_own`] made and entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnUserns {
    /// How many subordinate ids it maps from `at` on (0: only the
    /// caller's own id, as 0).
    pub subordinate: u32,
}

/// Makes a user namespace that maps the caller's uid and gid to 0 and, if
/// `/etc/subuid` and `/etc/subgid` give it ranges, as many of those ids as
/// both have from id `at` on (through `newuidmap`/`newgidmap`), and moves
/// this process into it as its root: every id it then writes or maps is
/// one of the caller's own. Without a range, only the caller's id is
/// mapped (and `setgroups` is denied, as the kernel wants for that map).
///
/// # Preconditions
/// The caller is single-threaded (the kernel moves no other process into a
/// user namespace), and not root of the initial user namespace.
pub fn enter_own(at: u32) -> Result<OwnUserns> {
    let count = |k: Kind| -> Result<u64> { Ok(owned_ranges(k)?.iter().skip(1).map(|(_, c)| c).sum()) };
    let total = count(Kind::Uid)?.min(count(Kind::Gid)?).min(u64::from(u32::MAX - at));
    let subordinate = u32::try_from(total).unwrap_or(0);
    if let Some(kind) = [Kind::Uid, Kind::Gid].into_iter().find(|k| subordinate > 0 && helper_path(*k).is_none()) {
        return Err(RuntimeError::InvalidArgument(format!(
            "{} gives this user subordinate ids, but mapping them needs the set-uid helper {}, which is not on PATH: \
             install it (Debian: apt-get install uidmap)",
            kind.subid_file(),
            kind.helper()
        )));
    }
    let ns = sys::userns_held("the caller's own user namespace", |pid| -> Result<_> {
        if subordinate == 0 {
            write_file(pid, "setgroups", "deny")?;
            write_file(pid, "uid_map", &format!("0 {} 1", Kind::Uid.own()))?;
            write_file(pid, "gid_map", &format!("0 {} 1", Kind::Gid.own()))?;
        } else {
            for kind in [Kind::Uid, Kind::Gid] {
                let maps = own_maps(&owned_ranges(kind)?, at, subordinate);
                run_helper(pid, &maps, kind)?;
            }
        }
        Ok(sys::open_userns(pid)?)
    })?;
    become_root_of(&ns)?;
    Ok(OwnUserns { subordinate })
}

/// Moves this process into the user namespace [`enter_own`] made for
/// process `pid` (which must still be in it, and started at `start`, in
/// clock ticks after boot as /proc/<pid>/stat gives it), as its root: so
/// every command of one caller works in one namespace, the one its boxes'
/// own are children of (only there may it signal and join them).
///
/// # Preconditions
/// As for [`enter_own`].
pub fn join_own(pid: i32, start: u64, at: u32) -> Result<OwnUserns> {
    let ns = sys::open_userns(nix::unistd::Pid::from_raw(pid))?;
    // The fd is of the process we mean only if that process still runs.
    if crate::state::proc_start_time(pid) != Some((start, false)) {
        return Err(RuntimeError::NotFound(format!("process {pid} that held the caller's user namespace")));
    }
    become_root_of(&ns)?;
    let map =
        std::fs::read_to_string("/proc/self/uid_map").map_err(|e| RuntimeError::io("read", "/proc/self/uid_map", e))?;
    let subordinate = map
        .lines()
        .filter_map(|l| {
            let f: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (f.len() == 3 && f[0] >= u64::from(at)).then(|| f[2])
        })
        .sum::<u64>();
    Ok(OwnUserns { subordinate: u32::try_from(subordinate).unwrap_or(u32::MAX) })
}

/// Enters user namespace `ns` as its root (see [`enter_own`]).
fn become_root_of(ns: &std::os::fd::OwnedFd) -> Result<()> {
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWUSER)
        .map_err(|e| SysError::new("setns CLONE_NEWUSER", "the caller's own user namespace", e))?;
    // Root of the namespace in every id, and none of the caller's groups
    // (they would show as the overflow gid), unless setgroups is denied
    // (a map of the caller's id alone), which leaves nothing to drop.
    nix::unistd::setresgid(0.into(), 0.into(), 0.into()).map_err(|e| SysError::new("setresgid", "0", e))?;
    nix::unistd::setresuid(0.into(), 0.into(), 0.into()).map_err(|e| SysError::new("setresuid", "0", e))?;
    let setgroups = std::fs::read_to_string("/proc/self/setgroups").unwrap_or_default();
    if setgroups.trim() == "allow" {
        nix::unistd::setgroups(&[]).map_err(|e| SysError::new("setgroups", "[]", e))?;
    }
    // Gaining the namespace's capabilities made us non-dumpable, which
    // gives our /proc files to the host's root: we could no longer open
    // them (init conceals its command line through /proc/self/mem), nor
    // could the next command join us here. We are the caller's own
    // process, dumpable as it was.
    nix::sys::prctl::set_dumpable(true).map_err(|e| SysError::new("prctl PR_SET_DUMPABLE", "1", e))?;
    Ok(())
}

/// The map of [`enter_own`]: the caller's own id (first of `owned`) at 0,
/// then `count` ids of its other ranges, in order, from `at` on.
fn own_maps(owned: &[(u64, u64)], at: u32, count: u32) -> Vec<LinuxIdMapping> {
    let build = |c: u64, h: u64, s: u64| {
        let (c, h, s) = (u32::try_from(c).ok()?, u32::try_from(h).ok()?, u32::try_from(s).ok()?);
        oci_spec::runtime::LinuxIdMappingBuilder::default().container_id(c).host_id(h).size(s).build().ok()
    };
    let mut out: Vec<LinuxIdMapping> = owned.first().and_then(|(own, _)| build(0, *own, 1)).into_iter().collect();
    let (mut next, end) = (u64::from(at), u64::from(at) + u64::from(count));
    for (start, size) in owned.iter().skip(1) {
        let take = (*size).min(end - next);
        if take == 0 {
            break;
        }
        out.extend(build(next, *start, take));
        next += take;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::LinuxIdMappingBuilder;

    fn map(c: u32, h: u32, s: u32) -> LinuxIdMapping {
        LinuxIdMappingBuilder::default().container_id(c).host_id(h).size(s).build().unwrap()
    }

    #[test]
    fn own_maps_put_the_caller_at_0_and_its_ranges_from_at() {
        let owned = [(1001, 1), (100_000, 3000), (200_000, 65_536)];
        assert_eq!(
            own_maps(&owned, 4096, 10_000),
            vec![map(0, 1001, 1), map(4096, 100_000, 3000), map(7096, 200_000, 7000)]
        );
        assert_eq!(own_maps(&owned[..1], 4096, 0), vec![map(0, 1001, 1)]);
    }

    #[test]
    fn subid_lines_are_matched_by_name_or_number() {
        let text = "alice:100000:65536\n1001:300000:10\nbob:200000:65536\nalice:bad:1\nalice:5:0\n";
        assert_eq!(parse_subids(text, "1001", Some("alice")), vec![(100000, 65536), (300000, 10)]);
        assert_eq!(parse_subids(text, "1002", Some("carol")), vec![]);
    }

    #[test]
    fn only_owned_host_ranges_pass() {
        let owned = [(1001, 1), (100000, 65536)];
        assert!(check_owned(&[map(0, 1001, 1), map(1, 100000, 65536)], Kind::Uid, &owned).is_ok());
        let e = check_owned(&[map(0, 1001, 1), map(1, 100000, 65537)], Kind::Uid, &owned).unwrap_err().to_string();
        assert!(e.contains("linux.uidMappings: host ids 100000-165536"), "{e}");
        assert!(check_owned(&[map(0, 0, 1)], Kind::Gid, &owned).is_err(), "root's id is not the caller's");
        assert!(check_owned(&[map(0, 1000, 2)], Kind::Uid, &owned).is_err(), "straddles the caller's id");
        assert!(check_owned(&[map(0, 1001, 0)], Kind::Uid, &owned).is_err());
        // u32 arithmetic would wrap here; u64 does not.
        assert!(check_owned(&[map(0, u32::MAX, u32::MAX)], Kind::Uid, &[(u64::from(u32::MAX), 1)]).is_err());
    }
}
