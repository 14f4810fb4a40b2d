//! The container's program, as every container process finds it: `args[0]`
//! looked up as execvp would, the runtime's own binary refused, the cwd
//! checked, `HOME` filled in.
//!
//! Runs in the cloned child, inside the container (after pivot_root, or
//! setns into its mount namespace), with the privileges it still has.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use crate::error::InitError;
use crate::user;

/// CVE-2024-21626: a cwd reached through a leaked fd would be outside the
/// root, and getcwd then reports it as unreachable.
pub(crate) fn verify_cwd() -> Result<(), InitError> {
    match nix::unistd::getcwd() {
        Ok(p) if p.is_absolute() => Ok(()),
        Ok(p) => {
            Err(InitError::other("getcwd", format!("the cwd resolved outside the container root ({})", p.display()))
                .field("process.cwd"))
        }
        Err(e) => Err(InitError::sys("getcwd", e).field("process.cwd").hint("not reachable inside the container")),
    }
}

/// The program's environment: the configured one, plus `HOME` from the
/// container's /etc/passwd when it is missing (as runc does).
pub(crate) fn with_home(env: &[String], uid: u32) -> Vec<String> {
    let mut env = env.to_vec();
    if !env.iter().any(|e| e.starts_with("HOME=")) {
        env.push(format!("HOME={}", user::home_of(uid)));
    }
    env
}

/// The `PATH` execvp uses when the environment has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Resolves args[0] as execvp would, in the container, against the
/// process's own PATH, so a missing program fails `create`, not `start`.
/// The errno tells the two failures callers map apart, as runc words them:
/// ENOENT (`executable file not found in $PATH`, or `stat <path>: no such
/// file or directory`: 127 in podman and Docker) and EACCES (`permission
/// denied`: the file exists but can't be executed, 126).
pub(crate) fn find_executable(arg0: &CString, env: &[String]) -> Result<CString, InitError> {
    let name = arg0
        .to_str()
        .map_err(|_| InitError::other("look up the program", "args[0] is not UTF-8").field("process.args"))?;
    if name.contains('/') {
        return runnable(Path::new(name)).map(|()| arg0.clone()).map_err(|e| InitError::lookup(name, e));
    }
    let path = env.iter().rev().find_map(|e| e.strip_prefix("PATH=")).unwrap_or(DEFAULT_PATH);
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(dir).join(name);
        if runnable(&p).is_ok() {
            return CString::new(p.into_os_string().into_encoded_bytes())
                .map_err(|_| InitError::other("look up the program", "a PATH entry holds a NUL byte"));
        }
    }
    Err(InitError::lookup(name, Errno::ENOENT))
}

/// Whether execve could run `p`: the stat errno when there is nothing to
/// run (ENOENT, ENOTDIR, ...), EACCES for a directory, a file that isn't
/// regular, or one without execute permission for us.
fn runnable(p: &Path) -> Result<(), Errno> {
    let st = nix::sys::stat::stat(p)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(Errno::EACCES);
    }
    nix::unistd::access(p, nix::unistd::AccessFlags::X_OK)
}

/// CVE-2019-5736: refuse to start the runtime's own binary inside the
/// container, directly or as a script's interpreter (`#!/proc/self/exe`).
/// A container process could otherwise open it through /proc/<pid>/exe
/// and overwrite the host's copy once it exits. Compared by device and
/// inode, so no path spelling gets around it; a few stats, no copy.
pub(crate) fn refuse_runtime_binary(exe: &CString) -> Result<(), InitError> {
    let own = nix::sys::stat::stat("/proc/self/exe").map_err(|e| InitError::path("stat", "/proc/self/exe", e))?;
    let mut path = PathBuf::from(std::ffi::OsStr::from_bytes(exe.as_bytes()));
    // The kernel follows at most 4 levels of interpreters (BINPRM_MAX_RECURSION).
    for _ in 0..5 {
        let Ok(st) = nix::sys::stat::stat(&path) else { return Ok(()) };
        if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino) {
            let why = format!("refusing to run the runtime's own binary ({}) inside the container", path.display());
            return Err(InitError::other("exec", why));
        }
        match interpreter(&path) {
            Some(next) => path = next,
            None => return Ok(()),
        }
    }
    Ok(())
}

/// The interpreter named by a `#!` line, if `path` starts with one.
fn interpreter(path: &Path) -> Option<PathBuf> {
    let head = crate::rootfs::image::read_head(path, 256)?;
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let word = line.split(|b| *b == b' ' || *b == b'\t').find(|w| !w.is_empty())?;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(word)))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn lookup(arg0: &str, path: &Path) -> Result<CString, InitError> {
        find_executable(&CString::new(arg0).unwrap(), &[format!("PATH={}", path.display())])
    }

    /// The two failures podman and Docker map to 127 and 126 keep their
    /// errno, and read as runc's do.
    #[test]
    fn missing_and_not_executable_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "data").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();

        assert_eq!(lookup("tool", dir.path()).unwrap().to_str().unwrap(), tool.to_str().unwrap());
        assert_eq!(lookup(tool.to_str().unwrap(), dir.path()).unwrap().to_str().unwrap(), tool.to_str().unwrap());

        let missing = dir.path().join("missing");
        let e = lookup(missing.to_str().unwrap(), dir.path()).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENOENT));
        let m = missing.display();
        assert_eq!(e.to_string(), format!("exec: \"{m}\": stat {m}: no such file or directory"));

        let e = lookup("missing", dir.path()).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENOENT));
        assert_eq!(e.to_string(), "exec: \"missing\": executable file not found in $PATH");

        // Root may read anything, but execute only what has an x bit.
        for not_runnable in [plain.as_path(), dir.path()] {
            let e = lookup(not_runnable.to_str().unwrap(), dir.path()).unwrap_err();
            assert_eq!(e.errno(), Some(Errno::EACCES), "{e}");
            assert_eq!(e.to_string(), format!("exec: \"{}\": permission denied", not_runnable.display()));
        }
    }
}
