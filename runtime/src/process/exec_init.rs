//! An `exec`'d process: joins a running container and becomes a new
//! program in it (runc's "setns init").
//!
//! Runs in the cloned child. The runtime has already put it into the
//! container's pid and time namespaces (they take effect at clone) and
//! opened every other namespace; the child joins them (user first), waits
//! while the runtime adds it to the container's cgroup, then sets up its
//! credentials and execs. Success is seen by the runtime as the sync
//! channel closing at execve (it is close-on-exec); a failure is sent on it.

use std::ffi::CString;
use std::path::PathBuf;

use nix::sys::signal::Signal;

use super::init::{expect, find_executable, load_seccomp, refuse_runtime_binary, verify_cwd, with_home, Step};
use super::sync::{Channel, Msg};
use crate::capabilities::Sets;
use crate::namespaces::Join;
use crate::rlimits::Limit;
use crate::sys;
use crate::user::{self, Ids};

/// Everything the exec'd process needs, prepared before cloning.
pub(crate) struct ExecConfig {
    pub joins: Vec<Join>,
    pub caps: Sets,
    pub rlimits: Vec<Limit>,
    pub ids: Ids,
    pub umask: Option<u32>,
    pub args: Vec<CString>,
    pub env: Vec<String>,
    pub cwd: PathBuf,
    pub no_new_privs: bool,
    pub preserved_fds: u32,
    pub console: Option<std::os::fd::RawFd>,
    pub console_size: Option<(u16, u16)>,
    /// fds to move to 0, 1 and 2 first.
    pub stdio: Option<[std::os::fd::RawFd; 3]>,
    /// v1 `tasks` files (and the hybrid cgroup2 `cgroup.procs` with the
    /// cgroup's path) to move ourselves into the container's cgroup.
    pub cgroup_tasks: Vec<PathBuf>,
    pub cgroup_unified: Option<(PathBuf, String)>,
    /// The container's `linux.seccomp`, compiled: exec'd processes get it too.
    pub seccomp: Option<crate::seccomp::Filter>,
}

/// Child entry point. Never returns.
pub(crate) fn main(cfg: &ExecConfig, chan: &Channel) -> ! {
    let err = match setup(cfg, chan) {
        Ok(()) => "exec returned".to_string(),
        Err(e) => e,
    };
    let _ = chan.send(&Msg::Error(err));
    sys::exit_child(255)
}

fn setup(cfg: &ExecConfig, chan: &Channel) -> Step {
    if let Some(fds) = cfg.stdio {
        super::init::take_stdio(fds)?;
    }
    // CVE-2019-5736: while this process still runs the runtime's binary
    // inside the container, nothing there may open /proc/<pid>/exe.
    nix::sys::prctl::set_dumpable(false).map_err(|e| format!("prctl(PR_SET_DUMPABLE): {e}"))?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("prctl(PR_SET_PDEATHSIG): {e}"))?;
    // With the host's credentials still: a user namespace joined next
    // would not be allowed to write the host's cgroup files.
    super::init::join_own_cgroup(&cfg.cgroup_tasks, cfg.cgroup_unified.as_ref())?;
    for j in &cfg.joins {
        crate::namespaces::setns(j).map_err(|e| e.to_string())?;
    }
    expect(chan, Msg::Go)?;
    crate::rlimits::apply(&cfg.rlimits)?;
    if let Some(sock) = cfg.console {
        crate::tty::setup_console(sock, cfg.console_size, cfg.ids.uid, cfg.ids.gid, false)?;
    }
    nix::unistd::chdir(&cfg.cwd).map_err(|e| format!("cwd: chdir {}: {e}", cfg.cwd.display()))?;
    if !cfg.no_new_privs {
        load_seccomp(cfg.seccomp.as_ref(), chan)?;
    }
    user::switch(&cfg.ids, &cfg.caps, user::setgroups_allowed())?;
    verify_cwd()?;
    if let Some(m) = cfg.umask {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(m));
    }
    if cfg.no_new_privs {
        nix::sys::prctl::set_no_new_privs().map_err(|e| format!("prctl(PR_SET_NO_NEW_PRIVS): {e}"))?;
    }
    let env = with_home(&cfg.env, cfg.ids.uid);
    let exe = find_executable(&cfg.args[0], &env)?;
    refuse_runtime_binary(&exe)?;
    let env: Vec<CString> = env.into_iter().filter_map(|e| CString::new(e).ok()).collect();
    sys::cloexec_from(3 + cfg.preserved_fds).map_err(|e| e.to_string())?;
    if cfg.no_new_privs {
        load_seccomp(cfg.seccomp.as_ref(), chan)?;
    }
    let argv: Vec<&std::ffi::CStr> = cfg.args.iter().map(|a| a.as_c_str()).collect();
    let envp: Vec<&std::ffi::CStr> = env.iter().map(|a| a.as_c_str()).collect();
    crate::rlimits::apply_final(&cfg.rlimits)?;
    // The program must outlive a detached `exec` (PDEATHSIG survives execve).
    nix::sys::prctl::set_pdeathsig(None).map_err(|e| format!("prctl(PR_SET_PDEATHSIG): {e}"))?;
    sys::reset_signals();
    let errno = sys::execve(&exe, &argv, &envp);
    Err(format!("exec {exe:?}: {errno}"))
}
