//! Mount options as config.json spells them, and the mount calls that apply them.
//!
//! Every mount target here is an fd-resolved `/proc/self/fd/N` path (see
//! [`super::fs`]): the kernel follows the magic link to the object that was
//! resolved inside the rootfs, so a symlink swapped in later can't redirect it.

use std::os::fd::AsFd;

use nix::mount::MsFlags;
use nix::sys::statvfs::{fstatvfs, FsFlags};

use crate::error::{InitError, MountCall};

/// One config.json mount, with its options split the way `mount(2)` wants them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MountOptions {
    /// Flags given to the first mount call.
    pub flags: MsFlags,
    /// Propagation changes applied after the mount, in order.
    pub propagation: Vec<MsFlags>,
    /// File-system specific data (`mode=755,size=64k`).
    pub data: String,
    /// `tmpcopyup`: fill a new tmpfs with what the directory held before.
    pub copy_up: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { flags: MsFlags::empty(), propagation: Vec::new(), data: String::new(), copy_up: false }
    }
}

impl MountOptions {
    pub(crate) fn is_bind(&self) -> bool {
        self.flags.contains(MsFlags::MS_BIND)
    }
}

/// Splits OCI mount options into flags, propagation and data, as runc does.
/// Options that would need features tinyrun lacks are refused by name.
pub(crate) fn parse_options(options: &[String]) -> Result<MountOptions, InitError> {
    let mut m = MountOptions::default();
    let mut data = Vec::new();
    for opt in options {
        let (set, clear) = match opt.as_str() {
            "defaults" => (MsFlags::empty(), MsFlags::empty()),
            "ro" => (MsFlags::MS_RDONLY, MsFlags::empty()),
            "rw" => (MsFlags::empty(), MsFlags::MS_RDONLY),
            "suid" => (MsFlags::empty(), MsFlags::MS_NOSUID),
            "nosuid" => (MsFlags::MS_NOSUID, MsFlags::empty()),
            "dev" => (MsFlags::empty(), MsFlags::MS_NODEV),
            "nodev" => (MsFlags::MS_NODEV, MsFlags::empty()),
            "exec" => (MsFlags::empty(), MsFlags::MS_NOEXEC),
            "noexec" => (MsFlags::MS_NOEXEC, MsFlags::empty()),
            "sync" => (MsFlags::MS_SYNCHRONOUS, MsFlags::empty()),
            "async" => (MsFlags::empty(), MsFlags::MS_SYNCHRONOUS),
            "dirsync" => (MsFlags::MS_DIRSYNC, MsFlags::empty()),
            "remount" => (MsFlags::MS_REMOUNT, MsFlags::empty()),
            "mand" => (MsFlags::MS_MANDLOCK, MsFlags::empty()),
            "nomand" => (MsFlags::empty(), MsFlags::MS_MANDLOCK),
            "atime" => (MsFlags::empty(), MsFlags::MS_NOATIME),
            "noatime" => (MsFlags::MS_NOATIME, MsFlags::empty()),
            "diratime" => (MsFlags::empty(), MsFlags::MS_NODIRATIME),
            "nodiratime" => (MsFlags::MS_NODIRATIME, MsFlags::empty()),
            "relatime" => (MsFlags::MS_RELATIME, MsFlags::empty()),
            "norelatime" => (MsFlags::empty(), MsFlags::MS_RELATIME),
            "strictatime" => (MsFlags::MS_STRICTATIME, MsFlags::empty()),
            "nostrictatime" => (MsFlags::empty(), MsFlags::MS_STRICTATIME),
            "lazytime" => (MsFlags::MS_LAZYTIME, MsFlags::empty()),
            "nolazytime" => (MsFlags::empty(), MsFlags::MS_LAZYTIME),
            "silent" => (MsFlags::MS_SILENT, MsFlags::empty()),
            "loud" => (MsFlags::empty(), MsFlags::MS_SILENT),
            "iversion" => (MsFlags::MS_I_VERSION, MsFlags::empty()),
            "noiversion" => (MsFlags::empty(), MsFlags::MS_I_VERSION),
            "bind" => (MsFlags::MS_BIND, MsFlags::empty()),
            "rbind" => (MsFlags::MS_BIND | MsFlags::MS_REC, MsFlags::empty()),
            "private" | "rprivate" | "shared" | "rshared" | "slave" | "rslave" | "unbindable" | "runbindable" => {
                m.propagation.push(propagation_flag(opt).unwrap_or(MsFlags::MS_PRIVATE));
                continue;
            }
            o if o.starts_with('r') && recursive_attr(o) => {
                return Err(InitError::other(
                    format!("mount option {o:?}"),
                    "recursive mount attributes are not supported",
                ));
            }
            "idmap" | "ridmap" => {
                return Err(InitError::other(format!("mount option {opt:?}"), "id-mapped mounts are not supported"))
            }
            "tmpcopyup" => {
                m.copy_up = true;
                continue;
            }
            "notmpcopyup" => {
                m.copy_up = false;
                continue;
            }
            o => {
                data.push(o.to_string());
                continue;
            }
        };
        m.flags = (m.flags | set) & !clear;
    }
    m.data = data.join(",");
    Ok(m)
}

fn recursive_attr(o: &str) -> bool {
    matches!(
        o,
        "rro"
            | "rrw"
            | "rnosuid"
            | "rsuid"
            | "rnodev"
            | "rdev"
            | "rnoexec"
            | "rexec"
            | "rnodiratime"
            | "rdiratime"
            | "rrelatime"
            | "rnorelatime"
            | "rnoatime"
            | "ratime"
            | "rstrictatime"
            | "rnostrictatime"
            | "rnosymfollow"
            | "rsymfollow"
    )
}

/// The flag for a propagation name (`rootfsPropagation` or a mount option).
pub(crate) fn propagation_flag(name: &str) -> Option<MsFlags> {
    let rec = MsFlags::MS_REC;
    Some(match name {
        "private" => MsFlags::MS_PRIVATE,
        "rprivate" => MsFlags::MS_PRIVATE | rec,
        "shared" => MsFlags::MS_SHARED,
        "rshared" => MsFlags::MS_SHARED | rec,
        "slave" => MsFlags::MS_SLAVE,
        "rslave" => MsFlags::MS_SLAVE | rec,
        "unbindable" => MsFlags::MS_UNBINDABLE,
        "runbindable" => MsFlags::MS_UNBINDABLE | rec,
        _ => return None,
    })
}

/// `mount(2)` with an error that says what was mounted where and how;
/// `shown_target` is the destination as the container will see it.
pub(crate) fn mount(
    source: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
    shown_target: &str,
) -> Result<(), InitError> {
    let data = data.filter(|d| !d.is_empty());
    nix::mount::mount(source, target, fstype, flags, data).map_err(|e| {
        let call = MountCall {
            src: source.map(str::to_string),
            dst: shown_target.to_string(),
            fstype: fstype.map(str::to_string),
            flags: flags.bits(),
            data: data.map(str::to_string),
        };
        InitError::mount(call, e)
    })
}

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
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(fs) {
            out |= ms;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn splits_flags_data_and_propagation() {
        let m = parse_options(&opts(&["nosuid", "strictatime", "mode=755", "size=65536k", "rslave"])).unwrap();
        assert_eq!(m.flags, MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME);
        assert_eq!(m.data, "mode=755,size=65536k");
        assert_eq!(m.propagation, vec![MsFlags::MS_SLAVE | MsFlags::MS_REC]);
    }

    #[test]
    fn later_options_override_earlier_ones() {
        let m = parse_options(&opts(&["ro", "rw", "rbind"])).unwrap();
        assert_eq!(m.flags, MsFlags::MS_BIND | MsFlags::MS_REC);
        assert!(m.is_bind());
    }

    #[test]
    fn refuses_what_it_cannot_do() {
        assert!(parse_options(&opts(&["rro"])).unwrap_err().to_string().contains("rro"));
        assert!(parse_options(&opts(&["idmap"])).unwrap_err().to_string().contains("idmap"));
    }
}
