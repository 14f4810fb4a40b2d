//! The common v1 case without libcgroups' manager: device rules and a pids
//! limit, written straight to the cgroup's files (`apart` writes memory,
//! cpu and cpuset beside them).
//!
//! Nearly every container asks v1 for nothing more (a spec always carries
//! device rules; podman adds a pids limit; a sandbox adds memory and cpu).
//! Building libcgroups' v1 manager costs about 1 ms of CPU per create,
//! since it reads `/proc/self/mountinfo` and `/proc/self/cgroup` once per
//! known controller through a hardened procfs handle. Anything beyond
//! these (see [`rest`]) goes to libcgroups.
//!
//! The rules written are libcgroups' own, in its order: the spec's, then
//! the standard devices and the allowances every runtime makes (mknod of
//! anything, ptys, the console, tun), so a container sees the same device
//! cgroup on either path.

use std::path::Path;

use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType, LinuxResources};

use super::{io_err, Result};
use crate::devices::DEFAULT_DEVICES;

/// `r` less what [`apply`] writes (an empty hugepage list asks nothing).
pub(super) fn rest(r: &LinuxResources) -> LinuxResources {
    let mut rest = r.clone();
    rest.set_devices(None).set_pids(None);
    if rest.hugepage_limits().as_ref().is_some_and(Vec::is_empty) {
        rest.set_hugepage_limits(None);
    }
    rest
}

/// Writes `r`'s device rules (then the defaults) and pids limit under the
/// cgroup's `devices` and `pids` directories. No device rules at all (an
/// `update`) leaves the device cgroup alone: the defaults only matter after
/// a rule that denies them, and rewriting would deny devices for a moment.
pub(super) fn apply(r: &LinuxResources, devices_dir: &Path, pids_dir: &Path) -> Result<()> {
    let rules = r.devices().iter().flatten().cloned();
    for rule in rules.chain(r.devices().is_some().then(default_rules).into_iter().flatten()) {
        let file = devices_dir.join(if rule.allow() { "devices.allow" } else { "devices.deny" });
        write(&file, &rule.to_string())?;
    }
    if let Some(p) = r.pids() {
        // Zero or less means no limit (runtime-spec; runc and libcgroups agree).
        let limit = if p.limit() > 0 { p.limit().to_string() } else { "max".into() };
        write(&pids_dir.join("pids.max"), &limit)?;
    }
    Ok(())
}

pub(super) fn default_rules() -> impl Iterator<Item = LinuxDeviceCgroup> {
    let rule = |typ, major: Option<i64>, minor: Option<i64>, access: &str| {
        let mut d = LinuxDeviceCgroup::default();
        d.set_allow(true).set_typ(Some(typ)).set_major(major).set_minor(minor).set_access(Some(access.into()));
        d
    };
    let standard = DEFAULT_DEVICES
        .iter()
        .map(move |&(_, major, minor)| rule(LinuxDeviceType::C, Some(major as i64), Some(minor as i64), "rwm"));
    let allowances = [
        rule(LinuxDeviceType::C, None, None, "m"),
        rule(LinuxDeviceType::B, None, None, "m"),
        rule(LinuxDeviceType::C, Some(5), Some(1), "rwm"), // /dev/console
        rule(LinuxDeviceType::C, Some(136), None, "rwm"),  // /dev/pts/*
        rule(LinuxDeviceType::C, Some(5), Some(2), "rwm"), // /dev/ptmx
        rule(LinuxDeviceType::C, Some(10), Some(200), "rwm"), // /dev/net/tun
    ];
    standard.chain(allowances)
}

/// One write, as the kernel wants cgroup values: no truncation (cgroupfs
/// files can't be truncated) and no trailing newline.
fn write(file: &Path, value: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(file).map_err(io_err("open", file))?;
    f.write_all(value.as_bytes()).map_err(io_err("write", file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{LinuxMemory, LinuxPids};

    fn deny_all() -> LinuxDeviceCgroup {
        let mut d = LinuxDeviceCgroup::default();
        d.set_allow(false).set_access(Some("rwm".into()));
        d
    }

    #[test]
    fn takes_only_devices_and_pids() {
        let none = LinuxResources::default();
        let mut r = none.clone();
        assert_eq!(rest(&r), none);
        r.set_devices(Some(vec![deny_all()])).set_hugepage_limits(Some(vec![]));
        let mut pids = LinuxPids::default();
        pids.set_limit(32);
        r.set_pids(Some(pids));
        assert_eq!(rest(&r), none);
        r.set_memory(Some(LinuxMemory::default()));
        assert!(rest(&r).memory().is_some(), "any other controller block is left");
    }

    #[test]
    fn writes_spec_rules_first_then_defaults_and_pids() {
        let dir = tempfile::tempdir().unwrap();
        let (dev, pids) = (dir.path().join("devices"), dir.path().join("pids"));
        for d in [&dev, &pids] {
            std::fs::create_dir(d).unwrap();
        }
        // Regular files stand in for cgroupfs ones: each write lands at
        // offset 0, so what is checked is the last rule written to each.
        for f in ["devices.allow", "devices.deny"] {
            std::fs::write(dev.join(f), "").unwrap();
        }
        std::fs::write(pids.join("pids.max"), "").unwrap();
        let mut r = LinuxResources::default();
        r.set_devices(Some(vec![deny_all()]));
        let mut p = LinuxPids::default();
        p.set_limit(0);
        r.set_pids(Some(p));
        apply(&r, &dev, &pids).unwrap();
        assert_eq!(std::fs::read_to_string(dev.join("devices.deny")).unwrap(), "a *:* rwm");
        // The last rule written is the tun allowance.
        assert!(std::fs::read_to_string(dev.join("devices.allow")).unwrap().starts_with("c 10:200 rwm"));
        assert_eq!(std::fs::read_to_string(pids.join("pids.max")).unwrap(), "max");
    }

    #[test]
    fn no_rules_leave_the_device_cgroup_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = LinuxResources::default();
        let mut p = LinuxPids::default();
        p.set_limit(7);
        r.set_pids(Some(p));
        std::fs::write(dir.path().join("pids.max"), "").unwrap();
        // No devices.* files exist: a write to one would fail.
        apply(&r, dir.path(), dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("pids.max")).unwrap(), "7");
    }

    #[test]
    fn default_rules_match_the_standard_devices() {
        let rules: Vec<String> = default_rules().map(|r| r.to_string()).collect();
        for want in ["c 1:3 rwm", "c 1:9 rwm", "c 5:0 rwm", "c *:* m", "b *:* m", "c 136:* rwm", "c 5:2 rwm"] {
            assert!(rules.iter().any(|r| r == want), "{want} missing from {rules:?}");
        }
    }

    #[test]
    fn a_missing_file_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = LinuxResources::default();
        r.set_devices(Some(vec![]));
        let e = apply(&r, &dir.path().join("nope"), dir.path()).unwrap_err().to_string();
        assert!(e.contains("nope/devices.allow"), "{e}");
    }
}
