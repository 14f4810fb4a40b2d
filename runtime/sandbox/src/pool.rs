//! A pool of idle sandboxes: `pool fill` makes them ahead of time, and
//! `run --pool` takes one, so the caller skips the start-up.

use std::path::Path;

use super::options::SandboxOptions;
use super::run::launch;
use crate::error::{Error, Result};
use crate::sys::{self, Forked};

/// Pool sandboxes' ids start with this, followed by the key.
const PREFIX: &str = "pool";

/// A key for everything that shapes a box's isolation (limits, seccomp,
/// network, root, mounts, env, ...), so a run only takes a box made exactly
/// as it would make one itself: never one with a looser filter or another
/// root.
fn key(o: &SandboxOptions) -> Result<String> {
    Ok(format!("{PREFIX}{}", super::spec::isolation_digest(o)?))
}

/// Marks a pool sandbox as taken; created with O_EXCL, so only one caller
/// ever gets a given sandbox.
const CLAIM: &str = "claimed";

fn idle(root: &Path, key: &str) -> Result<Vec<String>> {
    let k = format!("{key}-");
    Ok(super::run::list(root)?
        .into_iter()
        .filter(|s| s.id.starts_with(&k) && s.status == tinyrun::Status::Running)
        .filter(|s| !root.join("sandbox").join(&s.id).join(CLAIM).exists())
        .map(|s| s.id)
        .collect())
}

/// Where `pool fill` remembers how many boxes of a key to keep.
fn target_file(root: &Path, key: &str) -> std::path::PathBuf {
    root.join("sandbox-pool").join(key)
}

/// Makes idle sandboxes until `n` of these options are waiting, and
/// remembers `n` for later refills.
pub fn fill(root: &Path, opts: &SandboxOptions, n: usize) -> Result<Vec<String>> {
    let key = key(opts)?;
    let target = target_file(root, &key);
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
    }
    write_atomic(&target, &n.to_string())?;
    top_up(root, opts, &key, n)
}

/// Replaces `path` with `text` in one rename, so a reader (a refill) sees
/// the old number or the new one, never a partial write.
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| Error::io("create", dir, e))?;
    tmp.write_all(text.as_bytes()).map_err(|e| Error::io("write", tmp.path().to_path_buf(), e))?;
    tmp.as_file().sync_all().map_err(|e| Error::io("sync", tmp.path().to_path_buf(), e))?;
    tmp.persist(path).map_err(|e| Error::io("rename", path, e.error))?;
    Ok(())
}

fn top_up(root: &Path, opts: &SandboxOptions, key: &str, n: usize) -> Result<Vec<String>> {
    let have = idle(root, key)?.len();
    let mut made = Vec::new();
    for _ in have..n {
        made.push(launch(root, opts, key)?);
    }
    Ok(made)
}

/// Claims one idle sandbox made with these options, if there is one.
pub fn take(root: &Path, opts: &SandboxOptions) -> Result<Option<String>> {
    for id in idle(root, &key(opts)?)? {
        let marker = root.join("sandbox").join(&id).join(CLAIM);
        if std::fs::OpenOptions::new().write(true).create_new(true).open(&marker).is_ok() {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Removes a used pool sandbox and tops the pool back up, in a detached
/// child, so the caller that just used it waits for neither.
///
/// # Preconditions
/// The caller is single-threaded (see `sys::fork`).
pub(crate) fn recycle_detached(root: &Path, opts: &SandboxOptions, used: &str) -> Result<()> {
    let forked = match sys::fork() {
        Ok(f) => f,
        // No child to do it: remove the used box here, so it never lingers.
        Err(_) => return super::run::terminate(root, used),
    };
    if let Forked::Child = forked {
        // Nothing is left to report to: the caller has its answer.
        let _ = nix::unistd::setsid();
        // Our stdout may be the caller's pipe: don't hold it open.
        if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
            for fd in 0..3 {
                let _ = nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), fd);
            }
        }
        let removed = super::run::terminate(root, used);
        let refilled = key(opts).and_then(|key| {
            let n = std::fs::read_to_string(target_file(root, &key)).ok().and_then(|s| s.trim().parse().ok());
            top_up(root, opts, &key, n.unwrap_or(1))
        });
        sys::exit_child(i32::from(removed.is_err() || refilled.is_err()));
    }
    Ok(())
}
