//! Files into and out of boxes: `--copy-in SRC:DST` before the command
//! runs, and `sandbox cp` for a launched box. Runs in the runtime process,
//! as the host's root, on the box's files as the host sees them (module
//! `boxfs`), never through the box's /proc.
//!
//! Both sides may be hostile and may change while they are copied: the box
//! planted whatever is on its side, and a caller's source tree (an agent's
//! workspace) may be written by someone else. So the paths the caller
//! names are opened as given (on the host, following symlinks, as `cp`
//! does; in the box, resolved inside the box, module `boxfs`), and below
//! them trees are walked from directory fd to directory fd, nothing
//! followed, each entry told apart by `fstat` of the fd opened (module
//! `walk`). Where the copy goes is `docker cp`'s rule, both ways, and it
//! is made whole under a temporary name before it is moved into place
//! (module `place`): a copy that fails leaves nothing behind. Both ways,
//! bytes and entries are capped ([`DEFAULT_COPY_LIMIT`]), counted before
//! anything is written when copying in.
//!
//! Symlinks: copying in, each is copied as it is (the box resolves it in
//! its own root). Copying out, the caller must never be left with a link
//! to a host path: a symlink is copied only if it stays inside the copy
//! ([`walk::stays_inside`]); otherwise the copy is refused, or, with
//! [`CpOptions::follow_links`] (`-L`), the link is followed inside the box
//! and what it names there is copied.

mod place;
mod walk;

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::stat::SFlag;

use crate::boxfs::{BoxFs, Region};
use crate::error::{Error, Result};
use crate::options::{CopyIn, DEFAULT_COPY_LIMIT};
use place::{Dest, Src, Target};
use tinyrun::tree;
use walk::{fail, At, Copier, Item};

/// The cap on files, directories and links of one copy.
const MAX_ENTRIES: u64 = 100_000;

/// How `sandbox cp` copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpOptions {
    /// The cap on the bytes copied.
    pub limit: u64,
    /// Copying out, a symlink that leads out of what is copied is followed
    /// inside the box and what it names is copied, instead of refused.
    pub follow_links: bool,
}

impl Default for CpOptions {
    fn default() -> Self {
        CpOptions { limit: DEFAULT_COPY_LIMIT, follow_links: false }
    }
}

/// Counts a copy against its caps.
#[derive(Clone)]
struct Budget {
    limit: u64,
    bytes: u64,
    entries: u64,
}

impl Budget {
    fn new(limit: u64) -> Budget {
        Budget { limit, bytes: 0, entries: 0 }
    }

    fn bytes(&mut self, n: u64) -> Result<()> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.limit {
            return Err(Error::Copy(format!(
                "more than {} bytes: over the copy size cap (raise it with --copy-limit)",
                self.limit
            )));
        }
        Ok(())
    }

    fn entry(&mut self) -> Result<()> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return Err(Error::Copy(format!("more than {MAX_ENTRIES} files: over the cap on entries per copy")));
        }
        Ok(())
    }
}

/// `sandbox cp`: one of `from` and `to` is `ID:/PATH` in a launched box,
/// the other a host path. Returns the bytes copied.
pub fn cp(root: &Path, from: &str, to: &str, opts: &CpOptions) -> Result<u64> {
    let mut budget = Budget::new(opts.limit);
    match (box_path(from), box_path(to)) {
        (None, Some((id, p))) => {
            let (fs, _touch) = open(root, id)?;
            into_box(&fs, Path::new(from), p, &mut budget)
        }
        (Some((id, p)), None) => {
            let (fs, _touch) = open(root, id)?;
            out_of_box(&fs, p, Path::new(to), opts.follow_links, &mut budget)
        }
        (Some(_), Some(_)) => {
            Err(Error::InvalidArgument("sandbox cp copies between the host and one box, not two".into()))
        }
        (None, None) => {
            Err(Error::InvalidArgument(format!("sandbox cp: neither {from:?} nor {to:?} names a box path (ID:/PATH)")))
        }
    }
}

/// `ID:/PATH` → the id and the path.
fn box_path(arg: &str) -> Option<(&str, &Path)> {
    let (id, p) = arg.split_once(':')?;
    (tinyrun::check_id(id).is_ok() && p.starts_with('/')).then_some((id, Path::new(p)))
}

/// Box `id`'s files, and the box touched while the copy lasts (a copy is
/// use: module `idle`). A box that expired says so.
fn open(root: &Path, id: &str) -> Result<(BoxFs, crate::idle::Touch)> {
    let touch = crate::expiry::live_box(root, id)?.2;
    Ok((BoxFs::open(&crate::layout::bundle(root, id))?, touch))
}

/// Every `--copy-in` of `copy_ins`, into the box whose bundle dir is
/// `bundle`, under one cap of `limit` bytes.
pub(crate) fn copy_ins(bundle: &Path, copy_ins: &[CopyIn], limit: u64) -> Result<()> {
    if copy_ins.is_empty() {
        return Ok(());
    }
    let fs = BoxFs::open(bundle)?;
    let mut budget = Budget::new(limit);
    for c in copy_ins {
        into_box(&fs, &c.src, &c.dst, &mut budget)
            .map_err(|e| Error::Copy(format!("--copy-in {}:{}: {e}", c.src.display(), c.dst.display())))?;
    }
    Ok(())
}

/// `p` ends with `/.` (or is `.`): a directory's entries, not itself.
fn contents(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    b == b"." || b.ends_with(b"/.")
}

/// `p` ends with `/` or `/.`: it must be a directory.
fn names_dir(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    b.len() > 1 && b.ends_with(b"/") || contents(p)
}

/// Host `src` to box `dst`.
fn into_box(fs: &BoxFs, src: &Path, dst: &Path, budget: &mut Budget) -> Result<u64> {
    // The path the caller named is theirs: followed, as `cp` does.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(src)
        .map_err(|e| Error::io("copy", src, e))?;
    let st = nix::sys::stat::fstat(file.as_raw_fd()).map_err(fail("stat", src))?;
    let top = match tree::kind(&st) {
        SFlag::S_IFREG => Item::File(file, st),
        SFlag::S_IFDIR => Item::Dir(file.into(), st),
        _ => return Err(Error::Copy(format!("{}: not a file or directory", src.display()))),
    };
    // Over a cap before anything is written. A source that grows after
    // this is caught by the copy's own count.
    walk::prescan(&top, src, 0, &mut budget.clone())?;
    let s = Src {
        dir: matches!(top, Item::Dir(..)),
        contents: contents(src),
        base: src.file_name().map(OsStr::to_os_string),
    };
    let (target, region, shown) = box_target(fs, dst, &s)?;
    let fence = |id: &tree::FileId| fs.mounted(region, id).map(|m| m.why());
    let mut c = Copier::into_box(fs.user, budget);
    let at = At { path: src.to_path_buf(), region: None };
    place::deliver(&target, &shown, Some(fs.user), &fence, |d, n| c.copy(top, &at, 0, d, n))?;
    Ok(c.copied)
}

/// Where a copy to box path `dst` goes, the tree it is in and the box
/// path of the directory it is written in; nothing is made yet.
fn box_target<'a>(fs: &'a BoxFs, dst: &Path, src: &Src) -> Result<(Target, &'a Region, PathBuf)> {
    let r = fs.reach(dst, true)?;
    let (region, path, parent) = (r.region, r.path, r.dir);
    let above = |n: usize| path.ancestors().nth(n).unwrap_or(Path::new("/")).to_path_buf();
    let (dest, at) = match r.name {
        // The box's root.
        None => (Dest::Dir(parent), path.clone()),
        Some(name) if !r.missing.is_empty() => {
            let at = above(1 + r.missing.len());
            (missing(parent, r.missing, name, dst, src), at)
        }
        Some(name) => match tree::lstat_at(&parent, &name) {
            Ok(st) if tree::kind(&st) == SFlag::S_IFDIR => {
                (Dest::Dir(tree::subdir(&parent, &name).map_err(fail("open", &path))?), path.clone())
            }
            Ok(_) => (Dest::Other { parent, name }, above(1)),
            Err(Errno::ENOENT) => (missing(parent, Vec::new(), name, dst, src), above(1)),
            Err(e) => return Err(fail("stat", &path)(e)),
        },
    };
    // Where the copy is written must be where the box sees it.
    let (Dest::Dir(dir) | Dest::Other { parent: dir, .. } | Dest::Missing { parent: dir, .. }) = &dest;
    fs.admit(region, dir, &path)?;
    Ok((place::rule(src, dest, &path)?, region, at))
}

/// A missing DEST: `chain` and `name` to be made in `parent`. `DEST/`
/// names a directory, made to hold a file.
fn missing(parent: OwnedFd, mut chain: Vec<OsString>, name: OsString, dst: &Path, src: &Src) -> Dest {
    match src.base.clone() {
        Some(base) if names_dir(dst) && !src.dir => {
            chain.push(name);
            Dest::Missing { parent, chain, name: base }
        }
        _ => Dest::Missing { parent, chain, name },
    }
}

/// Box `src` to host `dst`.
fn out_of_box(fs: &BoxFs, src: &Path, dst: &Path, follow: bool, budget: &mut Budget) -> Result<u64> {
    let (mut item, mut at) = walk::open_in_box(fs, src, None)?;
    // A symlink named by itself names something outside what is copied.
    if let Item::Link(target) = &item {
        if !follow {
            return Err(walk::outside(&at.path, target));
        }
        (item, at) = walk::open_in_box(fs, &at.path, Some(target))?;
    }
    let base = tree::components(src).map_err(Error::Copy)?.pop();
    // The box's root has no name to go by: its entries are copied.
    let s = Src { dir: matches!(item, Item::Dir(..)), contents: contents(src) || base.is_none(), base };
    let (target, shown) = host_target(dst, &s)?;
    let mut c = Copier::out_of_box(fs, follow, budget);
    place::deliver(&target, &shown, None, &|_| None, |d, n| c.copy(item, &at, 0, d, n))
        .map_err(|e| Error::Copy(format!("copy {} out of the box: {e}", src.display())))?;
    Ok(c.copied)
}

/// Where a copy to host path `dst` goes, and the path of the directory
/// it goes into. `dst` itself is the caller's path, followed as `cp`
/// follows it; below it nothing is.
fn host_target(dst: &Path, src: &Src) -> Result<(Target, PathBuf)> {
    let parent = match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let named = || {
        dst.file_name().map(OsStr::to_os_string).ok_or_else(|| Error::Copy(format!("{}: names no file", dst.display())))
    };
    let in_parent = || {
        open_dir(parent).map_err(|_| {
            Error::Copy(format!(
                "{}: no such directory (sandbox cp makes missing directories in the box, not on the host)",
                parent.display()
            ))
        })
    };
    let (dest, at) = match std::fs::metadata(dst) {
        Ok(m) if m.is_dir() => (Dest::Dir(open_dir(dst)?), dst),
        Ok(_) => (Dest::Other { parent: in_parent()?, name: named()? }, parent),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && names_dir(dst) => {
            return Err(Error::Copy(format!("{}: no such directory", dst.display())));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            (Dest::Missing { parent: in_parent()?, chain: Vec::new(), name: named()? }, parent)
        }
        Err(e) => return Err(Error::io("copy to", dst, e)),
    };
    Ok((place::rule(src, dest, dst)?, at.to_path_buf()))
}

fn open_dir(p: &Path) -> Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(p)
        .map_err(|e| Error::io("open", p, e))?;
    Ok(f.into())
}
