//! Harness for the tinyrun end-to-end conformance suite (house style H12, tier c).
//!
//! Runs in the *test* process, on the host: it drives a runtime binary exactly as a caller
//! (containerd, podman, a user) would, through its runc-compatible CLI, and observes the result
//! with `/bin/probe` inside the container or with host-side `/proc` and cgroupfs inspection.
//!
//! * [`Runtime`]: the binary under test (`TINYRUN_BIN`, default `<workspace>/target/debug/tinyrun`)
//!   plus a private `--root` per test. It owns every resource a test creates and cleans it up in
//!   `Drop`, even when the test panics (see [`Runtime`]'s `Drop`).
//! * [`sandbox::Sbx`]: the same for `tinyrun sandbox`, recording the ids of the sandboxes a test
//!   made so their cgroups can be checked and cleaned.
//! * [`Bundle`]: a bundle written by `bundles/mkbundle`, sharing one read-only rootfs built once by
//!   `bundles/mkrootfs` into `target/conformance-rootfs`, with a [`Bundle::config_mut`] helper.
//!
//! Every runtime invocation runs with `TINYRUN_CONFORMANCE_TAG=<tag>` in its environment, and
//! every bundle puts the same variable in `process.env`, so [`Runtime::leftovers`] can find any
//! process a test caused to exist (runtime helpers, a stuck init, the container process).

mod bundle;
mod host;
mod known_bugs;
mod runtime;
pub mod sandbox;
pub mod terminal;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use bundle::{shared_rootfs, Bundle};
pub use host::{
    cgroup_dirs, cgroup_procs_recursive, cmdline, kill_until_gone, mounts_under, pid_alive, rmdir_tree, userdel,
    LocalUser,
};
pub use known_bugs::{excuse_known_bugs, strict, KnownBug};
pub use runtime::{Out, Running, Runtime};

/// How long one runtime invocation may take before the test fails (`TINYRUN_TIMEOUT`, seconds).
pub(crate) fn invocation_timeout() -> Duration {
    let secs = std::env::var("TINYRUN_TIMEOUT").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    Duration::from_secs(secs)
}

/// The workspace root (the parent of this crate's manifest directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("conformance/ has a parent").to_path_buf()
}

/// Cargo's target dir (`CARGO_TARGET_DIR`, else `<workspace>/target`): caches tests share.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// The runtime binary under test: `$TINYRUN_BIN`, else `<target>/debug/tinyrun`.
pub fn runtime_bin() -> PathBuf {
    match std::env::var_os("TINYRUN_BIN") {
        Some(p) => PathBuf::from(p),
        None => target_dir().join("debug/tinyrun"),
    }
}

/// True when running as root; callers use [`require_root!`].
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// True under `TINYRUN_REQUIRE_ROOT=1` (CI sets it): a test that lacks root, or a tool
/// `conformance/install-deps` installs, fails instead of printing SKIP and passing, so a CI
/// that silently lost root or a package cannot stay green.
pub fn prerequisites_required() -> bool {
    std::env::var("TINYRUN_REQUIRE_ROOT").is_ok_and(|v| v == "1")
}

/// Return from the current test (printing why) unless running as root; under
/// `TINYRUN_REQUIRE_ROOT=1` fail instead. CI runs as root.
#[macro_export]
macro_rules! require_root {
    () => {
        if !$crate::is_root() {
            $crate::missing_prerequisite!("this test needs root (CI runs it as root)");
        }
    };
}

/// Return from the current test, printing the reason, because the host lacks something every CI
/// run has (root, a package `conformance/install-deps` installs). Under
/// `TINYRUN_REQUIRE_ROOT=1` this fails the test instead (see [`prerequisites_required`]).
#[macro_export]
macro_rules! missing_prerequisite {
    ($($arg:tt)*) => {{
        let why = format!($($arg)*);
        assert!(!$crate::prerequisites_required(), "TINYRUN_REQUIRE_ROOT=1, but {why}");
        eprintln!("SKIP: {why}");
        return;
    }};
}

/// Return from the current test, printing the reason (for `requires(feature)` gating: a host
/// without the feature, which no switch turns into a failure).
#[macro_export]
macro_rules! skip {
    ($($arg:tt)*) => {{
        eprintln!("SKIP: {}", format!($($arg)*));
        return;
    }};
}

/// True if the kernel offers namespace `kind` (as named in `/proc/self/ns`, e.g. "time").
pub fn kernel_has_ns(kind: &str) -> bool {
    Path::new("/proc/self/ns").join(kind).exists()
}

/// Parse `key=value` lines (probe output) into a map; other lines are ignored.
pub fn kv(text: &str) -> BTreeMap<String, String> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

/// In the runtime's child, make `src` appear as fd `dst` (without CLOEXEC).
pub fn pass_fds(cmd: &mut std::process::Command, fds: Vec<(std::os::fd::RawFd, std::os::fd::RawFd)>) {
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // fcntl/dup2 on fds that stay open in the parent until spawn returns.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            let mut high = Vec::new();
            for (src, _) in &fds {
                let h = libc::fcntl(*src, libc::F_DUPFD_CLOEXEC, 100);
                if h < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                high.push(h);
            }
            for (h, (_, dst)) in high.iter().zip(&fds) {
                if libc::dup2(*h, *dst) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}
