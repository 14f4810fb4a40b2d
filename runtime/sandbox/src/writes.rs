//! `--report-writes DIR`: the files a command wrote under a box directory,
//! found by scanning it before the command starts and after it ends, on
//! the box's files as the host sees them (module `boxfs`). Runs in the
//! runtime process. A file counts as written when it is new or its inode,
//! size or change time differ (a box can set a file's mtime back, not its
//! ctime). The walk never follows a symlink, and is capped.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::sys::stat::SFlag;
use serde::Serialize;

use crate::boxfs::BoxFs;
use crate::error::{Error, Result};
use tinyrun::tree;

/// Most entries scanned, and most files listed.
const MAX_SCANNED: usize = 200_000;
const MAX_LISTED: usize = 10_000;
/// Deeper directories are not scanned.
const MAX_DEPTH: usize = 64;

/// One file the command wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Written {
    /// Its path in the box.
    pub path: String,
    /// Its size in bytes after the command.
    pub size: u64,
    /// "file" or "symlink".
    pub kind: &'static str,
}

/// What `--report-writes` adds to the result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Writes {
    /// The directory that was watched.
    pub dir: String,
    /// New or changed files under it, by path.
    pub files: Vec<Written>,
    /// The scan or the list hit its cap: there may be more.
    pub truncated: bool,
}

/// The identity of a file's content at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sig {
    ino: u64,
    size: u64,
    ctime: (i64, i64),
    symlink: bool,
}

#[derive(Default)]
struct Scan {
    files: BTreeMap<PathBuf, Sig>,
    truncated: bool,
}

/// The state of `dir` in a box before its command runs.
pub(crate) struct Watch {
    fs: BoxFs,
    dir: PathBuf,
    before: Scan,
}

/// Starts watching `dir` of the box whose bundle dir is `bundle`.
pub(crate) fn watch(bundle: &Path, dir: &Path) -> Result<Watch> {
    let fs = BoxFs::open(bundle)?;
    let before = scan(&fs, dir).map_err(|e| match e {
        Error::Copy(e) => Error::InvalidArgument(format!("--report-writes: {e}")),
        e => e,
    })?;
    Ok(Watch { fs, dir: dir.to_path_buf(), before })
}

impl Watch {
    /// What changed since [`watch`].
    pub(crate) fn report(self) -> Result<Writes> {
        let after = scan(&self.fs, &self.dir)?;
        let mut out = Writes { dir: self.dir.display().to_string(), truncated: after.truncated, files: Vec::new() };
        for (path, sig) in &after.files {
            if self.before.files.get(path) == Some(sig) {
                continue;
            }
            if out.files.len() == MAX_LISTED {
                out.truncated = true;
                break;
            }
            let kind = if sig.symlink { "symlink" } else { "file" };
            out.files.push(Written { path: self.dir.join(path).display().to_string(), size: sig.size, kind });
        }
        Ok(out)
    }
}

fn scan(fs: &BoxFs, dir: &Path) -> Result<Scan> {
    let mut s = Scan::default();
    let r = fs.reach(dir, false)?;
    let fd = match &r.name {
        _ if !r.missing.is_empty() => return Ok(s),
        None => r.dir,
        Some(name) => match tree::subdir(&r.dir, name) {
            Ok(fd) => fd,
            // Not there (yet): nothing in it.
            Err(nix::errno::Errno::ENOENT) => return Ok(s),
            Err(e) => return Err(Error::io("--report-writes: open in the box", dir, e.into())),
        },
    };
    fs.admit(r.region, &fd, dir)?;
    walk(&fd, Path::new(""), 0, &mut s);
    Ok(s)
}

/// Records the files and symlinks under `dir`; what vanishes or can't be
/// opened mid-walk (the box may still be changing it) is left out.
fn walk(dir: &OwnedFd, at: &Path, depth: usize, s: &mut Scan) {
    let Ok(names) = tree::entries(dir) else { return };
    for name in names {
        if s.files.len() >= MAX_SCANNED || depth >= MAX_DEPTH {
            s.truncated = true;
            return;
        }
        let Ok(st) = tree::lstat_at(dir, &name) else { continue };
        let path = at.join(&name);
        match tree::kind(&st) {
            SFlag::S_IFDIR => {
                if let Ok(sub) = tree::subdir(dir, &name) {
                    walk(&sub, &path, depth + 1, s);
                }
            }
            k @ (SFlag::S_IFREG | SFlag::S_IFLNK) => {
                let sig = Sig {
                    ino: st.st_ino,
                    size: u64::try_from(st.st_size).unwrap_or(0),
                    ctime: (st.st_ctime, st.st_ctime_nsec),
                    symlink: k == SFlag::S_IFLNK,
                };
                s.files.insert(path, sig);
            }
            _ => {}
        }
    }
}
