//! The runtime's own binary, as a container could reach it (CVE-2019-5736).
//!
//! Until its execve, every container process (init, an `exec`'d process)
//! runs tinyrun's binary inside the container: its `/proc/<pid>/exe` names
//! the host's file. A process of the container that opened it and wrote to
//! it once tinyrun had exited would replace the runtime for every later
//! container, and for the host.
//!
//! Always:
//! - those processes are born non-dumpable (the runtime sets it before the
//!   clone; they set it again after each change of credentials), so only a
//!   process holding CAP_SYS_PTRACE in the runtime's user namespace may open
//!   their `/proc/<pid>/exe`;
//! - the runtime's binary is refused as the program, directly or as a `#!`
//!   interpreter, so no container process ever runs it by its own choice.
//!
//! And when some process that can see them might hold that capability, the
//! binary they run is one nobody can write: the runtime first re-executes
//! itself ([`reexec_sealed`]) from a read-only bind mount of its binary that
//! no mount namespace contains (as runc 1.2 does, without a copy), or,
//! without the privilege to mount, from a sealed memfd copy. That costs one
//! more execve of tinyrun, about a millisecond, so it is paid only then:
//! - `create`/`run`: init does not get a pid namespace of its own (it joins
//!   one, or shares the host's: who else is there is unknown), or the
//!   container shares the runtime's user namespace and CAP_SYS_PTRACE is in
//!   its bounding set;
//! - `exec`: the container has no pid namespace of its own, or CAP_SYS_PTRACE
//!   is in a bounding set of its init or of any process exec'd into it so
//!   far, without a user namespace of its own.
//!
//! A binary that is read-only already (installed on a read-only
//! filesystem) needs nothing.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStringExt;

use caps::Capability;
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use crate::capabilities::Sets;
use crate::error::{Result, RuntimeError, SysError};
use crate::sys;

/// Set in the environment of the re-executed runtime: a second attempt
/// means the copy did not come out read-only, and must not loop.
const REEXECUTED: &str = "TINYRUN_SEALED_EXE";

/// Whether processes made from the current binary can't be used to write
/// it: it is on a read-only mount, or a memfd sealed against writes.
pub(crate) fn is_sealed() -> bool {
    let Ok(exe) = std::fs::File::open("/proc/self/exe") else { return false };
    if nix::sys::statvfs::fstatvfs(&exe).is_ok_and(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY)) {
        return true;
    }
    sys::seals(&exe) & libc::F_SEAL_WRITE != 0
}

/// Whether a process with these capabilities, in the runtime's user
/// namespace unless `other_user_ns`, could open a non-dumpable process's
/// `/proc/<pid>/exe`.
pub(crate) fn could_ptrace_runtime(caps: &Sets, other_user_ns: bool) -> bool {
    !other_user_ns && caps.bounding.contains(&Capability::CAP_SYS_PTRACE)
}

/// The container gets a user namespace other than the runtime's (a new
/// one, or one joined by a path that is not ours).
pub(crate) fn other_user_ns(spec: &Spec) -> bool {
    namespaces(spec).iter().any(|n| {
        n.typ() == LinuxNamespaceType::User
            && n.path().as_deref().is_none_or(|p| !crate::namespaces::is_own_path(LinuxNamespaceType::User, p))
    })
}

fn namespaces(spec: &Spec) -> Vec<oci_spec::runtime::LinuxNamespace> {
    spec.linux().as_ref().and_then(|l| l.namespaces().clone()).unwrap_or_default()
}

/// `create` needs a sealed binary: init will not be alone in a pid
/// namespace of its own, or the container's processes may hold
/// CAP_SYS_PTRACE over the runtime.
pub(crate) fn needed_for_create(spec: &Spec) -> Result<bool> {
    let own_pid = namespaces(spec).iter().any(|n| n.typ() == LinuxNamespaceType::Pid && n.path().is_none());
    let caps = Sets::from_spec(spec.process().as_ref().and_then(|p| p.capabilities().as_ref()))?;
    Ok(!own_pid || could_ptrace_runtime(&caps, other_user_ns(spec)))
}

/// Fails with [`RuntimeError::NeedsSealedBinary`] when `needed` and the
/// current binary is writable.
pub(crate) fn require_sealed(needed: bool) -> Result<()> {
    if needed && !is_sealed() {
        return Err(RuntimeError::NeedsSealedBinary);
    }
    Ok(())
}

/// Re-executes this program, with the same arguments and environment, from
/// a copy of its binary that can't be written: a detached read-only bind
/// mount of it, or a sealed memfd copy without the privilege to mount.
/// Returns only on failure. The caller's file-descriptor limit is restored
/// first (the re-executed runtime raises it again).
///
/// # Preconditions
/// Nothing has been read from stdin that the re-executed program needs.
pub fn reexec_sealed() -> Result<std::convert::Infallible> {
    if std::env::var_os(REEXECUTED).is_some() {
        return Err(RuntimeError::Sys(SysError::new(
            "re-execute from a sealed binary",
            "/proc/self/exe",
            nix::errno::Errno::EROFS,
        )));
    }
    let sealed = sealed_copy()?;
    let argv = cstrings(std::env::args_os());
    let mut env: Vec<OsString> = std::env::vars_os()
        .map(|(k, v)| {
            let mut kv = k;
            kv.push("=");
            kv.push(v);
            kv
        })
        .collect();
    env.push(format!("{REEXECUTED}=1").into());
    let envp = cstrings(env);
    crate::rlimits::restore_caller_nofile();
    let argv: Vec<&std::ffi::CStr> = argv.iter().map(|a| a.as_c_str()).collect();
    let envp: Vec<&std::ffi::CStr> = envp.iter().map(|a| a.as_c_str()).collect();
    let errno = sys::execveat_fd(&sealed, &argv, &envp);
    Err(RuntimeError::Sys(SysError::new("execveat", "the sealed runtime binary", errno)))
}

fn cstrings(items: impl IntoIterator<Item = OsString>) -> Vec<CString> {
    items.into_iter().filter_map(|s| CString::new(s.into_vec()).ok()).collect()
}

/// An fd on a read-only copy of our binary.
fn sealed_copy() -> Result<std::os::fd::OwnedFd> {
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const MOUNT_ATTR_NOSUID: u64 = 0x2;
    const MOUNT_ATTR_NODEV: u64 = 0x4;
    match sys::open_tree_clone(c"/proc/self/exe") {
        Ok(tree) => {
            sys::mount_setattr(&tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, false)?;
            Ok(tree)
        }
        // Not allowed to mount here (rootless): copy into sealed memory.
        Err(e) if e.errno == nix::errno::Errno::EPERM => {
            let exe =
                std::fs::File::open("/proc/self/exe").map_err(|e| RuntimeError::io("open", "/proc/self/exe", e))?;
            Ok(sys::memfd_sealed_copy(&exe)?)
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sys_ptrace_in_our_user_namespace_counts() {
        let mut caps = Sets::default();
        assert!(!could_ptrace_runtime(&caps, false));
        caps.bounding.insert(Capability::CAP_SYS_ADMIN);
        assert!(!could_ptrace_runtime(&caps, false));
        caps.bounding.insert(Capability::CAP_SYS_PTRACE);
        assert!(could_ptrace_runtime(&caps, false));
        assert!(!could_ptrace_runtime(&caps, true), "held in another user namespace");
    }

    #[test]
    fn a_sealed_memfd_copy_cannot_be_written() {
        use std::io::Write;
        let exe = std::fs::File::open("/proc/self/exe").unwrap();
        let copy = sys::memfd_sealed_copy(&exe).unwrap();
        assert_ne!(sys::seals(&copy) & libc::F_SEAL_WRITE, 0);
        assert_eq!(
            std::fs::metadata(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&copy))).unwrap().len(),
            exe.metadata().unwrap().len()
        );
        // Reopened for writing through /proc, as an attacker holding it would: writes are refused.
        let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&copy));
        let mut w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert_eq!(w.write(b"x").unwrap_err().raw_os_error(), Some(libc::EPERM));
    }
}
