//! A pool of idle sandboxes: `pool fill` makes them ahead of time, and
//! `run --pool` takes one, so the caller skips the start-up.

use std::path::Path;

use super::options::SandboxOptions;
use super::run::launch;
use crate::error::Result;

/// Pool sandboxes' ids start with this, followed by the size key.
const PREFIX: &str = "pool";

/// A key for the sizes, so a run only takes a sandbox made to its measure.
fn key(o: &SandboxOptions) -> String {
    // Hundredths of a CPU; options made cpus positive and finite.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a small positive number")]
    let centi = (o.cpus * 100.0).round() as u64;
    format!("{PREFIX}{}m{centi}c{}p", o.memory >> 20, o.pids)
}

/// Marks a pool sandbox as taken; created with O_EXCL, so only one caller
/// ever gets a given sandbox.
const CLAIM: &str = "claimed";

fn idle(root: &Path, opts: &SandboxOptions) -> Result<Vec<String>> {
    let k = format!("{}-", key(opts));
    Ok(super::run::list(root)?
        .into_iter()
        .filter(|s| s.id.starts_with(&k) && s.status == crate::Status::Running)
        .filter(|s| !root.join("sandbox").join(&s.id).join(CLAIM).exists())
        .map(|s| s.id)
        .collect())
}

/// Where `pool fill` remembers how many of a size to keep.
fn target_file(root: &Path, opts: &SandboxOptions) -> std::path::PathBuf {
    root.join("sandbox-pool").join(key(opts))
}

/// Makes idle sandboxes until `n` of this size are waiting, and remembers
/// `n` for later refills.
pub fn fill(root: &Path, opts: &SandboxOptions, n: usize) -> Result<Vec<String>> {
    let target = target_file(root, opts);
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir).map_err(|e| crate::RuntimeError::io("create", dir, e))?;
    }
    crate::state::write_atomic(&target, n.to_string().as_bytes(), 0o600)?;
    top_up(root, opts, n)
}

fn top_up(root: &Path, opts: &SandboxOptions, n: usize) -> Result<Vec<String>> {
    let have = idle(root, opts)?.len();
    let mut made = Vec::new();
    for _ in have..n {
        made.push(launch(root, opts, &key(opts))?);
    }
    Ok(made)
}

/// Claims one idle sandbox of this size, if there is one.
pub fn take(root: &Path, opts: &SandboxOptions) -> Result<Option<String>> {
    for id in idle(root, opts)? {
        let marker = root.join("sandbox").join(&id).join(CLAIM);
        if std::fs::OpenOptions::new().write(true).create_new(true).open(&marker).is_ok() {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Removes a used pool sandbox and tops the pool back up, in a detached
/// child, so the caller that just used it waits for neither.
pub(crate) fn recycle_detached(root: &Path, opts: &SandboxOptions, used: &str) {
    if let Ok(crate::sys::Forked::Child) = crate::sys::clone_fork(0, None) {
        let _ = nix::unistd::setsid();
        // Our stdout may be the caller's pipe: don't hold it open.
        if let Ok(null) = crate::sys::fs::open_path(Path::new("/dev/null"), nix::fcntl::OFlag::O_RDWR) {
            for fd in 0..3 {
                let _ = nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), fd);
            }
        }
        let _ = super::run::terminate(root, used);
        let n = std::fs::read_to_string(target_file(root, opts)).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(1);
        let code = i32::from(top_up(root, opts, n).is_err());
        crate::sys::exit_child(code);
    }
}
