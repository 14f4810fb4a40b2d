//! Mount options as config.json spells them, split the way `mount(2)` wants
//! them (runc's parsing). Used by the config's validation in the runtime and
//! by init.

use nix::mount::MsFlags;

use super::kernel::Attrs;

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
    /// `rro`, `rnosuid`, ...: attributes for the mount and every mount
    /// below it, set with `mount_setattr(AT_RECURSIVE)` after the mount.
    pub recursive: Attrs,
    /// `idmap` or `ridmap`: the bind is id-mapped (the mount's own
    /// mappings, or the container's), the submounts of an `rbind` too
    /// with `ridmap`.
    pub idmap: Option<Idmap>,
}

/// How much of a bind `idmap`/`ridmap` id-maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idmap {
    /// `idmap`: the bind's top mount.
    Top,
    /// `ridmap`: every mount of the tree.
    Recursive,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            flags: MsFlags::empty(),
            propagation: Vec::new(),
            data: String::new(),
            copy_up: false,
            recursive: Attrs::default(),
            idmap: None,
        }
    }
}

impl MountOptions {
    pub(crate) fn is_bind(&self) -> bool {
        self.flags.contains(MsFlags::MS_BIND)
    }
}

/// The (set, clear) mount flags of a flag option, as runc maps them.
fn flag(opt: &str) -> Option<(MsFlags, MsFlags)> {
    Some(match opt {
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
        _ => return None,
    })
}

/// Splits OCI mount options into flags, propagation and data, as runc does:
/// what is no option of its own is file-system data.
pub(crate) fn parse_options(options: &[String]) -> MountOptions {
    let mut m = MountOptions::default();
    let mut data = Vec::new();
    for opt in options {
        if let Some((set, clear)) = flag(opt) {
            m.flags = (m.flags | set) & !clear;
        } else if let Some(p) = propagation_flag(opt) {
            m.propagation.push(p);
        } else if let Some((clear, flag)) = recursive_attr(opt) {
            m.recursive.add(clear, flag);
        } else if opt == "idmap" {
            m.idmap = Some(Idmap::Top);
        } else if opt == "ridmap" {
            m.idmap = Some(Idmap::Recursive);
        } else if opt == "tmpcopyup" || opt == "notmpcopyup" {
            m.copy_up = opt == "tmpcopyup";
        } else {
            data.push(opt.as_str());
        }
    }
    m.data = data.join(",");
    m
}

impl Attrs {
    /// Adds one recursive option, as runc adds it: its bit goes to `set`
    /// (or `clear`) and leaves the other. An atime option also clears the
    /// whole atime field, which the kernel wants cleared to change the
    /// mode; relatime is the field's 0, so it adds no bit of its own.
    fn add(&mut self, clear: bool, flag: u64) {
        if clear {
            self.clear |= flag;
            self.set &= !flag;
        } else {
            self.set |= flag;
            self.clear &= !flag;
        }
        if flag & ATIME == flag {
            self.clear |= ATIME;
        }
    }
}

const RDONLY: u64 = 0x1;
const NOSUID: u64 = 0x2;
const NODEV: u64 = 0x4;
const NOEXEC: u64 = 0x8;
/// The atime field: RELATIME (0), NOATIME, STRICTATIME.
const ATIME: u64 = 0x70;
const RELATIME: u64 = 0;
const NOATIME: u64 = 0x10;
const STRICTATIME: u64 = 0x20;
const NODIRATIME: u64 = 0x80;
const NOSYMFOLLOW: u64 = 0x20_0000;

/// The MOUNT_ATTR_* bit a recursive option clears (`true`) or sets, as
/// runc maps them. Relatime is the atime field's 0: `rrelatime` and
/// `rnorelatime` both just reset the field, so either leaves the mount
/// relatime (runc's result), and `ratime` and `rnostrictatime` clear their
/// bit and the field, which is relatime too.
fn recursive_attr(o: &str) -> Option<(bool, u64)> {
    Some(match o {
        "rro" => (false, RDONLY),
        "rrw" => (true, RDONLY),
        "rnosuid" => (false, NOSUID),
        "rsuid" => (true, NOSUID),
        "rnodev" => (false, NODEV),
        "rdev" => (true, NODEV),
        "rnoexec" => (false, NOEXEC),
        "rexec" => (true, NOEXEC),
        "rnodiratime" => (false, NODIRATIME),
        "rdiratime" => (true, NODIRATIME),
        "rrelatime" => (false, RELATIME),
        "rnorelatime" => (true, RELATIME),
        "rnoatime" => (false, NOATIME),
        "ratime" => (true, NOATIME),
        "rstrictatime" => (false, STRICTATIME),
        "rnostrictatime" => (true, STRICTATIME),
        "rnosymfollow" => (false, NOSYMFOLLOW),
        "rsymfollow" => (true, NOSYMFOLLOW),
        _ => return None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn splits_flags_data_and_propagation() {
        let m = parse_options(&opts(&["nosuid", "strictatime", "mode=755", "size=65536k", "rslave"]));
        assert_eq!(m.flags, MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME);
        assert_eq!(m.data, "mode=755,size=65536k");
        assert_eq!(m.propagation, vec![MsFlags::MS_SLAVE | MsFlags::MS_REC]);
    }

    #[test]
    fn later_options_override_earlier_ones() {
        let m = parse_options(&opts(&["ro", "rw", "rbind"]));
        assert_eq!(m.flags, MsFlags::MS_BIND | MsFlags::MS_REC);
        assert!(m.is_bind());
    }

    #[test]
    fn idmap_options_are_no_data_and_the_later_one_wins() {
        let m = parse_options(&opts(&["rbind", "idmap"]));
        assert_eq!((m.idmap, m.data.as_str()), (Some(Idmap::Top), ""));
        assert_eq!(parse_options(&opts(&["idmap", "ridmap"])).idmap, Some(Idmap::Recursive));
        assert_eq!(parse_options(&opts(&["ridmap", "idmap"])).idmap, Some(Idmap::Top));
        assert_eq!(parse_options(&opts(&["rbind"])).idmap, None);
    }

    #[test]
    fn recursive_attributes_set_and_clear_mount_attr_bits() {
        let m = parse_options(&opts(&["rbind", "rro", "rnosuid", "rnoexec"]));
        assert_eq!(m.recursive, Attrs { set: RDONLY | NOSUID | NOEXEC, clear: 0 });
        assert_eq!(m.flags, MsFlags::MS_BIND | MsFlags::MS_REC, "recursive options are no mount flags");
        let m = parse_options(&opts(&["rro", "rrw"]));
        assert_eq!(m.recursive, Attrs { set: 0, clear: RDONLY }, "the later option wins");
        let m = parse_options(&opts(&["rnoatime"]));
        assert_eq!(m.recursive, Attrs { set: NOATIME, clear: ATIME });
        for relatime in ["rnorelatime", "rrelatime", "ratime", "rnostrictatime"] {
            let m = parse_options(&opts(&[relatime]));
            assert_eq!(m.recursive.set & ATIME, 0, "{relatime} leaves the mount relatime, as runc does");
            assert_eq!(m.recursive.clear & ATIME, ATIME, "{relatime} resets the atime field");
        }
        let m = parse_options(&opts(&["rnoatime", "rrelatime"]));
        assert_eq!(m.recursive, Attrs { set: NOATIME, clear: ATIME }, "relatime adds no bit: runc keeps noatime");
        let m = parse_options(&opts(&["rnoatime", "ratime"]));
        assert_eq!(m.recursive, Attrs { set: 0, clear: ATIME | NOATIME }, "ratime takes noatime back");
        let m = parse_options(&opts(&["rstrictatime", "rnosymfollow"]));
        assert_eq!(m.recursive, Attrs { set: STRICTATIME | NOSYMFOLLOW, clear: ATIME });
    }
}
