//! Refusals on record: the system calls a container's filter refused, for
//! a supervisor to report (`Supervised::record_refusals`).
//!
//! The filter's program is the profile's, with one change: each return
//! of its refusing errno (`SECCOMP_RET_ERRNO | e`) becomes
//! `SECCOMP_RET_USER_NOTIF` ([`notifying`]). An allowed call runs the same
//! instructions to the same ALLOW as before, so it costs nothing more. A
//! refused one stops in the kernel until the supervisor, holding the
//! filter's listener, has read it ([`answer`]), added it to its
//! [`Refusals`], and failed it with `e`: the very answer the profile
//! gives. Returns of ENOSYS stay as they are: they say "not here" (a call
//! newer than the profile, `clone3`) to programs that try one and fall
//! back, which glibc does on every thread it starts.
//!
//! It fails closed. The kernel never lets a notified call run unless the
//! supervisor says so, and this one only ever answers an error; when the
//! last listener fd is closed (the supervisor died), every pending and
//! later notified call fails with ENOSYS. The record holds what the kernel
//! reported, never what the box says: at most [`MAX_CALLS`] distinct
//! calls, with counts that saturate and the first [`MAX_ARGS`] values of
//! one telling argument each; further calls are counted, unnamed, in
//! `unlisted`. A flood of refused calls waits on the supervisor one call
//! at a time per thread, so it runs at the supervisor's pace.
//!
//! Only a profile whose refusals all carry one errno (besides ENOSYS) can
//! be recorded: the notification does not say which rule matched.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use libc::sock_filter;
use nix::errno::Errno;
use serde::{Deserialize, Serialize};

/// Distinct calls a record names.
pub const MAX_CALLS: usize = 64;
/// Distinct values of a call's telling argument a record keeps.
pub const MAX_ARGS: usize = 4;

/// Notifications answered in one [`answer`] pass, so a flood can't keep
/// the supervisor from its other work.
const BATCH: usize = 64;

#[allow(clippy::cast_possible_truncation, reason = "BPF opcodes fit in 16 bits")]
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
#[allow(clippy::cast_possible_truncation, reason = "BPF opcodes fit in 16 bits")]
const RET_A: u16 = (libc::BPF_RET | libc::BPF_A) as u16;

/// `program` with its refusing errno returns turned into notifications,
/// and that errno; `None` when the program refuses with several errnos
/// (or returns a computed action), so a notification could not be
/// answered as the profile would.
pub(super) fn notifying(program: &[sock_filter]) -> Option<(Vec<sock_filter>, i32)> {
    let mut errno = None;
    let mut out = program.to_vec();
    for i in &mut out {
        if i.code == RET_A {
            return None;
        }
        if i.code != RET_K || i.k & libc::SECCOMP_RET_ACTION_FULL != libc::SECCOMP_RET_ERRNO {
            continue;
        }
        let e = i32::try_from(i.k & libc::SECCOMP_RET_DATA).ok()?;
        if e == libc::ENOSYS {
            continue;
        }
        if errno.is_some_and(|x| x != e) {
            return None;
        }
        errno = Some(e);
        i.k = libc::SECCOMP_RET_USER_NOTIF;
    }
    Some((out, errno?))
}

/// The system calls a container's seccomp filter refused, as its
/// supervisor saw them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusals {
    /// The first [`MAX_CALLS`] distinct calls refused, in the order first seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<RefusedCall>,
    /// Refusals of further calls (saturating).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unlisted: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One system call refused, and how often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedCall {
    /// The architecture it was made for (`AUDIT_ARCH_*`).
    pub arch: u32,
    /// Its number on that architecture.
    pub nr: i32,
    /// Times refused (saturating).
    pub count: u32,
    /// The first distinct values of its telling argument
    /// ([`RefusedCall::arg_name`]), at most [`MAX_ARGS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<u64>,
}

/// `AUDIT_ARCH_*` values with a name table in libseccomp.
const AUDIT_X86_64: u32 = 0xC000_003E;
const AUDIT_I386: u32 = 0x4000_0003;
const AUDIT_AARCH64: u32 = 0xC000_00B7;
const X32_BIT: i32 = 0x4000_0000;

impl RefusedCall {
    /// The call's name, e.g. `ptrace`, or `syscall N` when libseccomp
    /// doesn't know it.
    pub fn name(&self) -> String {
        use libseccomp::{ScmpArch, ScmpSyscall};
        let arch = match self.arch {
            AUDIT_X86_64 if self.nr & X32_BIT != 0 => Some(ScmpArch::X32),
            AUDIT_X86_64 => Some(ScmpArch::X8664),
            AUDIT_I386 => Some(ScmpArch::X86),
            AUDIT_AARCH64 => Some(ScmpArch::Aarch64),
            _ => None,
        };
        let name = arch.and_then(|a| ScmpSyscall::from(self.nr).get_name_by_arch(a).ok());
        match (name, self.native()) {
            (Some(n), true) => n,
            (Some(n), false) => format!("{n} (arch {:#x})", self.arch),
            (None, _) => format!("syscall {} (arch {:#x})", self.nr, self.arch),
        }
    }

    fn native(&self) -> bool {
        native_arch() == Some(self.arch) && self.nr & X32_BIT == 0
    }

    /// The argument whose values `args` keeps, by name, when the call has
    /// one worth telling (a request or flags, never a pointer): `request`
    /// of `ioctl` and `ptrace`, `flags` of `unshare` and `clone`,
    /// `domain` of `socket`, ...
    pub fn arg_name(&self) -> Option<&'static str> {
        telling_arg(self.native().then_some(self.nr)?).map(|(_, name)| name)
    }
}

/// The native `AUDIT_ARCH_*`.
fn native_arch() -> Option<u32> {
    if cfg!(target_arch = "x86_64") {
        Some(AUDIT_X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(AUDIT_AARCH64)
    } else {
        None
    }
}

/// Native call `nr`'s telling argument: its index and name.
fn telling_arg(nr: i32) -> Option<(usize, &'static str)> {
    let nr = libc::c_long::from(nr);
    Some(match nr {
        libc::SYS_ioctl => (1, "request"),
        libc::SYS_ptrace => (0, "request"),
        libc::SYS_unshare | libc::SYS_clone => (0, "flags"),
        libc::SYS_setns => (1, "nstype"),
        libc::SYS_socket | libc::SYS_socketpair => (0, "domain"),
        libc::SYS_prctl => (0, "option"),
        libc::SYS_personality => (0, "persona"),
        libc::SYS_bpf => (0, "cmd"),
        libc::SYS_keyctl => (0, "operation"),
        _ => return None,
    })
}

impl Refusals {
    /// Nothing was refused.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.unlisted == 0
    }

    /// What was refused after `before`, an earlier copy of this record
    /// (another command's refusals meanwhile included).
    pub fn since(&self, before: &Refusals) -> Refusals {
        let calls = self
            .calls
            .iter()
            .filter_map(|c| {
                let was = before.calls.iter().find(|b| b.arch == c.arch && b.nr == c.nr).map_or(0, |b| b.count);
                let count = c.count.saturating_sub(was);
                (count > 0).then(|| RefusedCall { count, ..c.clone() })
            })
            .collect();
        Refusals { calls, unlisted: self.unlisted.saturating_sub(before.unlisted) }
    }

    /// Adds `other`'s refusals to this record, within its bounds.
    pub fn merge(&mut self, other: &Refusals) {
        for c in &other.calls {
            self.add_counted(c.arch, c.nr, c.count, &c.args);
        }
        self.unlisted = self.unlisted.saturating_add(other.unlisted);
    }

    /// Records one refusal the kernel reported.
    pub(crate) fn add(&mut self, data: &libc::seccomp_data) {
        let native = native_arch() == Some(data.arch) && data.nr & X32_BIT == 0;
        let arg = telling_arg(data.nr).filter(|_| native).and_then(|(i, _)| data.args.get(i).copied());
        self.add_counted(data.arch, data.nr, 1, arg.as_slice());
    }

    fn add_counted(&mut self, arch: u32, nr: i32, count: u32, args: &[u64]) {
        let known = self.calls.iter().position(|c| c.arch == arch && c.nr == nr);
        let call = match known {
            Some(i) => &mut self.calls[i],
            None if self.calls.len() < MAX_CALLS => {
                self.calls.push(RefusedCall { arch, nr, count: 0, args: Vec::new() });
                let last = self.calls.len() - 1;
                &mut self.calls[last]
            }
            None => {
                self.unlisted = self.unlisted.saturating_add(count);
                return;
            }
        };
        call.count = call.count.saturating_add(count);
        for a in args {
            if call.args.len() < MAX_ARGS && !call.args.contains(a) {
                call.args.push(*a);
            }
        }
    }
}

/// A filter's listener, held by the supervisor that answers its
/// refusals, and the errno it answers them with.
#[derive(Debug)]
pub struct RefusalListener {
    fd: OwnedFd,
    errno: i32,
    /// The kernel said no process uses the filter any more.
    closed: bool,
}

impl RefusalListener {
    pub(crate) fn new(fd: OwnedFd, errno: i32) -> RefusalListener {
        RefusalListener { fd, errno, closed: false }
    }

    /// The listener's fd and errno, to hand to another supervisor (which
    /// makes it again with [`RefusalListener::from_parts`]).
    pub fn into_parts(self) -> (OwnedFd, i32) {
        (self.fd, self.errno)
    }

    /// A listener received from the supervisor that made it. An fd that is
    /// not a seccomp listener answers nothing: [`RefusalListener::answer`]
    /// fails its reads and records none.
    pub fn from_parts(fd: OwnedFd, errno: i32) -> RefusalListener {
        RefusalListener::new(fd, errno)
    }

    /// Readable when a refused call waits for its answer. Once the
    /// container's processes are all gone it reports POLLHUP for good:
    /// see [`RefusalListener::is_closed`].
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// No process uses the filter any more: nothing will come.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Answers the refused calls waiting (a bounded batch), recording each
    /// in `record`. Never blocks.
    pub fn answer(&mut self, record: &mut Refusals) {
        self.closed = answer(self.fd.as_fd(), self.errno, record);
    }
}

/// Answers up to [`BATCH`] waiting notifications of listener `fd` with
/// `errno`, recording each; true when the filter has no user left.
pub(crate) fn answer(fd: BorrowedFd<'_>, errno: i32, record: &mut Refusals) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    for _ in 0..BATCH {
        let mut p = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut p, PollTimeout::ZERO) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        let ev = p[0].revents().unwrap_or(PollFlags::empty());
        if !ev.contains(PollFlags::POLLIN) {
            return ev.intersects(PollFlags::POLLHUP | PollFlags::POLLERR);
        }
        match crate::sys::seccomp::notif_recv(fd) {
            Ok(n) => {
                record.add(&n.data);
                // ENOENT: the caller went away meanwhile; nothing to answer.
                let _ = crate::sys::seccomp::notif_fail(fd, n.id, errno);
            }
            Err(Errno::ENOENT | Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
    false
}

#[cfg(test)]
#[path = "refusals_tests.rs"]
mod tests;
