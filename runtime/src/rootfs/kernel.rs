//! What building the root filesystem asks of the kernel beyond reading and
//! making files: mounts, mount attributes, device nodes, ownership,
//! pivot_root. Behind the [`Kernel`] trait, so the sequence can be run
//! against [`Fake`] in unit tests without root: its order and its failure
//! paths are checked there (house style H11).
//!
//! Every mount target here is an fd-resolved `/proc/self/fd/N` path (see
//! [`super::root`]): the kernel follows the magic link to the object that was
//! resolved inside the rootfs, so a symlink swapped in later can't redirect it.
//! Each call also carries `shown`, the destination as the container sees it,
//! for errors and for the fake's record.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};
use nix::sys::stat::{Mode, SFlag};
use nix::sys::statvfs::{fstatvfs, FsFlags};

use crate::error::{InitError, MountCall};

/// One `mount(2)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mount<'a> {
    pub source: Option<&'a str>,
    /// The real target: usually `/proc/self/fd/N`.
    pub target: &'a str,
    pub fstype: Option<&'a str>,
    pub flags: MsFlags,
    pub data: Option<&'a str>,
    /// The destination as the container sees it.
    pub shown: &'a str,
}

/// `mount_setattr(2)` attributes (MOUNT_ATTR_*), set and cleared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Attrs {
    pub set: u64,
    pub clear: u64,
}

impl dyn Kernel + '_ {
    /// [`Kernel::mount`] with its arguments spelled out.
    pub(crate) fn mount_at(
        &self,
        source: Option<&str>,
        target: &str,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
        shown: &str,
    ) -> Result<(), InitError> {
        self.mount(&Mount { source, target, fstype, flags, data, shown })
    }
}

/// The calls; each failure names its object.
pub(crate) trait Kernel {
    fn mount(&self, m: &Mount) -> Result<(), InitError>;
    /// Sets attributes on the mount at `target` and every mount below it.
    fn set_attrs_recursive(&self, target: BorrowedFd, attrs: Attrs, shown: &str) -> Result<(), InitError>;
    fn mknodat(&self, dir: BorrowedFd, name: &OsStr, kind: SFlag, mode: Mode, dev: u64) -> Result<(), Errno>;
    fn fchownat(&self, dir: BorrowedFd, name: &OsStr, uid: u32, gid: u32) -> Result<(), Errno>;
    fn fchdir(&self, dir: BorrowedFd) -> Result<(), Errno>;
    fn chdir(&self, path: &str) -> Result<(), Errno>;
    /// `pivot_root(".", ".")`: the old root ends up stacked on the new one.
    fn pivot_root_here(&self) -> Result<(), Errno>;
    fn chroot_here(&self) -> Result<(), Errno>;
    fn umount_detach(&self, target: &str) -> Result<(), Errno>;
    /// Whether the mount at `path` is read-only (to check a remount took).
    fn is_read_only(&self, path: &str) -> Result<bool, Errno>;
}

/// The real kernel.
pub(crate) struct Real;

impl Kernel for Real {
    fn mount(&self, m: &Mount) -> Result<(), InitError> {
        let data = m.data.filter(|d| !d.is_empty());
        nix::mount::mount(m.source, m.target, m.fstype, m.flags, data).map_err(|e| {
            let call = MountCall {
                src: m.source.map(str::to_string),
                dst: m.shown.to_string(),
                fstype: m.fstype.map(str::to_string),
                flags: m.flags.bits(),
                data: data.map(str::to_string),
            };
            InitError::mount(call, e)
        })
    }

    fn set_attrs_recursive(&self, target: BorrowedFd, attrs: Attrs, shown: &str) -> Result<(), InitError> {
        crate::sys::mount_setattr(target, attrs.set, attrs.clear, true)
            .map_err(|e| InitError::path("mount_setattr", shown, e.errno))
    }

    fn mknodat(&self, dir: BorrowedFd, name: &OsStr, kind: SFlag, mode: Mode, dev: u64) -> Result<(), Errno> {
        nix::sys::stat::mknodat(Some(dir.as_raw_fd()), name, kind, mode, dev)
    }

    fn fchownat(&self, dir: BorrowedFd, name: &OsStr, uid: u32, gid: u32) -> Result<(), Errno> {
        let (uid, gid) = (Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)));
        nix::unistd::fchownat(Some(dir.as_raw_fd()), name, uid, gid, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
    }

    fn fchdir(&self, dir: BorrowedFd) -> Result<(), Errno> {
        nix::unistd::fchdir(dir.as_raw_fd())
    }

    fn chdir(&self, path: &str) -> Result<(), Errno> {
        nix::unistd::chdir(path)
    }

    fn pivot_root_here(&self) -> Result<(), Errno> {
        nix::unistd::pivot_root(".", ".")
    }

    fn chroot_here(&self) -> Result<(), Errno> {
        nix::unistd::chroot(".")
    }

    fn umount_detach(&self, target: &str) -> Result<(), Errno> {
        nix::mount::umount2(target, MntFlags::MNT_DETACH)
    }

    fn is_read_only(&self, path: &str) -> Result<bool, Errno> {
        Ok(nix::sys::statvfs::statvfs(path)?.flags().contains(FsFlags::ST_RDONLY))
    }
}

/// The kernel's statfs flag for relatime; nix names it only for glibc, the
/// kernel sets it whatever the C library.
const ST_RELATIME: FsFlags = FsFlags::from_bits_retain(0x1000);

/// Flags a bind remount must repeat: in a user namespace the kernel refuses a
/// remount that would clear a flag locked on the original mount.
pub(crate) fn locked_flags(fd: &impl AsFd) -> MsFlags {
    // A failure just means "nothing known to be locked".
    let Ok(st) = fstatvfs(fd) else { return MsFlags::empty() };
    let f = st.flags();
    let mut out = MsFlags::empty();
    for (fs, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(fs) {
            out |= ms;
        }
    }
    out
}

/// A kernel that records what it is asked, in order, and can fail one
/// call: for unit tests of the sequence, without root.
#[cfg(test)]
pub(crate) mod fake {
    use std::cell::RefCell;

    use super::*;

    /// One recorded call, with the container's view of its object.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Call {
        Mount { source: Option<String>, dst: String, fstype: Option<String>, flags: MsFlags, data: Option<String> },
        SetAttrs { dst: String, attrs: Attrs },
        Mknod { name: String, kind: SFlag, dev: u64, mode: u32 },
        Chown { name: String, uid: u32, gid: u32 },
        Fchdir,
        Chdir(String),
        PivotRoot,
        Chroot,
        Umount(String),
    }

    /// Records calls; the `fail_at`-th call (counting from 0) fails with EPERM.
    #[derive(Default)]
    pub(crate) struct Fake {
        pub calls: RefCell<Vec<Call>>,
        pub fail_at: Option<usize>,
        /// What `is_read_only` answers.
        pub read_only: bool,
    }

    impl Fake {
        fn record(&self, c: Call) -> Result<(), Errno> {
            let mut calls = self.calls.borrow_mut();
            let n = calls.len();
            calls.push(c);
            if self.fail_at == Some(n) {
                return Err(Errno::EPERM);
            }
            Ok(())
        }

        /// The mounts' destinations, in order.
        pub(crate) fn mounted(&self) -> Vec<String> {
            self.calls
                .borrow()
                .iter()
                .filter_map(|c| if let Call::Mount { dst, .. } = c { Some(dst.clone()) } else { None })
                .collect()
        }
    }

    impl Kernel for Fake {
        fn mount(&self, m: &Mount) -> Result<(), InitError> {
            let call = Call::Mount {
                source: m.source.map(str::to_string),
                dst: m.shown.to_string(),
                fstype: m.fstype.map(str::to_string),
                flags: m.flags,
                data: m.data.filter(|d| !d.is_empty()).map(str::to_string),
            };
            self.record(call).map_err(|e| {
                let mc =
                    MountCall { src: None, dst: m.shown.to_string(), fstype: None, flags: m.flags.bits(), data: None };
                InitError::mount(mc, e)
            })
        }
        fn set_attrs_recursive(&self, _: BorrowedFd, attrs: Attrs, shown: &str) -> Result<(), InitError> {
            self.record(Call::SetAttrs { dst: shown.to_string(), attrs })
                .map_err(|e| InitError::path("mount_setattr", shown, e))
        }
        fn mknodat(&self, _: BorrowedFd, name: &OsStr, kind: SFlag, mode: Mode, dev: u64) -> Result<(), Errno> {
            let name = name.to_string_lossy().into_owned();
            self.record(Call::Mknod { name, kind, dev, mode: mode.bits() })
        }
        fn fchownat(&self, _: BorrowedFd, name: &OsStr, uid: u32, gid: u32) -> Result<(), Errno> {
            self.record(Call::Chown { name: name.to_string_lossy().into_owned(), uid, gid })
        }
        fn fchdir(&self, _: BorrowedFd) -> Result<(), Errno> {
            self.record(Call::Fchdir)
        }
        fn chdir(&self, path: &str) -> Result<(), Errno> {
            self.record(Call::Chdir(path.to_string()))
        }
        fn pivot_root_here(&self) -> Result<(), Errno> {
            self.record(Call::PivotRoot)
        }
        fn chroot_here(&self) -> Result<(), Errno> {
            self.record(Call::Chroot)
        }
        fn umount_detach(&self, target: &str) -> Result<(), Errno> {
            self.record(Call::Umount(target.to_string()))
        }
        fn is_read_only(&self, _: &str) -> Result<bool, Errno> {
            Ok(self.read_only)
        }
    }
}
