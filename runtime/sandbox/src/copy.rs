//! Files into and out of boxes: `--copy-in SRC:DST` before the command
//! runs, and `sandbox cp` for a launched box. Runs in the runtime process,
//! as the host's root, on the box's storage as the host sees it (module
//! `storage`), never through the box's /proc.
//!
//! Whatever is on the box's side may have been planted by the box, and may
//! change while it is copied: box paths are resolved inside the box's root
//! (`openat2(RESOLVE_IN_ROOT)`: a symlink on the way resolves as it would
//! in the box, never to the host), the last component is never followed,
//! and trees are walked from directory fd to directory fd with
//! `O_NOFOLLOW`. Copying out, a symlink is copied as a symlink (its target
//! unchanged) and set-id and sticky bits are dropped; copying in, a file
//! is written under a temporary name and renamed over whatever the box had
//! at its name, so a symlink there is replaced, not written through. Both
//! ways, bytes and entries are capped ([`DEFAULT_COPY_LIMIT`]).

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag};

use crate::error::{Error, Result};
use crate::storage::{self, BoxFs};
use tinyrun::tree;

/// The default cap on the bytes of one copy (or of all `--copy-in`s of a
/// box together).
pub const DEFAULT_COPY_LIMIT: u64 = 1 << 30;
/// The cap on files, directories and links of one copy.
const MAX_ENTRIES: u64 = 100_000;

/// `--copy-in SRC:DST`: host path SRC becomes box path DST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyIn {
    /// On the host.
    pub src: PathBuf,
    /// In the box, absolute.
    pub dst: PathBuf,
}

impl std::str::FromStr for CopyIn {
    type Err = Error;

    /// `SRC:DST`, split at the last colon (a host path may have colons).
    fn from_str(s: &str) -> Result<CopyIn> {
        let bad = |why: &str| Error::InvalidArgument(format!("invalid --copy-in {s:?}: {why} (use HOSTPATH:/BOXPATH)"));
        let (src, dst) = s.rsplit_once(':').ok_or_else(|| bad("no colon"))?;
        if src.is_empty() || !dst.starts_with('/') {
            return Err(bad("the box path must be absolute"));
        }
        tree::split(Path::new(dst)).map_err(|e| bad(&e))?;
        Ok(CopyIn { src: src.into(), dst: dst.into() })
    }
}

/// Counts a copy against its caps.
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

fn box_err<'a>(what: &str, path: &'a Path) -> impl FnOnce(Errno) -> Error + 'a {
    let what = what.to_string();
    move |e| {
        let why = match e {
            Errno::ENOENT => "no such file or directory in the box".to_string(),
            Errno::EXDEV | Errno::ELOOP => "it leads out of the box's storage".to_string(),
            e => e.to_string(),
        };
        Error::Copy(format!("{what} {}: {why}", path.display()))
    }
}

/// `sandbox cp`: one of `from` and `to` is `ID:/PATH` in a launched box,
/// the other a host path. Returns the bytes copied.
pub fn cp(root: &Path, from: &str, to: &str, limit: u64) -> Result<u64> {
    match (box_path(from), box_path(to)) {
        (None, Some((id, p))) => {
            let (fs, _touch) = open(root, id)?;
            into_box(&fs, Path::new(from), p, &mut Budget::new(limit), false)
        }
        (Some((id, p)), None) => {
            let (fs, _touch) = open(root, id)?;
            out_of_box(&fs, p, Path::new(to), &mut Budget::new(limit))
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
    let touch = crate::run::live_box(root, id)?.2;
    Ok((storage::open_box(&root.join("sandbox-bundles").join(id))?, touch))
}

/// Every `--copy-in` of `copy_ins`, into the box whose bundle dir is
/// `bundle`, under one cap of `limit` bytes; missing parents are made.
pub(crate) fn copy_ins(bundle: &Path, copy_ins: &[CopyIn], limit: u64) -> Result<()> {
    if copy_ins.is_empty() {
        return Ok(());
    }
    let fs = storage::open_box(bundle)?;
    let mut budget = Budget::new(limit);
    for c in copy_ins {
        into_box(&fs, &c.src, &c.dst, &mut budget, true)
            .map_err(|e| Error::Copy(format!("--copy-in {}:{}: {e}", c.src.display(), c.dst.display())))?;
    }
    Ok(())
}

/// Host `src` to box `dst`. An existing directory at `dst` takes a file
/// under the file's name, or a directory's contents; anything else at
/// `dst` is replaced.
fn into_box(fs: &BoxFs, src: &Path, dst: &Path, budget: &mut Budget, parents: bool) -> Result<u64> {
    let meta = std::fs::metadata(src).map_err(|e| Error::io("copy", src, e))?;
    prescan(src, &meta, budget)?;
    let (parent, name) = tree::split(dst).map_err(|e| Error::Copy(format!("box path {e}")))?;
    fs.check(dst)?;
    let pfd = if parents { fs.tree.mkdir_all_owned(&parent, 0o755, fs.user) } else { fs.tree.dir(&parent) }
        .map_err(|e| box_err("copy to", dst)(e.errno))?;
    let existing = tree::lstat_at(&pfd, &name).ok().map(|st| tree::kind(&st));
    let mut w = Writer { user: fs.user, copied: 0 };
    match (existing, meta.is_dir()) {
        (Some(SFlag::S_IFDIR), false) => {
            let dir = tree::subdir(&pfd, &name).map_err(box_err("copy to", dst))?;
            let base = src.file_name().ok_or_else(|| Error::Copy(format!("{} has no file name", src.display())))?;
            w.put(src, &meta, &dir, base)?;
        }
        _ => w.put(src, &meta, &pfd, &name)?,
    }
    Ok(w.copied)
}

/// Checks the caps before anything is written, so a copy over a cap
/// leaves nothing half done.
fn prescan(src: &Path, meta: &std::fs::Metadata, budget: &mut Budget) -> Result<()> {
    budget.entry()?;
    if meta.is_file() {
        budget.bytes(meta.len())?;
    } else if meta.is_dir() {
        for e in std::fs::read_dir(src).map_err(|e| Error::io("read", src, e))? {
            let e = e.map_err(|e| Error::io("read", src, e))?;
            let m = e.metadata().map_err(|er| Error::io("stat", e.path(), er))?;
            prescan(&e.path(), &m, budget)?;
        }
    }
    Ok(())
}

/// Writes host files into a box directory, as the box's user.
struct Writer {
    user: (u32, u32),
    copied: u64,
}

impl Writer {
    fn put(&mut self, src: &Path, meta: &std::fs::Metadata, dir: &OwnedFd, name: &OsStr) -> Result<()> {
        let perm = Mode::from_bits_truncate(meta.mode() & 0o777);
        let ft = meta.file_type();
        if ft.is_dir() {
            let sub = self.dir_at(dir, name, perm, src)?;
            for e in std::fs::read_dir(src).map_err(|e| Error::io("read", src, e))? {
                let e = e.map_err(|e| Error::io("read", src, e))?;
                let m = std::fs::symlink_metadata(e.path()).map_err(|er| Error::io("stat", e.path(), er))?;
                self.put(&e.path(), &m, &sub, &e.file_name())?;
            }
            return Ok(());
        }
        let tmp = tree::temp_name(name);
        let made = if ft.is_symlink() {
            let target = std::fs::read_link(src).map_err(|e| Error::io("readlink", src, e))?;
            nix::unistd::symlinkat(&target, Some(dir.as_raw_fd()), tmp.as_os_str())
                .map_err(|e| Error::io("copy to the box", src, e.into()))
                .and_then(|()| tree::chown_at(dir, &tmp, self.user).map_err(|e| Error::io("chown", src, e.into())))
        } else if ft.is_file() {
            self.file_at(src, meta.len(), dir, &tmp, perm)
        } else {
            return Err(Error::Copy(format!("{} is not a file, directory or symlink", src.display())));
        };
        let placed = made.and_then(|()| {
            nix::fcntl::renameat(Some(dir.as_raw_fd()), tmp.as_os_str(), Some(dir.as_raw_fd()), name)
                .map_err(|e| Error::Copy(format!("put {} in the box: {e}", src.display())))
        });
        if placed.is_err() {
            let _ = tree::remove_at(dir, &tmp);
        }
        placed
    }

    /// An existing directory of the box (never a symlink), or a new one.
    fn dir_at(&self, dir: &OwnedFd, name: &OsStr, perm: Mode, src: &Path) -> Result<OwnedFd> {
        match tree::lstat_at(dir, name) {
            // Merged into, and made the box user's like the rest of the copy.
            Ok(st) if tree::kind(&st) == SFlag::S_IFDIR => {
                let sub = tree::subdir(dir, name).map_err(|e| Error::Copy(format!("copy {}: {e}", src.display())))?;
                let (uid, gid) = self.user;
                nix::unistd::fchown(sub.as_raw_fd(), Some(uid.into()), Some(gid.into()))
                    .map_err(|e| Error::io("chown", src, e.into()))?;
                nix::sys::stat::fchmod(sub.as_raw_fd(), perm).map_err(|e| Error::io("chmod", src, e.into()))?;
                return Ok(sub);
            }
            found => {
                if found.is_ok() {
                    tree::remove_at(dir, name).map_err(|e| Error::io("replace in the box", src, e.into()))?;
                }
                nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), name, perm)
                    .map_err(|e| Error::io("create in the box", src, e.into()))?;
                tree::chown_at(dir, name, self.user).map_err(|e| Error::io("chown", src, e.into()))?;
            }
        }
        tree::subdir(dir, name).map_err(|e| Error::Copy(format!("copy {}: {e}", src.display())))
    }

    fn file_at(&mut self, src: &Path, len: u64, dir: &OwnedFd, tmp: &OsString, perm: Mode) -> Result<()> {
        let mut from = std::fs::File::open(src).map_err(|e| Error::io("open", src, e))?;
        let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW;
        let fd = tree::open_at(dir, tmp, flags, 0o600).map_err(|e| Error::io("create in the box", src, e.into()))?;
        let mut to = std::fs::File::from(fd);
        // At most what the caps were checked against, even if it grew.
        let n = std::io::copy(&mut (&mut from).take(len), &mut to).map_err(|e| Error::io("copy", src, e))?;
        self.copied += n;
        let (uid, gid) = self.user;
        nix::unistd::fchown(to.as_raw_fd(), Some(uid.into()), Some(gid.into()))
            .map_err(|e| Error::io("chown", src, e.into()))?;
        nix::sys::stat::fchmod(to.as_raw_fd(), perm).map_err(|e| Error::io("chmod", src, e.into()))
    }
}

/// Box `src` to host `dst` (into it, if it is a directory). The copy is
/// made under a temporary name and renamed into place when complete.
fn out_of_box(fs: &BoxFs, src: &Path, dst: &Path, budget: &mut Budget) -> Result<u64> {
    let (parent, name) = tree::split(src).map_err(|e| Error::Copy(format!("box path {e}")))?;
    fs.check(src)?;
    let pfd = fs.tree.dir(&parent).map_err(|e| box_err("copy from", src)(e.errno))?;
    let st = tree::lstat_at(&pfd, &name).map_err(box_err("copy from", src))?;
    let target = if dst.is_dir() { dst.join(&name) } else { dst.to_path_buf() };
    if target.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        return Err(Error::Copy(format!("{} exists and is a directory", target.display())));
    }
    let host_parent = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = host_parent.join(tree::temp_name(&name));
    let mut r = Reader { budget, copied: 0 };
    let done = r
        .get(&pfd, &name, tree::kind(&st), &tmp, true)
        .and_then(|()| std::fs::rename(&tmp, &target).map_err(|e| Error::io("rename", &target, e)));
    if done.is_err() {
        let _ = std::fs::remove_dir_all(&tmp).or_else(|_| std::fs::remove_file(&tmp));
    }
    done.map(|()| r.copied).map_err(|e| Error::Copy(format!("copy {} out of the box: {e}", src.display())))
}

/// Reads box files through fds, never following a symlink.
struct Reader<'a> {
    budget: &'a mut Budget,
    copied: u64,
}

impl Reader<'_> {
    fn get(&mut self, dir: &OwnedFd, name: &OsStr, kind: SFlag, to: &Path, top: bool) -> Result<()> {
        self.budget.entry()?;
        match kind {
            SFlag::S_IFLNK => {
                let target = nix::fcntl::readlinkat(Some(dir.as_raw_fd()), name)
                    .map_err(|e| Error::io("readlink in the box", to, e.into()))?;
                std::os::unix::fs::symlink(target, to).map_err(|e| Error::io("symlink", to, e))
            }
            SFlag::S_IFREG => self.file(dir, name, to),
            SFlag::S_IFDIR => {
                let sub = tree::subdir(dir, name).map_err(|e| Error::io("open in the box", to, e.into()))?;
                let st = nix::sys::stat::fstat(sub.as_raw_fd()).map_err(|e| Error::io("stat", to, e.into()))?;
                std::fs::create_dir(to).map_err(|e| Error::io("create", to, e))?;
                for child in tree::entries(&sub).map_err(|e| Error::io("list in the box", to, e.into()))? {
                    let Ok(cst) = tree::lstat_at(&sub, &child) else { continue };
                    self.get(&sub, &child, tree::kind(&cst), &to.join(&child), false)?;
                }
                let perm = std::fs::Permissions::from_mode(st.st_mode & 0o777);
                std::fs::set_permissions(to, perm).map_err(|e| Error::io("chmod", to, e))
            }
            // Fifos, sockets and devices have no content to copy.
            _ if !top => Ok(()),
            _ => Err(Error::Copy("not a file, directory or symlink".into())),
        }
    }

    fn file(&mut self, dir: &OwnedFd, name: &OsStr, to: &Path) -> Result<()> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK;
        let fd = tree::open_at(dir, name, flags, 0).map_err(|e| Error::io("open in the box", to, e.into()))?;
        let mut from = std::fs::File::from(fd);
        let st = from.metadata().map_err(|e| Error::io("stat", to, e))?;
        if !st.is_file() {
            // Swapped for something else since it was looked at.
            return Err(Error::Copy(format!("{} changed while it was copied", to.display())));
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(st.mode() & 0o777)
            .open(to)
            .map_err(|e| Error::io("create", to, e))?;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = from.read(&mut buf).map_err(|e| Error::io("read in the box", to, e))?;
            if n == 0 {
                return Ok(());
            }
            self.budget.bytes(n as u64)?;
            self.copied += n as u64;
            out.write_all(&buf[..n]).map_err(|e| Error::io("write", to, e))?;
        }
    }
}

impl BoxFs {
    /// With no image, only /work and /tmp are the box's storage.
    pub(crate) fn check(&self, p: &Path) -> Result<()> {
        if self.whole_root {
            return Ok(());
        }
        let first = tree::components(p).ok().and_then(|c| c.first().cloned());
        match first.as_deref().and_then(OsStr::to_str) {
            Some("work" | "tmp") => Ok(()),
            _ => Err(Error::Copy(format!(
                "{}: only /work and /tmp of a box without --image can be copied to and from",
                p.display()
            ))),
        }
    }
}
