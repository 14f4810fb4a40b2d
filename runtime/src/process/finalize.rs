//! The one path from "inside the container" to the program, shared by init
//! and by every `exec`'d process (runc's standard and setns inits differ
//! here; two copies drift, so there is one).
//!
//! Runs in the cloned child, after it has joined or made its namespaces and
//! (for init) entered its root. In order:
//!  1. the terminal, when there is one: the pty becomes the controlling tty
//!     of the new session [`begin`] made
//!  2. rlimits (while the hard limits may still be raised), cwd
//!  3. AppArmor profile and SELinux label, armed for execve
//!  4. seccomp, when no_new_privs is off (it needs CAP_SYS_ADMIN, so before
//!     the capabilities go)
//!  5. groups, gid, uid and capabilities; then non-dumpable and PDEATHSIG
//!     again (a change of credentials resets both)
//!  6. cwd check, umask, no_new_privs
//!  7. `args[0]` looked up, the runtime's own binary refused, every fd but
//!     stdio and the preserved ones marked close-on-exec
//!  8. seccomp, when no_new_privs is on (as late as possible)
//!
//! then, after whatever the caller does in between (init waits for
//! `start`), [`exec`]: the final rlimits, default signals, execve.

use std::ffi::{CStr, CString};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sys::signal::Signal;

use super::program::{find_executable, refuse_runtime_binary, verify_cwd, with_home};
use super::sync::{Channel, Msg};
use crate::capabilities::Sets;
use crate::error::InitError;
use crate::rlimits::Limit;
use crate::sys;
use crate::user::{self, Ids};

/// One step of a container process's set-up.
pub(crate) type Step = Result<(), InitError>;

/// The process part of the config, prepared by the runtime before cloning.
pub(crate) struct ProcessConfig {
    pub ids: Ids,
    pub caps: Sets,
    pub rlimits: Vec<Limit>,
    /// None keeps the runtime's (exec without `user.umask`, as runc does).
    pub umask: Option<u32>,
    pub args: Vec<CString>,
    pub env: Vec<String>,
    pub cwd: PathBuf,
    pub no_new_privs: bool,
    /// fds 3.. that pass to the program untouched (LISTEN_FDS, --preserve-fds).
    pub preserved_fds: u32,
    /// Where the pty master goes, when the process has a terminal.
    pub console: Option<RawFd>,
    /// `process.consoleSize` as (rows, columns).
    pub console_size: Option<(u16, u16)>,
    /// The container's `linux.seccomp`, compiled.
    pub seccomp: Option<crate::seccomp::Filter>,
    /// `process.apparmorProfile`, when set.
    pub apparmor: Option<String>,
    /// `process.selinuxLabel`, when set.
    pub selinux: Option<String>,
    /// `linux.personality`, as the persona to set.
    pub personality: Option<libc::c_ulong>,
    /// `linux.memoryPolicy`, ready for set_mempolicy(2).
    pub mempolicy: Option<crate::mempolicy::MemPolicy>,
    /// `process.scheduler`, ready for sched_setattr(2).
    pub scheduler: Option<crate::sys::SchedAttr>,
    /// `process.ioPriority`, ready for ioprio_set(2).
    pub io_priority: Option<i32>,
}

/// What [`exec`] runs: resolved by [`prepare`] while the container's
/// files could still be looked at with the privileges to do so.
pub(crate) struct Program {
    exe: CString,
    args: Vec<CString>,
    env: Vec<CString>,
}

impl Program {
    /// The environment the program will have.
    pub(crate) fn env(&self) -> &[CString] {
        &self.env
    }
}

/// First thing in every container process: take the stdio it was given,
/// and leave the caller's session, so nothing in the container ever holds
/// the caller's terminal as its controlling tty (TIOCSTI would type into
/// the caller's shell: the CVE-2017-5226 class).
pub(crate) fn begin(stdio: Option<[RawFd; 3]>) -> Step {
    if let Some(fds) = stdio {
        take_stdio(fds)?;
    }
    nix::unistd::setsid().map_err(|e| InitError::sys("setsid", e))?;
    // Made non-dumpable by the runtime before the clone; a process that is
    // somehow dumpable here must not go on into the container.
    if nix::sys::prctl::get_dumpable().map_err(|e| InitError::value("prctl", "PR_GET_DUMPABLE", e))? {
        return Err(InitError::other("enter the container", "the process is dumpable"));
    }
    Ok(())
}

/// Asks the kernel to SIGKILL us when our parent dies (`Some`), or not.
pub(crate) fn die_with_parent(sig: Option<Signal>) -> Step {
    nix::sys::prctl::set_pdeathsig(sig)
        .map_err(|e| InitError::value("prctl", format_args!("PR_SET_PDEATHSIG {}", sig.map_or("0", |s| s.as_str())), e))
}

/// Moves this (single-threaded) process into its cgroup itself: see
/// `Cgroup::prepare_self_join`. Empty lists when the runtime does it.
pub(crate) fn join_own_cgroup(tasks: &[PathBuf], unified: Option<&(PathBuf, String)>) -> Step {
    let join =
        |f: &Path| std::fs::write(f, "0").map_err(|e| InitError::path("join cgroup: write 0 to", f, sys::io_errno(&e)));
    for f in tasks {
        join(f)?;
    }
    if let Some((procs, path)) = unified {
        let own = crate::sys::fs::read_proc("/proc/self/cgroup").unwrap_or_default();
        let placed = own.lines().any(|l| l.strip_prefix("0::").is_some_and(|p| p == path));
        if !placed {
            join(procs)?;
        }
    }
    Ok(())
}

/// Makes `fds` our stdin, stdout and stderr (dup2 clears close-on-exec).
fn take_stdio(fds: [RawFd; 3]) -> Step {
    for (target, fd) in (0..).zip(fds) {
        if fd != target {
            nix::unistd::dup2(fd, target)
                .map_err(|e| InitError::value("dup2", format_args!("fd {fd} to {target}"), e))?;
        }
    }
    Ok(())
}

/// Steps 1-8 above. `dev_console`: init also binds the pty over
/// /dev/console (an exec'd process must not replace the container's).
/// `resident`: a resident init keeps the listener of a filter that records
/// its refusals (returned here) and answers them itself; anyone else hands
/// it to the runtime.
pub(crate) fn prepare(
    p: &ProcessConfig,
    chan: &Channel,
    dev_console: bool,
    resident: bool,
) -> Result<(Program, Option<OwnedFd>), InitError> {
    if let Some(sock) = p.console {
        let slave = crate::tty::setup_console(sock, p.console_size, p.ids.uid, p.ids.gid)?;
        if dev_console {
            crate::rootfs::bind_console(&crate::rootfs::Real, &slave)?;
        }
    }
    crate::rlimits::apply(&p.rlimits)?;
    // Before seccomp, which may deny both calls.
    if let Some(persona) = p.personality {
        crate::personality::apply(persona)?;
    }
    if let Some(m) = &p.mempolicy {
        m.apply()?;
    }
    crate::sched::apply(p.scheduler.as_ref(), p.io_priority)?;
    // chdir before dropping privileges (the directory may be closed to the
    // user), and check afterwards that it is inside the new root.
    nix::unistd::chdir(&p.cwd).map_err(|e| InitError::path("chdir", &p.cwd, e).field("process.cwd"))?;
    crate::lsm::apply(p.apparmor.as_deref(), p.selinux.as_deref())?;
    let mut refusals = None;
    if !p.no_new_privs {
        refusals = load_seccomp(p.seccomp.as_ref(), chan, resident)?;
    }
    user::switch(&p.ids, &p.caps, user::setgroups_allowed())?;
    // A change of credentials sets dumpable to fs.suid_dumpable (1 on a
    // host in debug mode would let the container's uid open
    // /proc/<pid>/exe: CVE-2019-5736) and clears PDEATHSIG.
    nix::sys::prctl::set_dumpable(false).map_err(|e| InitError::value("prctl", "PR_SET_DUMPABLE 0", e))?;
    die_with_parent(Some(Signal::SIGKILL))?;
    verify_cwd()?;
    if let Some(m) = p.umask {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(m));
    }
    if p.no_new_privs {
        nix::sys::prctl::set_no_new_privs()
            .map_err(|e| InitError::value("prctl", "PR_SET_NO_NEW_PRIVS", e).field("process.noNewPrivileges"))?;
    }
    let program = program(&p.args, &p.env, p.ids.uid)?;
    sys::cloexec_from(3 + p.preserved_fds)?;
    if p.no_new_privs {
        refusals = load_seccomp(p.seccomp.as_ref(), chan, resident)?;
    }
    Ok((program, refusals))
}

/// Step 7's look-up: `args[0]` found as execvp would (relative to the cwd
/// when it has a slash), never the runtime's own binary; `HOME` added to
/// `env` for `uid` when missing.
pub(crate) fn program(args: &[CString], env: &[String], uid: u32) -> Result<Program, InitError> {
    let first =
        args.first().ok_or_else(|| InitError::other("look up the program", "args is empty").field("process.args"))?;
    let env = with_home(env, uid);
    let exe = find_executable(first, &env)?;
    refuse_runtime_binary(&exe)?;
    let env = env.into_iter().filter_map(|e| CString::new(e).ok()).collect();
    Ok(Program { exe, args: args.to_vec(), env })
}

/// Installs the seccomp filter; with SCMP_ACT_NOTIFY, or with refusals
/// recorded, hands the listener fd to the runtime and waits until the agent
/// (or the runtime itself) has it, unless `keep_refusals` keeps the
/// latter here. See [`crate::seccomp`] for the syscalls init still makes
/// afterwards.
fn load_seccomp(
    filter: Option<&crate::seccomp::Filter>,
    chan: &Channel,
    keep_refusals: bool,
) -> Result<Option<OwnedFd>, InitError> {
    let Some(filter) = filter else { return Ok(None) };
    let Some(fd) = filter.load().map_err(|e| InitError::from(e).field("linux.seccomp"))? else { return Ok(None) };
    if keep_refusals && filter.refusal_errno().is_some() {
        return Ok(Some(fd));
    }
    chan.send(&Msg::SeccompFd)?;
    chan.send_fd(std::os::fd::AsFd::as_fd(&fd))?;
    drop(fd);
    chan.expect(Msg::SeccompDone)?;
    Ok(None)
}

/// The last steps: the final file-descriptor limit (the runtime's own work
/// needed some fds until now), default signal handling, execve. Returns
/// only on failure, with what execve said (the program was found, so
/// ENOENT or EACCES here is about what it needs: a script's interpreter,
/// the ELF loader, a mount that forbids exec).
pub(crate) fn exec(p: &ProcessConfig, prog: &Program) -> InitError {
    if let Err(e) = crate::rlimits::apply_final(&p.rlimits) {
        return e;
    }
    let argv: Vec<&CStr> = prog.args.iter().map(|a| a.as_c_str()).collect();
    let envp: Vec<&CStr> = prog.env.iter().map(|a| a.as_c_str()).collect();
    sys::reset_signals();
    let errno = sys::execve(&prog.exe, &argv, &envp);
    InitError::execve(std::ffi::OsStr::from_bytes(prog.exe.as_bytes()), errno)
}
