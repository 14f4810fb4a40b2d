//! A `cgroup` mount inside the container.
//!
//! On a cgroup v2 host this is one cgroup2 mount. On a v1 (or hybrid) host
//! it is what runc builds: a tmpfs holding one mount per v1 hierarchy (and
//! the hybrid `unified` cgroup2 mount). With a private cgroup namespace each
//! hierarchy is mounted fresh and shows the container's cgroup as its root;
//! without one, or where the kernel refuses, the host hierarchy's directory
//! for this container is bind-mounted instead, never the hierarchy's root:
//! v1 in a user namespace, and cgroup2 where `/sys/fs/cgroup` is already
//! the host's (a user namespace whose network namespace is not its own
//! can't mount sysfs, so /sys is the host's bound, and a cgroup2 mount on
//! the host's own is EBUSY). Init's cgroups on the host are read before its
//! cgroup namespace hides them (`own_cgroups`).

use std::path::Path;

use nix::mount::MsFlags;
use nix::sys::statfs::CGROUP2_SUPER_MAGIC;

use super::options::MountOptions;
use super::{Options, Result};
use crate::error::InitError;
use crate::sys::fs::fd_path;
use crate::tree::Tree;

pub(super) fn mount_cgroup(
    root: &Tree,
    dest: &Path,
    opts: &MountOptions,
    o: &Options,
    own_cgroups: &str,
) -> Result<()> {
    let unified =
        nix::sys::statfs::statfs("/sys/fs/cgroup").map(|s| s.filesystem_type() == CGROUP2_SUPER_MAGIC).unwrap_or(false);
    let target = root.mkdir_all(dest, 0o755)?;
    let shown = dest.to_string_lossy();
    let flags = opts.flags & !(MsFlags::MS_BIND | MsFlags::MS_REC);
    if unified {
        return o
            .kernel
            .mount_at(Some("cgroup2"), &fd_path(&target), Some("cgroup2"), flags, None, &shown)
            .or_else(|_| bind_host(o, root, dest, "/sys/fs/cgroup", &own_cgroup(own_cgroups, true, ""), flags));
    }
    let base = flags & (MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC);
    o.kernel.mount_at(Some("tmpfs"), &fd_path(&target), Some("tmpfs"), base, Some("mode=755"), &shown)?;
    // The runtime's view of the host's hierarchies, taken before the clone;
    // this mount namespace started as a copy of that one.
    for h in o.cgroup_hierarchies {
        let name = h.dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if name.is_empty() {
            continue;
        }
        let sub = dest.join(&name);
        let fd = root.mkdir_all(&sub, 0o755)?;
        let (fstype, data) = if h.v2 { ("cgroup2", None) } else { ("cgroup", Some(h.options.as_str())) };
        let fresh = o.cgroup_ns
            && o.kernel
                .mount_at(Some("cgroup"), &fd_path(&fd), Some(fstype), flags, data, &sub.to_string_lossy())
                .is_ok();
        if !fresh {
            let own = own_cgroup(own_cgroups, h.v2, &h.options);
            let host_mount = h.dir.to_str().ok_or_else(|| {
                InitError::other(format!("bind {}", h.dir.display()), "the cgroup mount point is not UTF-8")
            })?;
            bind_host(o, root, &sub, host_mount, &own, flags)?;
        }
        // cpu,cpuacct is also reachable as cpu and cpuacct.
        if name.contains(',') {
            for alias in name.split(',') {
                let _ = nix::unistd::symlinkat(
                    name.as_str(),
                    Some(std::os::fd::AsRawFd::as_raw_fd(&reopen(root, dest)?)),
                    alias,
                );
            }
        }
    }
    if flags.contains(MsFlags::MS_RDONLY) {
        let fresh = root.open_in(dest, nix::fcntl::OFlag::O_PATH)?;
        o.kernel.mount_at(
            None,
            &fd_path(&fresh),
            None,
            MsFlags::MS_REMOUNT | base | MsFlags::MS_RDONLY,
            Some("mode=755"),
            &shown,
        )?;
    }
    Ok(())
}

fn reopen(root: &Tree, dest: &Path) -> Result<std::os::fd::OwnedFd> {
    let fd = root.open_in(dest, nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY)?;
    crate::sys::fs::reopen_dir(&fd).map_err(|e| InitError::path("open", dest, e))
}

fn bind_host(o: &Options, root: &Tree, dest: &Path, host_mount: &str, sub: &str, flags: MsFlags) -> Result<()> {
    let src = format!("{host_mount}{sub}");
    let fd = root.mkdir_all(dest, 0o755)?;
    let shown = dest.to_string_lossy();
    o.kernel.mount_at(Some(&src), &fd_path(&fd), None, MsFlags::MS_BIND | MsFlags::MS_REC, None, &shown)?;
    if flags.contains(MsFlags::MS_RDONLY) {
        let fresh = root.open_in(dest, nix::fcntl::OFlag::O_PATH)?;
        o.kernel.mount_at(
            None,
            &fd_path(&fresh),
            None,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags,
            None,
            &shown,
        )?;
    }
    Ok(())
}

/// Init's cgroup in a hierarchy (cgroup2, or the v1 one mounted with
/// `options`), from `own_cgroups`, its `/proc/self/cgroup`; empty for the
/// root.
fn own_cgroup(own_cgroups: &str, v2: bool, options: &str) -> String {
    for line in own_cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next(), parts.next().unwrap_or_default(), parts.next().unwrap_or("/"));
        let matches = if v2 {
            ctrls.is_empty()
        } else {
            let wanted: Vec<&str> = options.split(',').collect();
            ctrls.split(',').any(|c| wanted.contains(&c) || wanted.contains(&c.trim_start_matches("name=")))
                && !ctrls.is_empty()
        };
        if matches {
            return if path == "/" { String::new() } else { path.to_string() };
        }
    }
    String::new()
}
