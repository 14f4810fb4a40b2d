//! Which namespaces a container gets, and how each is made or joined.
//!
//! Runs in two places. The runtime process builds a [`Plan`] and opens every
//! namespace path up front (so a bad path is an error before anything
//! exists); it also joins a pid or time namespace given by path itself,
//! because those only take effect for children. The cloned child then
//! [`Plan::enter`]s the rest ([`join_all`]): each joined namespace other
//! than the user one with the runtime's credentials where the kernel allows
//! it, the user namespace, then the namespaces that needed it; new
//! namespaces are made once the user namespace is entered, so it owns them.
//!
//! Fast path (no namespace joined by path, or no new user namespace): one
//! `clone3` makes every new namespace at once. Otherwise the child joins,
//! unshares, and, when a new pid namespace must be owned by a user namespace
//! it entered itself, forks once more (`CLONE_PARENT`) so that the real init
//! is the first process of that pid namespace.

use std::os::fd::OwnedFd;
use std::path::Path;

use nix::fcntl::OFlag;

use nix::sched::CloneFlags;
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use crate::error::{InitError, Result, RuntimeError, SysError};
use crate::sys::fs::open_path;

/// The clone flag of a namespace type.
pub(crate) fn flag(t: LinuxNamespaceType) -> CloneFlags {
    match t {
        LinuxNamespaceType::Mount => CloneFlags::CLONE_NEWNS,
        LinuxNamespaceType::Cgroup => CloneFlags::CLONE_NEWCGROUP,
        LinuxNamespaceType::Uts => CloneFlags::CLONE_NEWUTS,
        LinuxNamespaceType::Ipc => CloneFlags::CLONE_NEWIPC,
        LinuxNamespaceType::User => CloneFlags::CLONE_NEWUSER,
        LinuxNamespaceType::Pid => CloneFlags::CLONE_NEWPID,
        LinuxNamespaceType::Network => CloneFlags::CLONE_NEWNET,
        LinuxNamespaceType::Time => CloneFlags::from_bits_retain(libc::CLONE_NEWTIME),
    }
}

/// A namespace to join, opened by the runtime.
pub(crate) struct Join {
    pub typ: LinuxNamespaceType,
    pub fd: OwnedFd,
}

/// Everything about namespaces that create needs, decided before cloning.
pub(crate) struct Plan {
    /// Namespaces `clone3` makes.
    pub clone_flags: CloneFlags,
    /// Namespaces the child unshares after joining (slow path, and cgroup).
    pub unshare_flags: CloneFlags,
    /// Whether the child must `unshare(CLONE_NEWUSER)` itself and then ask
    /// for its id maps.
    pub child_unshares_user: bool,
    /// Joined by the child, user first.
    pub joins: Vec<Join>,
    /// pid/time namespace joined by the runtime around the clone.
    pub parent_joins: Vec<Join>,
    /// A second fork is needed so init lands in a pid namespace made late.
    pub needs_second_fork: bool,
    /// What's requested as new, by type.
    pub new: Vec<LinuxNamespaceType>,
}

impl Plan {
    pub(crate) fn new(spec: &Spec) -> Result<Plan> {
        let nss = spec.linux().as_ref().and_then(|l| l.namespaces().clone()).unwrap_or_default();
        let mut new = Vec::new();
        let mut joins = Vec::new();
        let mut parent_joins = Vec::new();
        for ns in &nss {
            match ns.path() {
                None => new.push(ns.typ()),
                Some(path) => {
                    let fd = open_path(path, OFlag::O_RDONLY).map_err(|e| {
                        RuntimeError::InvalidSpec(format!("linux.namespaces: {} namespace: {e}", ns.typ()))
                    })?;
                    let j = Join { typ: ns.typ(), fd };
                    if matches!(ns.typ(), LinuxNamespaceType::Pid | LinuxNamespaceType::Time) {
                        parent_joins.push(j);
                    } else {
                        joins.push(j);
                    }
                }
            }
        }
        // The user namespace first in the list; see join_all for the order
        // they are joined in.
        joins.sort_by_key(|j| j.typ != LinuxNamespaceType::User);

        let new_user = new.contains(&LinuxNamespaceType::User);
        let joins_user = joins.iter().any(|j| j.typ == LinuxNamespaceType::User);
        let slow = joins_user || (new_user && !joins.is_empty());
        let mut clone_flags = CloneFlags::empty();
        let mut unshare_flags = CloneFlags::empty();
        for t in &new {
            match t {
                // The cgroup namespace is rooted where init is when it's made,
                // so init makes it only once it has joined its cgroup.
                LinuxNamespaceType::Cgroup => {}
                // Time offsets must be written before anyone enters the
                // namespace: the runtime unshares it for its children.
                LinuxNamespaceType::Time => {}
                LinuxNamespaceType::User if slow => {}
                LinuxNamespaceType::Pid if slow => {}
                t if slow => unshare_flags |= flag(*t),
                t => clone_flags |= flag(*t),
            }
        }
        let new_pid = new.contains(&LinuxNamespaceType::Pid);
        Ok(Plan {
            clone_flags,
            unshare_flags,
            child_unshares_user: slow && new_user,
            joins,
            parent_joins,
            needs_second_fork: slow && new_pid,
            new,
        })
    }

    pub(crate) fn is_new(&self, t: LinuxNamespaceType) -> bool {
        self.new.contains(&t)
    }

    pub(crate) fn user_ns(&self) -> bool {
        self.is_new(LinuxNamespaceType::User) || self.joins.iter().any(|j| j.typ == LinuxNamespaceType::User)
    }

    /// The container gets a mount namespace other than the runtime's, new
    /// or joined. Without one, nothing may change the host's root or its
    /// propagation (see `rootfs::Options::own_mount_ns`).
    pub(crate) fn own_mount_ns(&self) -> bool {
        self.is_new(LinuxNamespaceType::Mount)
            || self.joins.iter().any(|j| j.typ == LinuxNamespaceType::Mount && !is_own(&j.fd, "mnt"))
    }

    /// The container gets a user namespace other than the runtime's: what
    /// its processes hold, they hold there, not over the runtime.
    pub(crate) fn other_user_ns(&self) -> bool {
        self.is_new(LinuxNamespaceType::User)
            || self.joins.iter().any(|j| j.typ == LinuxNamespaceType::User && !is_own(&j.fd, "user"))
    }
}

/// Whether `path` names the namespace of type `t` this process is in. A
/// path that can't be read is not (it fails later, naming it).
pub(crate) fn is_own_path(t: LinuxNamespaceType, path: &Path) -> bool {
    let own = format!("/proc/self/ns/{}", proc_name(t));
    match (nix::sys::stat::stat(path), nix::sys::stat::stat(own.as_str())) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

/// Whether `fd` is the namespace `name` this process is in.
pub(crate) fn is_own(fd: &OwnedFd, name: &str) -> bool {
    let own = nix::sys::stat::stat(format!("/proc/self/ns/{name}").as_str());
    match (nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(fd)), own) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

/// The namespace's name under /proc/<pid>/ns.
pub(crate) fn proc_name(t: LinuxNamespaceType) -> &'static str {
    match t {
        LinuxNamespaceType::Mount => "mnt",
        LinuxNamespaceType::Cgroup => "cgroup",
        LinuxNamespaceType::Uts => "uts",
        LinuxNamespaceType::Ipc => "ipc",
        LinuxNamespaceType::User => "user",
        LinuxNamespaceType::Pid => "pid",
        LinuxNamespaceType::Network => "net",
        LinuxNamespaceType::Time => "time",
    }
}

/// `setns(2)` naming the namespace type in the error.
pub(crate) fn setns(j: &Join) -> Result<(), SysError> {
    nix::sched::setns(&j.fd, flag(j.typ)).map_err(|e| SysError::new("setns", format_args!("{} namespace", j.typ), e))
}

/// Joins `joins` (the user namespace first in the list), in the child.
/// Every other namespace is tried first with the caller's credentials: a
/// privileged runtime may then join one that the user namespace it also
/// joins has no power over (a pod's network namespace, owned by the host's
/// user namespace, shared with containers in a user namespace of the
/// pod's). One refused with EPERM there (a rootless runtime has privilege
/// only inside the user namespace) is joined again once the user namespace
/// is, as runc 1.2 does; `after_user` runs right after that join. No
/// allocation: this runs between clone and execve.
pub(crate) fn join_all(joins: &[Join], after_user: impl FnOnce() -> Result<(), InitError>) -> Result<(), InitError> {
    let is_user = |j: &Join| j.typ == LinuxNamespaceType::User;
    let mut deferred: u64 = 0;
    for (i, j) in joins.iter().enumerate().filter(|(_, j)| !is_user(j)) {
        match setns(j) {
            Ok(()) => {}
            Err(e) if e.errno == nix::errno::Errno::EPERM && i < 64 && joins.iter().any(is_user) => {
                deferred |= 1 << i;
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(user) = joins.iter().find(|j| is_user(j)) {
        setns(user)?;
        after_user()?;
    }
    for (i, j) in joins.iter().enumerate() {
        if i < 64 && deferred & (1 << i) != 0 {
            setns(j)?;
        }
    }
    Ok(())
}

/// `unshare(2)` naming the flags in the error.
pub(crate) fn unshare(flags: CloneFlags) -> Result<(), SysError> {
    if flags.is_empty() {
        return Ok(());
    }
    nix::sched::unshare(flags).map_err(|e| SysError::new("unshare", format_args!("{flags:?}"), e))
}

/// Opens `/proc/self/ns/<name>` so the runtime can come back to its own
/// namespace after joining another for its children.
pub(crate) fn open_own(name: &str) -> Result<OwnedFd, SysError> {
    open_path(Path::new(&format!("/proc/self/ns/{name}")), OFlag::O_RDONLY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(nss: serde_json::Value) -> Spec {
        serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2", "root": {"path": "rootfs"},
            "process": {"args": ["sh"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
            "linux": {"namespaces": nss}
        }))
        .unwrap()
    }

    #[test]
    fn fast_path_clones_everything_but_cgroup_and_time() {
        let p = Plan::new(&spec(serde_json::json!([
            {"type": "pid"}, {"type": "mount"}, {"type": "user"}, {"type": "cgroup"}, {"type": "network"}
        ])))
        .unwrap();
        assert_eq!(
            p.clone_flags,
            CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET
        );
        assert!(p.unshare_flags.is_empty() && p.is_new(LinuxNamespaceType::Cgroup));
        assert!(!p.needs_second_fork && !p.child_unshares_user);
    }

    #[test]
    fn joining_with_a_new_user_namespace_takes_the_slow_path() {
        let p = Plan::new(&spec(serde_json::json!([
            {"type": "pid"}, {"type": "mount"}, {"type": "user"}, {"type": "network", "path": "/proc/self/ns/net"}
        ])))
        .unwrap();
        assert!(p.clone_flags.is_empty());
        assert_eq!(p.unshare_flags, CloneFlags::CLONE_NEWNS);
        assert!(p.child_unshares_user && p.needs_second_fork);
        assert_eq!(p.joins.len(), 1);
    }

    #[test]
    fn pid_join_is_done_by_the_runtime() {
        let p = Plan::new(&spec(serde_json::json!([{"type": "pid", "path": "/proc/self/ns/pid"}, {"type": "mount"}])))
            .unwrap();
        assert_eq!(p.parent_joins.len(), 1);
        assert_eq!(p.clone_flags, CloneFlags::CLONE_NEWNS);
    }

    #[test]
    fn a_bad_namespace_path_is_named() {
        let e = Plan::new(&spec(serde_json::json!([{"type": "network", "path": "/nonexistent/ns"}]))).err().unwrap();
        assert!(e.to_string().contains("/nonexistent/ns"), "{e}");
    }
}
