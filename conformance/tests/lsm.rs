//! AppArmor and SELinux (runtime-spec `config.md` "Linux Process" `apparmorProfile`,
//! `selinuxLabel`; `config-linux.md` `mountLabel`): a profile or label the host can't apply
//! fails `create` and leaves nothing, as runc fails (runc 1.1.5 observed: AppArmor when init
//! writes `attr/exec` (EINVAL), SELinux label at validation, mount label when the `context=`
//! mount is refused). On a host with the LSM enabled, the profile is applied instead; that path
//! is skipped here when the host has none.

use std::path::Path;

use serde_json::Value;
use tinyrun_conformance::{require_root, skip, Runtime};

fn apparmor_on() -> bool {
    Path::new("/sys/kernel/security/apparmor").exists()
        && std::fs::read("/sys/module/apparmor/parameters/enabled").is_ok_and(|b| b.first() == Some(&b'Y'))
}

fn selinux_on() -> bool {
    Path::new("/sys/fs/selinux/enforce").exists()
}

fn refused(rt: &Runtime, field: &str, set: impl FnOnce(&mut Value)) {
    let b = rt.bundle(&["/bin/true"]);
    b.config_mut(set);
    let o = rt.create(&b).expect_err(field);
    assert_eq!(o.code(), Some(1), "{o}");
    if !rt.is_runc() {
        assert!(o.stderr.contains(field), "the error names {field}\n{o}");
    }
    rt.assert_nothing_left(&b.id);
}

#[test]
fn apparmor_profile_without_apparmor_fails() {
    require_root!();
    if apparmor_on() {
        skip!("AppArmor is enabled on this host");
    }
    let rt = Runtime::new("apparmor");
    refused(&rt, "process.apparmorProfile", |c| c["process"]["apparmorProfile"] = "tinyrun-test".into());
}

#[test]
fn selinux_label_without_selinux_fails() {
    require_root!();
    if selinux_on() {
        skip!("SELinux is enabled on this host");
    }
    let rt = Runtime::new("selinux");
    refused(&rt, "process.selinuxLabel", |c| c["process"]["selinuxLabel"] = "system_u:system_r:container_t:s0".into());
    refused(&rt, "linux.mountLabel", |c| c["linux"]["mountLabel"] = "system_u:object_r:container_file_t:s0".into());
}

/// Empty strings mean "not set" and must not fail anywhere.
#[test]
fn empty_profile_and_label_are_not_set() {
    require_root!();
    let rt = Runtime::new("lsmempty");
    let b = rt.bundle(&["/bin/true"]);
    b.config_mut(|c| {
        c["process"]["apparmorProfile"] = "".into();
        c["process"]["selinuxLabel"] = "".into();
    });
    rt.run_bundle(&b).expect_ok("empty profile and label");
    rt.assert_nothing_left(&b.id);
}

/// With AppArmor on, the container process runs under the profile (`unconfined` is always
/// loaded, so it needs no profile of our own).
#[test]
fn apparmor_profile_is_applied() {
    require_root!();
    if !apparmor_on() {
        skip!("AppArmor is not enabled on this host");
    }
    let rt = Runtime::new("apparmoron");
    let b = rt.bundle(&["/bin/cat", "/proc/self/attr/current"]);
    b.config_mut(|c| c["process"]["apparmorProfile"] = "unconfined".into());
    let o = rt.run_bundle(&b).expect_ok("run under a profile");
    assert!(o.stdout.contains("unconfined"), "{o}");
    rt.assert_nothing_left(&b.id);
}
