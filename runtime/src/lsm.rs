//! AppArmor profile and SELinux labels: `process.apparmorProfile`,
//! `process.selinuxLabel`, `linux.mountLabel`.
//!
//! The runtime checks, before anything is made, that the host has the LSM a
//! field asks for ([`check`]); runc fails in every such case too (for
//! AppArmor only once init tries the write, for a mount label only once the
//! `context=` mount is refused), so failing early with the field's name is
//! the same behaviour, said better. Init then asks for the profile or label
//! to take effect at its execve ([`apply`]), as runc does:
//! `exec <profile>` into `attr/apparmor/exec` (or the older `attr/exec`),
//! and the SELinux label into `attr/exec`, both under `/proc/thread-self`.
//!
//! Mount labels are not implemented: on an SELinux host `linux.mountLabel`
//! is refused rather than ignored.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;

use oci_spec::runtime::{Process, Spec};

use crate::error::{InitError, Result, RuntimeError};

/// AppArmor is on, as runc decides it: securityfs has it and the module says `Y`.
pub(crate) fn apparmor_enabled(sys: &Path) -> bool {
    sys.join("kernel/security/apparmor").exists()
        && std::fs::read(sys.join("module/apparmor/parameters/enabled")).is_ok_and(|b| b.first() == Some(&b'Y'))
}

/// SELinux is on: selinuxfs is mounted and the process has a context other
/// than `kernel` (go-selinux's `GetEnabled`).
pub(crate) fn selinux_enabled(sys: &Path, proc: &Path) -> bool {
    sys.join("fs/selinux/enforce").exists()
        && std::fs::read_to_string(proc.join("self/attr/current"))
            .is_ok_and(|c| !c.trim_end_matches(['\0', '\n']).is_empty() && c.trim_end_matches(['\0', '\n']) != "kernel")
}

fn set(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|v| !v.is_empty())
}

/// Refuses a profile or label the host can't apply. Runs in the runtime.
pub(crate) fn check(spec: &Spec) -> Result<()> {
    check_at(spec, Path::new("/sys"), Path::new("/proc"))
}

/// The same, for the process an `exec` runs.
pub(crate) fn check_process(p: &Process) -> Result<()> {
    check_process_at(Some(p), Path::new("/sys"), Path::new("/proc"))
}

fn check_process_at(process: Option<&Process>, sys: &Path, proc: &Path) -> Result<()> {
    if process.and_then(|p| set(p.apparmor_profile())).is_some() && !apparmor_enabled(sys) {
        return Err(RuntimeError::unsupported(
            "process.apparmorProfile",
            "an AppArmor profile is set, but AppArmor is not enabled on this host",
        ));
    }
    let selinux = || selinux_enabled(sys, proc);
    if process.and_then(|p| set(p.selinux_label())).is_some() && !selinux() {
        return Err(RuntimeError::unsupported(
            "process.selinuxLabel",
            "selinux label is specified in config, but selinux is disabled or not supported",
        ));
    }
    Ok(())
}

fn check_at(spec: &Spec, sys: &Path, proc: &Path) -> Result<()> {
    check_process_at(spec.process().as_ref(), sys, proc)?;
    let selinux = || selinux_enabled(sys, proc);
    if spec.linux().as_ref().and_then(|l| set(l.mount_label())).is_some() {
        let why = if selinux() {
            "SELinux mount labels are not implemented by tinyrun"
        } else {
            "a mount label is set, but SELinux is not enabled on this host"
        };
        return Err(RuntimeError::unsupported("linux.mountLabel", why));
    }
    Ok(())
}

/// Arms the AppArmor profile and the SELinux label for the next execve.
/// Runs in init, after pivot_root (the container's /proc) and before the
/// user switch and seccomp.
pub(crate) fn apply(apparmor: Option<&str>, selinux: Option<&str>) -> Result<(), InitError> {
    if let Some(profile) = apparmor.filter(|s| !s.is_empty()) {
        let attr = if Path::new("/proc/thread-self/attr/apparmor/exec").exists() {
            "/proc/thread-self/attr/apparmor/exec"
        } else {
            "/proc/thread-self/attr/exec"
        };
        write_attr(attr, &format!("exec {profile}")).map_err(|e| e.field("process.apparmorProfile"))?;
    }
    if let Some(label) = selinux.filter(|s| !s.is_empty()) {
        write_attr("/proc/thread-self/attr/exec", label).map_err(|e| e.field("process.selinuxLabel"))?;
    }
    Ok(())
}

/// Writes one LSM attribute, after checking that the file really is on
/// procfs (a mount over it must not take the write elsewhere).
fn write_attr(path: &str, value: &str) -> Result<(), InitError> {
    let fail = |op: &str, e: std::io::Error| InitError::path(op.to_string(), path, crate::sys::io_errno(&e));
    let mut f = std::fs::OpenOptions::new().write(true).open(path).map_err(|e| fail("open", e))?;
    let st = nix::sys::statfs::fstatfs(f.as_fd()).map_err(|e| InitError::path("fstatfs", path, e))?;
    if st.filesystem_type() != nix::sys::statfs::PROC_SUPER_MAGIC {
        return Err(InitError::other(format!("write {path}"), "it is not on procfs"));
    }
    f.write_all(value.as_bytes())
        .map_err(|e| InitError::value("write", format_args!("{value:?} to {path}"), crate::sys::io_errno(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(process: serde_json::Value, linux: serde_json::Value) -> Spec {
        let mut p = serde_json::json!({"args": ["sh"], "cwd": "/", "user": {"uid": 0, "gid": 0}});
        for (k, v) in process.as_object().unwrap() {
            p[k] = v.clone();
        }
        let s = serde_json::json!({"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": p, "linux": linux});
        serde_json::from_value(s).unwrap()
    }

    /// A fake /sys and /proc: AppArmor and SELinux on or off.
    fn host(apparmor: bool, selinux: bool) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let mk = |p: &str, content: &str| {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        };
        if apparmor {
            std::fs::create_dir_all(d.path().join("sys/kernel/security/apparmor")).unwrap();
            mk("sys/module/apparmor/parameters/enabled", "Y\n");
        }
        if selinux {
            mk("sys/fs/selinux/enforce", "1");
            mk("proc/self/attr/current", "system_u:system_r:unconfined_t:s0\0");
        } else {
            mk("proc/self/attr/current", "kernel\0");
        }
        d
    }

    fn check_on(h: &tempfile::TempDir, s: &Spec) -> Result<()> {
        check_at(s, &h.path().join("sys"), &h.path().join("proc"))
    }

    #[test]
    fn nothing_set_needs_nothing() {
        let s = spec(serde_json::json!({"apparmorProfile": "", "selinuxLabel": ""}), serde_json::json!({}));
        check_on(&host(false, false), &s).unwrap();
    }

    #[test]
    fn apparmor_profile_needs_apparmor() {
        let s = spec(serde_json::json!({"apparmorProfile": "docker-default"}), serde_json::json!({}));
        let e = check_on(&host(false, true), &s).unwrap_err().to_string();
        assert!(e.contains("process.apparmorProfile") && e.contains("AppArmor is not enabled"), "{e}");
        check_on(&host(true, false), &s).unwrap();
    }

    #[test]
    fn selinux_label_needs_selinux_and_mount_labels_are_refused() {
        let s = spec(serde_json::json!({"selinuxLabel": "system_u:system_r:container_t:s0"}), serde_json::json!({}));
        let e = check_on(&host(true, false), &s).unwrap_err().to_string();
        assert!(e.contains("process.selinuxLabel") && e.contains("selinux is disabled"), "{e}");
        check_on(&host(false, true), &s).unwrap();
        let s = spec(serde_json::json!({}), serde_json::json!({"mountLabel": "system_u:object_r:container_file_t:s0"}));
        let e = check_on(&host(false, false), &s).unwrap_err().to_string();
        assert!(e.contains("linux.mountLabel") && e.contains("not enabled"), "{e}");
        let e = check_on(&host(false, true), &s).unwrap_err().to_string();
        assert!(e.contains("linux.mountLabel") && e.contains("not implemented"), "{e}");
    }
}
