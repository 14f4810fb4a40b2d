//! Where a container's cgroup goes: runc's rules for `linux.cgroupsPath`.
//!
//! Pure functions over the path string and the runtime's own
//! `/proc/self/cgroup`, so the rules are unit-tested without a cgroupfs.
//!
//! * cgroupfs driver: an absolute path is taken from the hierarchy's root; a
//!   relative one goes under the runtime's own cgroup (v1: the cgroup in each
//!   hierarchy, so the container's may differ per hierarchy; v2: the *parent* of the runtime's cgroup, which can't take
//!   children while it holds processes); an absent one is the relative
//!   `<id>` (runc's `c.Name = id`). `..` can never climb above the base.
//! * systemd driver (`--systemd-cgroup`): `slice:prefix:name`.

use std::path::{Component, Path, PathBuf};

/// A cgroupsPath resolved for one driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// Absolute from every hierarchy's root, e.g. `/tinyrun-test/ct1`.
    Absolute(PathBuf),
    /// Relative to the runtime's own cgroup.
    Relative(PathBuf),
    /// `slice:prefix:name` for the systemd driver.
    Systemd { slice: String, prefix: String, name: String },
}

/// Applies runc's reading of `cgroupsPath` (`None` or empty: not set).
pub(crate) fn wanted(cgroups_path: Option<&str>, id: &str, systemd: bool) -> Result<Wanted, String> {
    let given = cgroups_path.filter(|p| !p.is_empty());
    if systemd {
        // runc's default, ":runc:<id>": the empty slice is system.slice,
        // or user.slice for a rootless caller's own systemd.
        let Some(p) = given else {
            return Ok(Wanted::Systemd { slice: String::new(), prefix: "tinyrun".into(), name: id.into() });
        };
        let parts: Vec<&str> = p.split(':').collect();
        if parts.len() != 3 {
            return Err(format!(
                "linux.cgroupsPath {p:?}: with --systemd-cgroup it must look like \"slice:prefix:name\""
            ));
        }
        return Ok(Wanted::Systemd { slice: parts[0].into(), prefix: parts[1].into(), name: parts[2].into() });
    }
    let p = given.unwrap_or(id);
    if p.contains(':') && !p.starts_with('/') && p.split(':').count() == 3 {
        return Err(format!(
            "linux.cgroupsPath {p:?} looks like a systemd \"slice:prefix:name\" path: pass --systemd-cgroup, or give a path"
        ));
    }
    let clean = clean(Path::new(p));
    if Path::new(p).is_absolute() {
        Ok(Wanted::Absolute(clean))
    } else {
        let rel = clean.strip_prefix("/").unwrap_or(&clean).to_path_buf();
        if rel.as_os_str().is_empty() {
            return Err(format!("linux.cgroupsPath {p:?} names the runtime's own cgroup"));
        }
        Ok(Wanted::Relative(rel))
    }
}

/// Lexical clean rooted at `/` (Go's `filepath.Clean("/" + p)`): `..` stops
/// at the root, `.` and repeated slashes go.
pub(crate) fn clean(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// One line of `/proc/self/cgroup`: hierarchy id, controllers, path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnLine {
    pub controllers: Vec<String>,
    pub path: String,
}

/// Parses `/proc/<pid>/cgroup` text.
pub(crate) fn parse_proc_cgroup(text: &str) -> Vec<OwnLine> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let ctrls = parts.next()?;
            let path = parts.next()?;
            let controllers = ctrls.split(',').filter(|c| !c.is_empty()).map(str::to_string).collect();
            Some(OwnLine { controllers, path: path.to_string() })
        })
        .collect()
}

/// Resolves a relative path on a v2 host: under the parent of our cgroup.
pub(crate) fn under_own_v2(own: &[OwnLine], rel: &Path) -> Result<PathBuf, String> {
    let line = own.iter().find(|l| l.controllers.is_empty()).ok_or("no cgroup v2 line (0::) in /proc/self/cgroup")?;
    let parent = Path::new(&line.path).parent().unwrap_or(Path::new("/"));
    Ok(clean(&parent.join(rel)))
}

/// Resolves a relative path in one v1 hierarchy: under our own cgroup *in
/// that hierarchy*, as runc's fs driver does, so the container's cgroups
/// lie apart when ours do. `line` names the hierarchy's line of
/// `/proc/self/cgroup`: a controller (`memory`) or a named hierarchy
/// (`name=systemd`).
pub(crate) fn under_own_v1(own: &[OwnLine], line: &str, rel: &Path) -> Result<PathBuf, String> {
    let found = own.iter().find(|l| l.controllers.iter().any(|c| c == line));
    let base = found.ok_or_else(|| format!("no line for {line:?} in /proc/self/cgroup"))?;
    Ok(clean(&Path::new(&base.path).join(rel)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_relative_and_default_paths() {
        assert_eq!(wanted(Some("/a/b"), "x", false).unwrap(), Wanted::Absolute("/a/b".into()));
        assert_eq!(wanted(Some("/a/../../b/./c//"), "x", false).unwrap(), Wanted::Absolute("/b/c".into()));
        assert_eq!(wanted(Some("a/b"), "x", false).unwrap(), Wanted::Relative("a/b".into()));
        // `..` can't climb out of the base a relative path is joined to.
        assert_eq!(wanted(Some("../../a"), "x", false).unwrap(), Wanted::Relative("a".into()));
        // Absent or empty: runc's relative `<id>`.
        assert_eq!(wanted(None, "ct1", false).unwrap(), Wanted::Relative("ct1".into()));
        assert_eq!(wanted(Some(""), "ct1", false).unwrap(), Wanted::Relative("ct1".into()));
        assert!(wanted(Some(".."), "x", false).is_err());
    }

    #[test]
    fn systemd_paths_need_three_parts() {
        assert_eq!(
            wanted(Some("system.slice:docker:abc"), "x", true).unwrap(),
            Wanted::Systemd { slice: "system.slice".into(), prefix: "docker".into(), name: "abc".into() }
        );
        let e = wanted(Some("/a/b"), "x", true).unwrap_err();
        assert!(e.contains("slice:prefix:name"), "{e}");
        let e = wanted(Some("system.slice:docker:abc"), "x", false).unwrap_err();
        assert!(e.contains("--systemd-cgroup"), "{e}");
    }

    const HYBRID: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/sup/xyz\n1:cpu:/\n0::/\n";

    #[test]
    fn relative_v1_goes_under_our_cgroup_in_each_hierarchy() {
        let own = parse_proc_cgroup(HYBRID);
        assert_eq!(own[2], OwnLine { controllers: vec!["memory".into()], path: "/sup/xyz".into() });
        let at = |line| under_own_v1(&own, line, Path::new("c/d")).unwrap();
        assert_eq!(at("memory"), PathBuf::from("/sup/xyz/c/d"), "memory: under our memory cgroup");
        assert_eq!(at("pids"), PathBuf::from("/c/d"));
        assert_eq!(at("name=systemd"), PathBuf::from("/c/d"));
        let e = under_own_v1(&own, "blkio", Path::new("c")).unwrap_err();
        assert!(e.contains("blkio"), "{e}");
        let own = parse_proc_cgroup("3:cpu,cpuacct:/user/1\n2:pids:/user/2\n");
        assert_eq!(under_own_v1(&own, "cpuacct", Path::new("c")).unwrap(), PathBuf::from("/user/1/c"));
        assert_eq!(under_own_v1(&own, "pids", Path::new("c")).unwrap(), PathBuf::from("/user/2/c"));
    }

    #[test]
    fn relative_v2_goes_under_the_parent_of_our_cgroup() {
        let own = parse_proc_cgroup("0::/user.slice/session-1.scope\n");
        assert_eq!(under_own_v2(&own, Path::new("c")).unwrap(), PathBuf::from("/user.slice/c"));
        let own = parse_proc_cgroup("0::/\n");
        assert_eq!(under_own_v2(&own, Path::new("c")).unwrap(), PathBuf::from("/c"));
    }
}
