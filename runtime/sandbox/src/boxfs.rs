//! Where a box path lives on the host, for `--copy-in`, `sandbox cp` and
//! `--report-writes`. Runs in the runtime process, as the host's root, on
//! the box's files as the host sees them (module `storage`), never through
//! the box's /proc.
//!
//! A box's files are spread over its mounts, which its config.json lists:
//! its root (the default root's skeleton in the bundle tmpfs, an image's
//! overlay, or a directory the caller gave), the scratch tmpfs bound at
//! /work and /tmp (without an image), and what the box sees but does not
//! own: the host's directories and files bound read-only (/usr, /lib*, a
//! few /etc entries), /proc, /sys and /dev. A box path belongs to the
//! mount with the longest destination above it:
//! - the root and the scratch tmpfs are each reached through a [`Tree`]
//!   (`RESOLVE_IN_ROOT | RESOLVE_NO_XDEV`), so a symlink on the way
//!   resolves inside that tree, never on the host. A symlink that leads to
//!   nothing there is read as a box path and looked up again, so
//!   `/work/l -> /app` reaches the root's /app as it does in the box (`..`
//!   in its target is taken lexically);
//! - anything under another mount is refused, naming it: the host's files
//!   are not the box's to hand out or to overwrite, and /proc, /sys and
//!   /dev have nothing the host can copy.
//!
//! A directory reached through a symlink must also be one the box sees
//! there ([`BoxFs::admit`]): not at or under one of the box's mount points
//! as its tree holds them (a write there would be hidden under the mount),
//! and in the scratch tree, inside /work or /tmp. Only a root inside the
//! bundle dir (the skeleton, an overlay) is written to; a root given with
//! --rootfs or --bundle is the caller's directory, and only read.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::ids::SANDBOX_UID;
use crate::storage::SCRATCH;
use tinyrun::tree::{self, FileId, Tree};

/// The most symlinks followed to reach one path (the kernel's limit).
const MAX_HOPS: usize = 40;

/// A launched or created box's files as the runtime reaches them.
pub(crate) struct BoxFs {
    /// The host ids of the box's user, who owns what is copied in.
    pub(crate) user: (u32, u32),
    mounts: Vec<Mount>,
    root: Region,
    /// The root is in the bundle dir (the skeleton, an overlay), not a
    /// directory of the caller's.
    root_writable: bool,
    scratch: Option<Region>,
}

/// One mount of the box's spec.
struct Mount {
    /// Its destination in the box.
    dest: Vec<OsString>,
    what: What,
}

enum What {
    /// A directory of the box's scratch tmpfs: its path there.
    Scratch(PathBuf),
    /// A host file or directory bound into the box.
    Host(PathBuf),
    /// A filesystem made inside the box (proc, sysfs, tmpfs, ...).
    Kernel(String),
}

/// One tree of the box's files on the host.
pub(crate) struct Region {
    pub(crate) tree: Tree,
    /// Directories everything must be inside of (the scratch tmpfs's
    /// /work and /tmp); empty for anywhere in the tree.
    tops: Vec<FileId>,
    /// The box's mount points as this tree holds them, with the index of
    /// the mount.
    fences: Vec<(FileId, usize)>,
}

/// Where a box path was found: the tree that holds it, the deepest
/// directory of it that exists, and the rest.
pub(crate) struct Reached<'a> {
    pub(crate) region: &'a Region,
    /// The box path as finally looked up (after symlinks that led
    /// elsewhere), for messages.
    pub(crate) path: PathBuf,
    /// The deepest existing directory above the last name.
    pub(crate) dir: OwnedFd,
    /// The names between `dir` and the last one that don't exist.
    pub(crate) missing: Vec<OsString>,
    /// The last name, never followed; `None` for the root of the tree.
    pub(crate) name: Option<OsString>,
}

/// What the box has at one of its mount points.
pub(crate) enum Mounted<'a> {
    /// Its own storage (its /work or /tmp): this tree, at this path in it.
    Own { dest: PathBuf, region: &'a Region, path: &'a Path },
    /// Not the box's files: why not, for messages.
    Foreign(String),
}

impl Mounted<'_> {
    /// Why a copy doesn't go over this mount point.
    pub(crate) fn why(&self) -> String {
        match self {
            Mounted::Own { dest, .. } => {
                format!("the box has its {} mounted there: copy to {} itself", dest.display(), dest.display())
            }
            Mounted::Foreign(why) => why.clone(),
        }
    }
}

impl BoxFs {
    /// The files of the box whose bundle dir is `bundle`, from the
    /// config.json the runtime wrote there.
    pub(crate) fn open(bundle: &Path) -> Result<BoxFs> {
        let path = bundle.join("config.json");
        let text = std::fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
        let bad = |why: &str| Error::InvalidSpec(format!("{}: {why}", path.display()));
        let v: Value = serde_json::from_slice(&text).map_err(|e| bad(&e.to_string()))?;
        let ids = v
            .pointer("/linux/uidMappings")
            .and_then(crate::ids::BoxIds::from_map)
            .ok_or_else(|| bad("no uid mapping"))?;
        let root_path = bundle.join(v.pointer("/root/path").and_then(Value::as_str).ok_or_else(|| bad("no root"))?);
        // The config spells paths as the --root of the command that made
        // the box did; this command's may differ.
        let scratch_dir = bundle.join(SCRATCH);
        let real_scratch = std::fs::canonicalize(&scratch_dir).map_err(|e| Error::io("open", &scratch_dir, e))?;
        let mounts: Vec<Mount> = v["mounts"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|m| mount(m, &real_scratch))
            .collect();
        let scratch = match mounts.iter().any(|m| matches!(m.what, What::Scratch(_))) {
            true => Some(scratch_region(&scratch_dir, &mounts)?),
            false => None,
        };
        let tree = Tree::open_one_mount(&root_path)?;
        let root_writable = in_bundle(&tree, bundle)?;
        let fences = fences(&tree, &mounts);
        let root = Region { tree, tops: Vec::new(), fences };
        // What is copied in is the box's user's: the image's, or --user's.
        let id = |p: &str| v.pointer(p).and_then(Value::as_u64).and_then(|b| u32::try_from(b).ok());
        let (uid, gid) =
            (id("/process/user/uid").unwrap_or(SANDBOX_UID), id("/process/user/gid").unwrap_or(SANDBOX_UID));
        let user = (ids.host(uid), ids.host(gid));
        Ok(BoxFs { user, mounts, root, root_writable, scratch })
    }

    /// Finds box path `path` (absolute, without `..`): the tree it is in,
    /// its deepest existing directory, the missing names and the last one.
    /// With `write`, a path the box's copies can't write to is refused.
    pub(crate) fn reach(&self, path: &Path, write: bool) -> Result<Reached<'_>> {
        let mut comps = tree::components(path).map_err(Error::Copy)?;
        let mut via = String::new();
        for _ in 0..MAX_HOPS {
            let (region, inner) =
                self.locate(&comps, write).map_err(|e| Error::Copy(format!("{}{via}: {e}", path.display())))?;
            let shown: PathBuf = Path::new("/").join(comps.iter().collect::<PathBuf>());
            match down(region, &inner).map_err(|e| Error::Copy(format!("{}{via}: {e}", shown.display())))? {
                Down::Reached { dir, missing, name } => {
                    return Ok(Reached { region, path: shown, dir, missing, name });
                }
                Down::Link { index, target } => {
                    // The link's box path: its path in the tree, moved back
                    // under the mount's destination (our scratch
                    // directories themselves are never links).
                    let at = (index + comps.len())
                        .checked_sub(inner.len())
                        .ok_or_else(|| Error::Copy(format!("{}: {}", shown.display(), why(Errno::ELOOP))))?;
                    let link: PathBuf = Path::new("/").join(comps[..=at].iter().collect::<PathBuf>());
                    via = format!(" (by way of {} -> {})", link.display(), Path::new(&target).display());
                    let mut next = through(&link, Path::new(&target));
                    next.extend_from_slice(&comps[at + 1..]);
                    comps = next;
                }
            }
        }
        Err(Error::Copy(format!("{}: too many levels of symbolic links", path.display())))
    }

    /// The tree that holds box path `comps`, and the path in it.
    fn locate(&self, comps: &[OsString], write: bool) -> Result<(&Region, Vec<OsString>), String> {
        let under = self.mounts.iter().enumerate().filter(|(_, m)| comps.starts_with(&m.dest));
        let Some((_, m)) = under.max_by_key(|(i, m)| (m.dest.len(), *i)) else {
            if write && !self.root_writable {
                return Err(format!(
                    "the box's root is the directory given with --rootfs or --bundle, which copies never write \
                     (copy into {})",
                    self.own_mounts()
                ));
            }
            return Ok((&self.root, comps.to_vec()));
        };
        match (&m.what, &self.scratch) {
            (What::Scratch(src), Some(scratch)) => {
                let src = tree::components(src)?;
                Ok((scratch, src.into_iter().chain(comps[m.dest.len()..].iter().cloned()).collect()))
            }
            _ => Err(refusal(m)),
        }
    }

    /// The box's own mounts, for messages: "/tmp or /work".
    fn own_mounts(&self) -> String {
        let own = self.mounts.iter().filter(|m| matches!(m.what, What::Scratch(_)));
        let names: Vec<String> = own.map(|m| box_path(&m.dest).display().to_string()).collect();
        if names.is_empty() {
            "the box's own mounts".into()
        } else {
            names.join(" or ")
        }
    }

    /// Checks that directory `dir` (in `region`) is one the box sees
    /// where the copy meets it: not at or under a mount point, and inside
    /// /work or /tmp of the scratch tree. `path` is its box path, for
    /// messages.
    pub(crate) fn admit(&self, region: &Region, dir: &OwnedFd, path: &Path) -> Result<()> {
        let up = region.tree.ancestry(dir)?;
        if let Some(m) = up.iter().find_map(|id| region.fence(id)).map(|i| &self.mounts[i]) {
            let dest = box_path(&m.dest);
            let why = match m.what {
                What::Scratch(_) => {
                    format!("the host holds an empty mount point there, not the box's {}", dest.display())
                }
                _ => refusal(m),
            };
            return Err(Error::Copy(format!(
                "{}: a symlink on the way leads into {}: {why}",
                path.display(),
                dest.display()
            )));
        }
        if !region.tops.is_empty() && !up.iter().any(|id| region.tops.contains(id)) {
            return Err(Error::Copy(format!(
                "{}: a symlink on the way leads out of {}, to nothing the box has there",
                path.display(),
                self.own_mounts()
            )));
        }
        Ok(())
    }

    /// If `id`, something in `region`, is one of the box's mount points:
    /// what the box has there.
    pub(crate) fn mounted(&self, region: &Region, id: &FileId) -> Option<Mounted<'_>> {
        let m = &self.mounts[region.fence(id)?];
        Some(match (&m.what, &self.scratch) {
            (What::Scratch(src), Some(scratch)) => Mounted::Own { dest: box_path(&m.dest), region: scratch, path: src },
            _ => Mounted::Foreign(refusal(m)),
        })
    }
}

impl Region {
    fn fence(&self, id: &FileId) -> Option<usize> {
        self.fences.iter().find(|(f, _)| f == id).map(|(_, i)| *i)
    }
}

/// Whether the root `tree` is the box's own, in its bundle dir `bundle`
/// (the skeleton, or an overlay mounted there), not a directory of the
/// caller's: its parent is the bundle dir.
fn in_bundle(tree: &Tree, bundle: &Path) -> Result<bool> {
    let up = tree::open_at(&tree.fd(), OsStr::new(".."), OFlag::O_PATH | OFlag::O_DIRECTORY, 0)
        .and_then(|fd| nix::sys::stat::fstat(fd.as_raw_fd()))
        .map_err(|e| Error::io("open", tree.path().join(".."), e.into()))?;
    let b = nix::sys::stat::stat(bundle).map_err(|e| Error::io("stat", bundle, e.into()))?;
    Ok(tree::file_id(&up) == tree::file_id(&b))
}

/// One entry of config.json's mounts; the box's own scratch binds are
/// those whose source is in its scratch tmpfs (`scratch`, canonical).
fn mount(m: &Value, scratch: &Path) -> Option<Mount> {
    let dest = tree::components(Path::new(m["destination"].as_str()?)).ok()?;
    let kind = m["type"].as_str().unwrap_or("bind");
    let source = PathBuf::from(m["source"].as_str().unwrap_or(""));
    let real = std::fs::canonicalize(&source).unwrap_or_else(|_| source.clone());
    let what = match real.strip_prefix(scratch) {
        Ok(rel) if kind == "bind" => What::Scratch(rel.to_path_buf()),
        _ if kind == "bind" => What::Host(source),
        _ => What::Kernel(kind.to_string()),
    };
    Some(Mount { dest, what })
}

fn scratch_region(dir: &Path, mounts: &[Mount]) -> Result<Region> {
    let tree = Tree::open_one_mount(dir)?;
    let mut tops = Vec::new();
    for m in mounts {
        if let What::Scratch(src) = &m.what {
            let fd = tree.open_in(src, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
            tops.push(tree::file_id(
                &nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| Error::io("stat", dir.join(src), e.into()))?,
            ));
        }
    }
    Ok(Region { tree, tops, fences: Vec::new() })
}

/// The box's mount points in its root tree, resolved as init resolves
/// them (symlinks followed inside the root); those not made on the host
/// (under /dev) are left out.
fn fences(tree: &Tree, mounts: &[Mount]) -> Vec<(FileId, usize)> {
    let mut out = Vec::new();
    for (i, m) in mounts.iter().enumerate() {
        let Ok(fd) = tree.open_in(&box_path(&m.dest), OFlag::O_PATH) else { continue };
        if let Ok(st) = nix::sys::stat::fstat(fd.as_raw_fd()) {
            out.push((tree::file_id(&st), i));
        }
    }
    out
}

/// Why a path under mount `m` is not copied to or from.
fn refusal(m: &Mount) -> String {
    let dest = box_path(&m.dest);
    match &m.what {
        What::Host(src) => format!(
            "the box's {} is the host's {}, bound read-only: copies reach only the box's own files",
            dest.display(),
            src.display()
        ),
        What::Kernel(kind) => {
            format!(
                "the box's {} is a {kind} mount made inside the box: the host has nothing to copy there",
                dest.display()
            )
        }
        What::Scratch(_) => format!("the box's {} is not reachable from the host", dest.display()),
    }
}

fn box_path(comps: &[OsString]) -> PathBuf {
    Path::new("/").join(comps.iter().collect::<PathBuf>())
}

/// The box path a symlink at box path `link` with `target` names, `..`
/// taken lexically (as far as `/`).
pub(crate) fn through(link: &Path, target: &Path) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    if !target.is_absolute() {
        let parent = link.parent().unwrap_or(Path::new("/"));
        out.extend(parent.components().filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            _ => None,
        }));
    }
    for c in target.components() {
        match c {
            Component::Normal(n) => out.push(n.to_os_string()),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// What walking down a path in one tree found.
enum Down {
    Reached {
        dir: OwnedFd,
        missing: Vec<OsString>,
        name: Option<OsString>,
    },
    /// A symlink at component `index` that leads to nothing in this tree.
    Link {
        index: usize,
        target: OsString,
    },
}

/// Walks down `inner`, a path in `region`'s tree, to its last name.
fn down(region: &Region, inner: &[OsString]) -> std::result::Result<Down, String> {
    let tree = &region.tree;
    let Some((name, parents)) = inner.split_last() else {
        let dir = tree.dir(Path::new("/")).map_err(|e| why(e.errno))?;
        return Ok(Down::Reached { dir, missing: Vec::new(), name: None });
    };
    let name = Some(name.clone());
    // Most paths are all there: one lookup.
    match tree.dir(&parents.iter().collect::<PathBuf>()) {
        Ok(dir) => return Ok(Down::Reached { dir, missing: Vec::new(), name }),
        Err(e) if e.errno != Errno::ENOENT => return Err(why(e.errno)),
        Err(_) => {}
    }
    let mut dir = tree.dir(Path::new("/")).map_err(|e| why(e.errno))?;
    for (i, comp) in parents.iter().enumerate() {
        match tree.dir(&parents[..=i].iter().collect::<PathBuf>()) {
            Ok(d) => dir = d,
            Err(e) if e.errno != Errno::ENOENT => return Err(why(e.errno)),
            Err(_) => match tree::lstat_at(&dir, comp).map(|st| tree::kind(&st)) {
                Ok(nix::sys::stat::SFlag::S_IFLNK) => {
                    let target = nix::fcntl::readlinkat(Some(dir.as_raw_fd()), comp.as_os_str()).map_err(why)?;
                    return Ok(Down::Link { index: i, target });
                }
                Err(Errno::ENOENT) => return Ok(Down::Reached { dir, missing: parents[i..].to_vec(), name }),
                Ok(_) => return Err(why(Errno::ENOTDIR)),
                Err(e) => return Err(why(e)),
            },
        }
    }
    Err(why(Errno::ENOENT))
}

/// An errno as a copy's error tells it.
pub(crate) fn why(e: Errno) -> String {
    match e {
        Errno::ENOENT => "no such file or directory in the box".into(),
        Errno::ENOTDIR => "a component on the way is not a directory".into(),
        Errno::EXDEV | Errno::ELOOP => "it leads out of the box's files".into(),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_read_as_box_paths() {
        fn p(s: &str) -> &Path {
            Path::new(s)
        }
        let names = |v: Vec<OsString>| box_path(&v);
        assert_eq!(names(through(p("/work/l"), p("/app/x"))), p("/app/x"));
        assert_eq!(names(through(p("/work/d/l"), p("../x"))), p("/work/x"));
        assert_eq!(names(through(p("/bin"), p("usr/bin"))), p("/usr/bin"));
        assert_eq!(names(through(p("/work/l"), p("../../../../etc/./shadow"))), p("/etc/shadow"));
    }

    #[test]
    fn mounts_are_told_apart_by_source() {
        let scratch = Path::new("/b/scratch");
        let m = |v: Value| mount(&v, scratch).unwrap();
        let w = m(serde_json::json!({"destination": "/work", "type": "bind", "source": "/b/scratch/work"}));
        assert!(matches!(&w.what, What::Scratch(p) if p == Path::new("work")));
        let u = m(serde_json::json!({"destination": "/usr", "type": "bind", "source": "/usr"}));
        assert!(refusal(&u).contains("host's /usr, bound read-only"), "{}", refusal(&u));
        let p = m(serde_json::json!({"destination": "/proc", "type": "proc", "source": "proc"}));
        assert!(refusal(&p).contains("proc mount"), "{}", refusal(&p));
    }
}
