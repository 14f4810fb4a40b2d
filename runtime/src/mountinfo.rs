//! The mount table as `/proc/self/mountinfo` shows it: the one reader of it,
//! for the runtime (the host's cgroup hierarchies, a rootfs bind made on the
//! host) and for its callers (the sandbox detaching a box's storage). Runs
//! in whichever process asks; it reads the table of that process's mount
//! namespace.
//!
//! A line is `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE
//! SOURCE SUPER_OPTIONS` (proc(5)); paths have space, tab, newline and
//! backslash written as `\ooo`, undone here.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// One mount of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The mount's id (unique while it is mounted).
    pub id: u64,
    /// Where it is mounted, as this process sees the path.
    pub mount_point: PathBuf,
    /// The file system type (`cgroup2`, `tmpfs`, `overlay`, ...).
    pub fs_type: String,
    /// The superblock's options, comma-separated as the kernel lists them.
    pub super_options: String,
}

/// The mount table of the calling process's mount namespace, in the
/// kernel's order (a later mount on the same point hides an earlier one).
pub fn read() -> std::io::Result<Vec<Entry>> {
    Ok(parse(&crate::sys::fs::read_proc("/proc/self/mountinfo")?))
}

/// The entries of mountinfo text `text`; lines that don't parse are left
/// out.
pub fn parse(text: &str) -> Vec<Entry> {
    text.lines().filter_map(entry).collect()
}

fn entry(line: &str) -> Option<Entry> {
    let (pre, post) = line.split_once(" - ")?;
    let mut pre = pre.split(' ');
    let id = pre.next()?.parse().ok()?;
    let point = pre.nth(3)?;
    let mut post = post.split(' ');
    let fs_type = post.next()?.to_string();
    let super_options = post.nth(1).unwrap_or_default().to_string();
    let mount_point = PathBuf::from(OsString::from_vec(unescape(point.as_bytes())));
    Some(Entry { id, mount_point, fs_type, super_options })
}

/// Undoes mountinfo's escapes: `\ooo`, three octal digits of a byte (the
/// kernel writes space, tab, newline and backslash so). Anything else,
/// a backslash not followed by such a number included, is kept as it is.
pub fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| (b'0'..=b'3').contains(&d[0]) && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) if field[i] == b'\\' => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            _ => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_undone_and_nothing_else_is() {
        assert_eq!(unescape(br"/a\040b\134c\011"), b"/a b\\c\t");
        assert_eq!(unescape(br"/x\9y\04"), br"/x\9y\04", "not an escape: kept");
        assert_eq!(unescape(br"/+12\+12\400"), br"/+12\+12\400", "no sign, nothing above a byte");
        assert_eq!(unescape(b"/plain"), b"/plain");
    }

    #[test]
    fn lines_give_id_point_type_and_superblock_options() {
        let text = "\
26 22 0:23 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
31 26 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:14 master:3 - cgroup cgroup rw,cpu,cpuacct
90 28 0:50 / /run/a\\040b rw - overlay overlay rw,lowerdir=/x
garbage
1 2 3
";
        let ms = parse(text);
        assert_eq!(ms.len(), 3, "{ms:?}");
        assert_eq!(
            ms[1],
            Entry {
                id: 31,
                mount_point: "/sys/fs/cgroup/cpu,cpuacct".into(),
                fs_type: "cgroup".into(),
                super_options: "rw,cpu,cpuacct".into(),
            }
        );
        assert_eq!(ms[2].mount_point, PathBuf::from("/run/a b"));
        assert!(read().unwrap().iter().any(|m| m.mount_point == std::path::Path::new("/")), "this process's root");
    }
}
