//! Where a copy goes, by `docker cp`'s rules, the same both ways, and
//! putting it there whole or not at all.
//!
//! For a source SRC and a destination DEST:
//! - DEST is an existing directory: SRC goes into it as DEST/basename(SRC),
//!   or, when SRC ends with `/.`, SRC's entries go into DEST;
//! - DEST is something else: a file SRC replaces it; a directory SRC is an
//!   error;
//! - DEST doesn't exist: it is made, as a copy of SRC (of a directory's
//!   entries). In a box its missing parents are made too, owned by the
//!   box's user; on the host, as with `docker cp`, they must exist.
//!
//! A copy is first made whole under a temporary name in the directory it
//! goes to, then checked against what is there, and only then renamed
//! into place: where it meets an existing directory the two are merged
//! (the existing directory keeps its owner and mode), a file or symlink
//! replaces a file or symlink, and a directory meeting a non-directory or
//! the reverse, or a mount point of the box, is an error before anything
//! is moved. Nothing there is ever followed.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;

use super::walk::fail;
use crate::error::{Error, Result};
use tinyrun::tree::{self, FileId};

/// What the rules need to know of the source.
pub(super) struct Src {
    pub(super) dir: bool,
    /// SRC ends with `/.`: a directory's entries, not the directory.
    pub(super) contents: bool,
    /// The name SRC goes by inside an existing DEST.
    pub(super) base: Option<OsString>,
}

/// What is at DEST.
pub(super) enum Dest {
    Dir(OwnedFd),
    /// Something else, at `name` in `parent`.
    Other {
        parent: OwnedFd,
        name: OsString,
    },
    /// Nothing: the missing directories `chain`, then `name`, in `parent`.
    Missing {
        parent: OwnedFd,
        chain: Vec<OsString>,
        name: OsString,
    },
}

/// Where a copy goes.
pub(super) enum Target {
    /// The copy becomes `dir/chain[0]/.../name`; the missing directories
    /// of `chain` are made with it.
    Into { dir: OwnedFd, chain: Vec<OsString>, name: OsString },
    /// The source directory's entries go into `dir`.
    Contents { dir: OwnedFd },
}

/// `docker cp`'s rule for DEST (`path`, for messages).
pub(super) fn rule(src: &Src, dest: Dest, path: &Path) -> Result<Target> {
    match dest {
        Dest::Dir(dir) if src.contents => Ok(Target::Contents { dir }),
        Dest::Dir(dir) => {
            let name = src.base.clone().ok_or_else(|| {
                Error::Copy(format!("{}: the source names no file (SRC/. copies its entries)", path.display()))
            })?;
            Ok(Target::Into { dir, chain: Vec::new(), name })
        }
        Dest::Other { .. } if src.dir => Err(Error::Copy(format!(
            "{} exists and is not a directory: a directory is not copied over it",
            path.display()
        ))),
        Dest::Other { parent, name } => Ok(Target::Into { dir: parent, chain: Vec::new(), name }),
        Dest::Missing { parent, chain, name } => Ok(Target::Into { dir: parent, chain, name }),
    }
}

/// The directory a target writes in.
pub(super) fn dir_of(t: &Target) -> &OwnedFd {
    match t {
        Target::Into { dir, .. } | Target::Contents { dir } => dir,
    }
}

/// Puts a copy at `target`: `fill` writes the whole copy under the name
/// it is given in the directory it is given; then it is checked (`fence`
/// says why an existing file is not to be replaced or merged into, if it
/// is not) and moved into place. `path` names the target's directory in
/// messages; new directories are `owner`'s.
pub(super) fn deliver(
    target: &Target,
    path: &Path,
    owner: Option<(u32, u32)>,
    fence: &dyn Fn(&FileId) -> Option<String>,
    fill: impl FnOnce(&OwnedFd, &OsStr) -> Result<()>,
) -> Result<()> {
    let dir = dir_of(target);
    let (tmp, done) = match target {
        Target::Into { chain, name, .. } => {
            let first = chain.first().unwrap_or(name);
            let tmp = temp_name(first)?;
            let done = (|| {
                match chain.split_first() {
                    None => fill(dir, &tmp)?,
                    Some((_, below)) => {
                        let mut d = mkdir_owned(dir, &tmp, owner, path)?;
                        for c in below {
                            d = mkdir_owned(&d, c, owner, path)?;
                        }
                        fill(&d, name)?;
                    }
                }
                check(dir, &tmp, dir, first, fence, &path.join(first))?;
                place(dir, &tmp, dir, first, path)
            })();
            (tmp, done)
        }
        Target::Contents { .. } => {
            let tmp = temp_name(OsStr::new("copy"))?;
            let done = (|| {
                fill(dir, &tmp)?;
                let staged = tree::subdir(dir, &tmp).map_err(fail("open", path))?;
                let names = tree::entries(&staged).map_err(fail("read", path))?;
                for n in &names {
                    check(&staged, n, dir, n, fence, &path.join(n))?;
                }
                for n in &names {
                    place(&staged, n, dir, n, path)?;
                }
                nix::unistd::unlinkat(Some(dir.as_raw_fd()), tmp.as_os_str(), UnlinkatFlags::RemoveDir)
                    .map_err(fail("remove the copy's temporary directory in", path))
            })();
            (tmp, done)
        }
    };
    if done.is_err() {
        let _ = tree::remove_at(dir, &tmp);
    }
    done
}

/// A name for the copy while it is made: hidden, and not one someone
/// who can write the directory (a workspace, the box) can guess and take
/// first, so what is removed after a failure is always ours.
fn temp_name(name: &OsStr) -> Result<OsString> {
    use std::io::Read;
    let mut b = [0u8; 6];
    let urandom = Path::new("/dev/urandom");
    std::fs::File::open(urandom).and_then(|mut f| f.read_exact(&mut b)).map_err(|e| Error::io("read", urandom, e))?;
    let mut t = tree::temp_name(name);
    t.push(format!(".{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()));
    Ok(t)
}

fn mkdir_owned(dir: &OwnedFd, name: &OsStr, owner: Option<(u32, u32)>, path: &Path) -> Result<OwnedFd> {
    nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(0o755))
        .map_err(fail("create a directory in", path))?;
    if let Some(owner) = owner {
        tree::chown_at(dir, name, owner).map_err(fail("chown a directory in", path))?;
    }
    tree::subdir(dir, name).map_err(fail("open a directory in", path))
}

fn is_dir(st: &FileStat) -> bool {
    tree::kind(st) == SFlag::S_IFDIR
}

/// Whether staged `sname` in `sdir` can go to `dname` in `ddir` (`path`).
fn check(
    sdir: &OwnedFd,
    sname: &OsStr,
    ddir: &OwnedFd,
    dname: &OsStr,
    fence: &dyn Fn(&FileId) -> Option<String>,
    path: &Path,
) -> Result<()> {
    let there = match tree::lstat_at(ddir, dname) {
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(fail("stat", path)(e)),
        Ok(st) => st,
    };
    if let Some(why) = fence(&tree::file_id(&there)) {
        return Err(Error::Copy(format!("{}: {why}", path.display())));
    }
    let staged = tree::lstat_at(sdir, sname).map_err(fail("stat the copy of", path))?;
    match (is_dir(&staged), is_dir(&there)) {
        (true, true) => {
            let s = tree::subdir(sdir, sname).map_err(fail("open the copy of", path))?;
            let d = tree::subdir(ddir, dname).map_err(fail("open", path))?;
            for n in tree::entries(&s).map_err(fail("read the copy of", path))? {
                check(&s, &n, &d, &n, fence, &path.join(&n))?;
            }
            Ok(())
        }
        (false, false) => Ok(()),
        (true, false) => Err(Error::Copy(format!(
            "{} exists and is not a directory: a directory is not copied over it",
            path.display()
        ))),
        (false, true) => Err(Error::Copy(format!("{} is a directory: it is not replaced by a file", path.display()))),
    }
}

/// Moves staged `sname` to `dname`, merging directories.
fn place(sdir: &OwnedFd, sname: &OsStr, ddir: &OwnedFd, dname: &OsStr, path: &Path) -> Result<()> {
    let merge = match (tree::lstat_at(ddir, dname), tree::lstat_at(sdir, sname)) {
        (Ok(there), Ok(staged)) => is_dir(&there) && is_dir(&staged),
        _ => false,
    };
    let shown: PathBuf = path.join(dname);
    if !merge {
        return nix::fcntl::renameat(Some(sdir.as_raw_fd()), sname, Some(ddir.as_raw_fd()), dname)
            .map_err(fail("put the copy in place at", &shown));
    }
    let s = tree::subdir(sdir, sname).map_err(fail("open the copy of", &shown))?;
    let d = tree::subdir(ddir, dname).map_err(fail("open", &shown))?;
    for n in tree::entries(&s).map_err(fail("read the copy of", &shown))? {
        place(&s, &n, &d, &n, &shown)?;
    }
    nix::unistd::unlinkat(Some(sdir.as_raw_fd()), sname, UnlinkatFlags::RemoveDir)
        .map_err(fail("remove the copy's temporary directory in", path))
}
