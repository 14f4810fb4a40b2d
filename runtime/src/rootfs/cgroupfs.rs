//! A `cgroup` mount inside the container.
//!
//! On a cgroup v2 host this is one cgroup2 mount. On a v1 (or hybrid) host
//! it is what runc builds: a tmpfs holding one mount per v1 hierarchy (and
//! the hybrid `unified` cgroup2 mount). With a private cgroup namespace each
//! hierarchy is mounted fresh and shows the container's cgroup as its root;
//! without one, or where the kernel refuses (v1 in a user namespace), the
//! host hierarchy's directory for this container is bind-mounted instead.

use std::path::Path;

use nix::mount::MsFlags;

use super::{Options, Result};
use crate::sys::fs::{fd_path, Root};
use crate::sys::mount::{mount as sys_mount, MountOptions};

const CGROUP2_SUPER_MAGIC: i64 = 0x63677270;

struct Hierarchy {
    /// Host mount point, e.g. /sys/fs/cgroup/cpu,cpuacct
    mount_point: String,
    /// "cgroup" or "cgroup2"
    fstype: String,
    /// Controller options for a v1 mount, e.g. "cpu,cpuacct"
    options: String,
}

pub(super) fn mount_cgroup(root: &Root, dest: &Path, opts: &MountOptions, o: &Options) -> Result<()> {
    let unified = nix::sys::statfs::statfs("/sys/fs/cgroup")
        .map(|s| s.filesystem_type().0 as i64 == CGROUP2_SUPER_MAGIC)
        .unwrap_or(false);
    let target = root.mkdir_all(dest, 0o755).map_err(|e| e.to_string())?;
    let shown = root.describe(dest);
    let flags = opts.flags & !(MsFlags::MS_BIND | MsFlags::MS_REC);
    if unified {
        return sys_mount(Some("cgroup2"), &fd_path(&target), Some("cgroup2"), flags, None, &shown)
            .or_else(|_| bind_host(root, dest, "/sys/fs/cgroup", "", flags))
            .map_err(|e| e.to_string());
    }
    let base = flags & (MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC);
    sys_mount(Some("tmpfs"), &fd_path(&target), Some("tmpfs"), base, Some("mode=755"), &shown).map_err(|e| e.to_string())?;
    for h in hierarchies()? {
        let name = Path::new(&h.mount_point).file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if name.is_empty() {
            continue;
        }
        let sub = dest.join(&name);
        let fd = root.mkdir_all(&sub, 0o755).map_err(|e| e.to_string())?;
        let data = if h.fstype == "cgroup" { Some(h.options.as_str()) } else { None };
        let fresh = o.cgroup_ns
            && sys_mount(Some("cgroup"), &fd_path(&fd), Some(&h.fstype), flags, data, &root.describe(&sub)).is_ok();
        if !fresh {
            let own = own_cgroup(&h)?;
            bind_host(root, &sub, &h.mount_point, &own, flags).map_err(|e| e.to_string())?;
        }
        // cpu,cpuacct is also reachable as cpu and cpuacct.
        if name.contains(',') {
            for alias in name.split(',') {
                let _ = nix::unistd::symlinkat(name.as_str(), Some(std::os::fd::AsRawFd::as_raw_fd(&reopen(root, dest)?)), alias);
            }
        }
    }
    if flags.contains(MsFlags::MS_RDONLY) {
        let fresh = root.open_in(dest, nix::fcntl::OFlag::O_PATH).map_err(|e| e.to_string())?;
        sys_mount(None, &fd_path(&fresh), None, MsFlags::MS_REMOUNT | base | MsFlags::MS_RDONLY, Some("mode=755"), &shown)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn reopen(root: &Root, dest: &Path) -> Result<std::os::fd::OwnedFd> {
    let fd = root.open_in(dest, nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY).map_err(|e| e.to_string())?;
    crate::sys::fs::reopen_dir(&fd).map_err(|e| e.to_string())
}

fn bind_host(root: &Root, dest: &Path, host_mount: &str, sub: &str, flags: MsFlags) -> std::result::Result<(), crate::error::SysError> {
    let src = format!("{host_mount}{sub}");
    let fd = root.mkdir_all(dest, 0o755)?;
    sys_mount(Some(&src), &fd_path(&fd), None, MsFlags::MS_BIND | MsFlags::MS_REC, None, &root.describe(dest))?;
    if flags.contains(MsFlags::MS_RDONLY) {
        let fresh = root.open_in(dest, nix::fcntl::OFlag::O_PATH)?;
        sys_mount(None, &fd_path(&fresh), None, MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags, None, &root.describe(dest))?;
    }
    Ok(())
}

/// The v1 hierarchies and the hybrid cgroup2 mount, from mountinfo.
fn hierarchies() -> Result<Vec<Hierarchy>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("read mountinfo: {e}"))?;
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((pre, post)) = line.split_once(" - ") else { continue };
        let mount_point = pre.split(' ').nth(4).unwrap_or_default();
        let mut post = post.split(' ');
        let fstype = post.next().unwrap_or_default();
        let super_opts = post.nth(1).unwrap_or_default();
        if !mount_point.starts_with("/sys/fs/cgroup/") || !(fstype == "cgroup" || fstype == "cgroup2") {
            continue;
        }
        let options = super_opts
            .split(',')
            .filter(|o| !matches!(*o, "rw" | "ro") && !o.starts_with("release_agent"))
            .collect::<Vec<_>>()
            .join(",");
        out.push(Hierarchy { mount_point: mount_point.to_string(), fstype: fstype.to_string(), options });
    }
    Ok(out)
}

/// This process's cgroup in hierarchy `h`, from /proc/self/cgroup.
fn own_cgroup(h: &Hierarchy) -> Result<String> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("read /proc/self/cgroup: {e}"))?;
    for line in cg.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next(), parts.next().unwrap_or_default(), parts.next().unwrap_or("/"));
        let matches = if h.fstype == "cgroup2" {
            ctrls.is_empty()
        } else {
            let wanted: Vec<&str> = h.options.split(',').collect();
            ctrls.split(',').any(|c| wanted.contains(&c) || wanted.contains(&c.trim_start_matches("name=")))
                && !ctrls.is_empty()
        };
        if matches {
            return Ok(if path == "/" { String::new() } else { path.to_string() });
        }
    }
    Ok(String::new())
}
