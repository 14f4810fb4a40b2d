//! Which unit a container's `slice:prefix:name` names, in which systemd,
//! and where its cgroup is: runc's reading.
//!
//! * The unit is `prefix-name.scope` in `slice`, or, when the name ends in
//!   `.slice`, a slice unit of that name (the prefix unused) that wants
//!   `slice`. An empty slice is `system.slice`, or `user.slice` for the
//!   user instance.
//! * A rootless caller's units go to its own systemd (`systemd --user`,
//!   as runc's `--systemd-cgroup` does rootless), whose cgroups sit below
//!   the user manager's own, `/user.slice/user-UID.slice/user@UID.service`.
//!   The state record keeps that path (`cgroup_paths["unified"]`: the
//!   cgroup in the cgroup2 hierarchy), which also says the unit is the
//!   user instance's to later commands.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use super::dbus::Instance;

/// The key of the state record's per-hierarchy paths that holds a user
/// instance unit's cgroup.
pub(in crate::cgroups) const USER_PATH_KEY: &str = "unified";

/// The container's systemd unit, and its cgroup.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::cgroups) struct Unit {
    /// `prefix-name.scope`, or `name.slice`.
    pub(in crate::cgroups) name: String,
    /// The slice it goes in (a scope), or wants (a slice).
    pub(super) slice: String,
    /// The cgroup below the cgroup2 mount, e.g. `/system.slice/x-y.scope`.
    pub(in crate::cgroups) path: String,
    pub(super) instance: Instance,
}

impl Unit {
    /// A new container's unit; `user`: the uid whose own systemd takes it.
    pub(in crate::cgroups) fn parse(recorded: &str, user: Option<u32>) -> Result<Unit, String> {
        let (name, slice, below) = names(recorded, user.is_some())?;
        let (base, instance) = match user {
            Some(uid) => (format!("/user.slice/user-{uid}.slice/user@{uid}.service"), Instance::User),
            None => (String::new(), Instance::System),
        };
        Ok(Unit { path: format!("{base}{below}"), name, slice, instance })
    }

    /// The unit a state record names (`per`: its per-hierarchy paths).
    pub(in crate::cgroups) fn from_record(recorded: &str, per: &BTreeMap<String, String>) -> Result<Unit, String> {
        let Some(path) = per.get(USER_PATH_KEY) else { return Unit::parse(recorded, None) };
        let (name, slice, below) = names(recorded, true)?;
        let plain = Path::new(path).components().skip(1).all(|c| matches!(c, Component::Normal(_)));
        if !path.starts_with("/user.slice/") || !path.ends_with(&below) || !plain {
            return Err(format!("the record's user unit cgroup {path:?} does not fit {recorded:?}"));
        }
        Ok(Unit { path: path.clone(), name, slice, instance: Instance::User })
    }

    pub(super) fn is_slice(&self) -> bool {
        self.name.ends_with(".slice")
    }

    /// What the state record keeps beside `slice:prefix:name`.
    pub(in crate::cgroups) fn record(&self) -> BTreeMap<String, String> {
        match self.instance {
            Instance::User => [(USER_PATH_KEY.to_string(), self.path.clone())].into(),
            Instance::System => BTreeMap::new(),
        }
    }
}

/// The unit's name, its slice, and its cgroup below its manager's.
fn names(recorded: &str, user: bool) -> Result<(String, String, String), String> {
    let bad = |why: String| format!("linux.cgroupsPath {recorded:?}: {why}");
    let parts: Vec<&str> = recorded.split(':').collect();
    let [slice, prefix, name] = parts[..] else {
        return Err(bad("with --systemd-cgroup it must be \"slice:prefix:name\"".into()));
    };
    if name.is_empty() || name.contains('/') || prefix.contains('/') {
        return Err(bad("the name is empty or has a '/'".into()));
    }
    let slice = match slice {
        "" if user => "user.slice",
        "" => "system.slice",
        s => s,
    };
    let dir = expand_slice(slice).map_err(bad)?;
    if name.ends_with(".slice") {
        // systemd places a slice by the dashes in its name, not by what it
        // wants: the two must agree, or the container's slice would sit
        // elsewhere than in the slice its path names.
        let own = expand_slice(name).map_err(bad)?;
        if dir != "/" && !own.starts_with(&format!("{dir}/")) {
            return Err(bad(format!(
                "the slice {name:?} is not inside {slice:?}: systemd would place it at {own}; name it \
                 {}-...slice",
                slice.trim_end_matches(".slice")
            )));
        }
        return Ok((name.to_string(), slice.to_string(), own));
    }
    let unit = format!("{prefix}-{name}.scope");
    let path = format!("{}/{unit}", dir.trim_end_matches('/'));
    Ok((unit, slice.to_string(), path))
}

/// A slice's cgroup: `a-b.slice` is `/a.slice/a-b.slice` (systemd's rule,
/// and runc's checks of the name).
fn expand_slice(slice: &str) -> Result<String, String> {
    let bad = |why: &str| Err(format!("slice {slice:?} {why}"));
    let Some(stem) = slice.strip_suffix(".slice") else { return bad("does not end in \".slice\"") };
    if slice.contains('/') {
        return bad("has a '/'");
    }
    if stem == "-" {
        return Ok("/".into());
    }
    if stem.is_empty() || stem.contains("--") || stem.starts_with('-') || stem.ends_with('-') {
        return bad("is not a valid slice name");
    }
    let (mut path, mut prefix) = (String::new(), String::new());
    for part in stem.split('-') {
        path.push_str(&format!("/{prefix}{part}.slice"));
        prefix.push_str(&format!("{part}-"));
    }
    Ok(path)
}

/// The uid whose own systemd takes a rootless caller's units: the caller's,
/// as the host sees it (inside a user namespace, mapped out through
/// `uid_map`). `None`: the caller is root of the host, for the system
/// instance.
pub(in crate::cgroups) fn user_instance_owner() -> Option<u32> {
    if !crate::cgroups::rootless::unprivileged() {
        return None;
    }
    let euid = nix::unistd::geteuid().as_raw();
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    Some(host_uid(euid, &map).unwrap_or(euid))
}

fn host_uid(uid: u32, uid_map: &str) -> Option<u32> {
    uid_map.lines().find_map(|l| {
        let n: Vec<u32> = l.split_whitespace().filter_map(|f| f.parse().ok()).collect();
        let [inside, outside, count] = n[..] else { return None };
        (uid >= inside && uid - inside < count).then(|| outside + (uid - inside))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_name_a_scope_in_a_slice() {
        let s = Unit::parse("system.slice:tinyrun:ct1", None).unwrap();
        assert_eq!((s.name.as_str(), s.slice.as_str()), ("tinyrun-ct1.scope", "system.slice"));
        assert_eq!(s.path, "/system.slice/tinyrun-ct1.scope");
        assert_eq!(Unit::parse(":p:n", None).unwrap().path, "/system.slice/p-n.scope", "empty slice: system.slice");
        assert_eq!(Unit::parse("a-b.slice:p:n", None).unwrap().path, "/a.slice/a-b.slice/p-n.scope");
        assert_eq!(Unit::parse("-.slice:p:n", None).unwrap().path, "/p-n.scope");
        assert!(Unit::parse("a.slice:p:n", None).unwrap().record().is_empty(), "the system instance needs no more");
    }

    #[test]
    fn a_name_ending_in_slice_is_a_slice_unit_inside_its_slice() {
        let s = Unit::parse("system.slice:ignored:system-ct1.slice", None).unwrap();
        assert_eq!((s.name.as_str(), s.slice.as_str()), ("system-ct1.slice", "system.slice"));
        assert_eq!(s.path, "/system.slice/system-ct1.slice");
        assert!(s.is_slice());
        assert_eq!(Unit::parse("-.slice:p:top.slice", None).unwrap().path, "/top.slice");
        let e = Unit::parse("system.slice:p:other.slice", None).unwrap_err();
        assert!(e.contains("not inside") && e.contains("/other.slice"), "{e}");
        assert!(Unit::parse("system.slice:p:a--b.slice", None).is_err());
    }

    #[test]
    fn bad_records_are_refused_naming_the_path() {
        for bad in ["a:b", "x:p:n", "a--b.slice:p:n", "-a.slice:p:n", "a/b.slice:p:n", "s.slice:p:", "s.slice:p/q:n"] {
            let e = Unit::parse(bad, None).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn a_user_instance_unit_sits_below_the_user_manager_and_is_recorded_so() {
        let u = Unit::parse(":tinyrun:ct1", Some(1000)).unwrap();
        assert_eq!(u.slice, "user.slice", "the user instance's default slice");
        assert_eq!(u.path, "/user.slice/user-1000.slice/user@1000.service/user.slice/tinyrun-ct1.scope");
        assert_eq!(u.instance, Instance::User);
        let per = u.record();
        assert_eq!(Unit::from_record(":tinyrun:ct1", &per).unwrap(), u);
        assert_eq!(Unit::from_record("system.slice:tinyrun:ct1", &BTreeMap::new()).unwrap().instance, Instance::System);
        for bad in [
            "/system.slice/tinyrun-ct1.scope",
            "/user.slice/../x/user.slice/tinyrun-ct1.scope",
            "/user.slice/other.scope",
        ] {
            let per = [(USER_PATH_KEY.to_string(), bad.to_string())].into();
            assert!(Unit::from_record(":tinyrun:ct1", &per).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_owner_is_the_uid_outside_the_user_namespace() {
        assert_eq!(host_uid(0, "         0       1000          1\n"), Some(1000));
        assert_eq!(host_uid(5, "0 1000 1\n1 100000 65536\n"), Some(100_004));
        assert_eq!(host_uid(1000, "0 0 4294967295\n"), Some(1000));
        assert_eq!(host_uid(7, "0 1000 1\n"), None);
    }
}
