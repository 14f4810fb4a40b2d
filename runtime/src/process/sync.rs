//! The runtime ↔ init conversation during `create`.
//!
//! ```text
//!  runtime (tinyrun create)                 init (cloned child)
//!  ────────────────────────                 ───────────────────
//!  clone3(namespaces[, into cgroup]) ──────▶ waits for Go
//!  write uid/gid maps
//!  Go ────────────────────────────────────▶ setns / unshare the rest
//!  join cgroup (v1: may wait for an RCU      hostname, mounts up to the first
//!  grace period; overlapped with init)       cgroup mount
//!  Joined ────────────────────────────────▶ unshare the cgroup namespace
//!                                   ◀────── MapsPlease  (only when init made
//!  write uid/gid maps                                    its user namespace)
//!  MapsDone ──────────────────────────────▶
//!                                   ◀────── Pid(n)      (only when a second
//!                                                        fork was needed)
//!                                           the rest of the mounts, /dev
//!                                   ◀────── HooksPlease
//!  prestart + createRuntime hooks
//!  HooksDone(pid) ────────────────────────▶ createContainer hooks, sysctl,
//!                                           masked/readonly paths, pivot,
//!                                           rlimits, user, caps, NNP,
//!                                           look up args[0]
//!                                   ◀────── SeccompFd + fd  (only with
//!  hand the fd to listenerPath                  SCMP_ACT_NOTIFY, right after
//!  SeccompDone ───────────────────────────▶     loading the filter)
//!                                   ◀────── Ready
//!  write state.json and --pid-file
//!  Committed ─────────────────────────────▶ drop PDEATHSIG
//!                                   ◀────── Detached
//!  returns                                  accept() on start.sock ... execve
//!
//!  at any point:                    ◀────── Error(InitError)   then init exits
//! ```
//!
//! Messages are JSON, one per `SOCK_SEQPACKET` datagram, so framing is the
//! kernel's job. Both ends are close-on-exec. An error crosses as data
//! ([`InitError`]: operation, object, errno), so the runtime re-raises it
//! typed.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::sys::socket::{recv, send, sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType};
use serde::{Deserialize, Serialize};

use crate::error::{InitError, SysError};

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub(crate) enum Msg {
    /// Runtime → init: maps written; carry on (the cgroup may still be
    /// being joined, see `Joined`).
    Go,
    /// Runtime → init: init is in its cgroup; it may now make its cgroup
    /// namespace and mount cgroupfs.
    Joined,
    /// Init → runtime: write my uid/gid maps (the user namespace was
    /// unshared by init itself, after joining other namespaces).
    MapsPlease,
    /// Runtime → init: maps written.
    MapsDone,
    /// Init → runtime: the real init's host pid, when an intermediate forked it.
    Pid(i32),
    /// Init → runtime: run prestart and createRuntime hooks now.
    HooksPlease,
    /// Runtime → init: those hooks succeeded; init's host pid, for the
    /// state that createContainer and startContainer hooks receive.
    HooksDone(i32),
    /// Init → runtime: set-up finished; about to wait for `start`.
    Ready,
    /// Runtime → init: the state is on disk; the runtime may now leave.
    Committed,
    /// Init → runtime: PDEATHSIG is off; the runtime may exit.
    Detached,
    /// Either way: what failed. The sender gives up after sending it.
    Error(InitError),
    /// Init → runtime: the seccomp notification fd follows, alone in the
    /// next datagram (read it with [`Channel::recv_fd`]).
    SeccompFd,
    /// Runtime → init: the seccomp agent has the fd.
    SeccompDone,
}

/// One end of the conversation.
pub(crate) struct Channel {
    fd: OwnedFd,
}

impl AsRawFd for Channel {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A fresh connected pair: (runtime end, init end).
pub(crate) fn pair() -> Result<(Channel, Channel), SysError> {
    let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| SysError::bare("socketpair", e))?;
    Ok((Channel { fd: a }, Channel { fd: b }))
}

impl Channel {
    pub(crate) fn send(&self, msg: &Msg) -> Result<(), SysError> {
        let bytes =
            serde_json::to_vec(msg).map_err(|_| SysError::bare("encode sync message", nix::errno::Errno::EINVAL))?;
        loop {
            match send(self.fd.as_raw_fd(), &bytes, MsgFlags::MSG_NOSIGNAL) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(SysError::bare("send sync message", e)),
                Ok(_) => return Ok(()),
            }
        }
    }

    /// The next message, or `None` when the other end is gone.
    pub(crate) fn recv(&self) -> Result<Option<Msg>, SysError> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut reset = false;
        let n = loop {
            match recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                Err(nix::errno::Errno::EINTR) => continue,
                // A peer that exits with unread messages (say, a Joined it
                // never needed) makes the next recv report ECONNRESET once,
                // ahead of what it sent before dying: read on.
                Err(nix::errno::Errno::ECONNRESET) if !reset => {
                    reset = true;
                    continue;
                }
                Err(nix::errno::Errno::ECONNRESET) => break 0,
                Err(e) => return Err(SysError::bare("receive sync message", e)),
                Ok(n) => break n,
            }
        };
        if n == 0 {
            return Ok(None);
        }
        serde_json::from_slice(&buf[..n])
            .map(Some)
            .map_err(|_| SysError::bare("decode sync message", nix::errno::Errno::EBADMSG))
    }
}

impl Channel {
    /// Sends `fd` as the only `SCM_RIGHTS` fd of a datagram of its own.
    pub(crate) fn send_fd(&self, fd: BorrowedFd<'_>) -> Result<(), SysError> {
        let fds = [fd.as_raw_fd()];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        loop {
            match sendmsg::<()>(self.fd.as_raw_fd(), &[IoSlice::new(b"fd")], &cmsg, MsgFlags::MSG_NOSIGNAL, None) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(SysError::bare("send fd over sync socket", e)),
                Ok(_) => return Ok(()),
            }
        }
    }

    /// Receives the fd sent by [`Channel::send_fd`] (close-on-exec).
    pub(crate) fn recv_fd(&self) -> Result<OwnedFd, SysError> {
        let mut buf = [0u8; 16];
        crate::sys::recv_fd(&self.fd, &mut buf).map_err(|e| SysError::bare("receive fd over sync socket", e))
    }
}

impl Channel {
    /// Child side: waits for `want` from the runtime. A runtime that is
    /// gone (killed, or it gave up) leaves nobody to report to: the child
    /// exits.
    pub(crate) fn expect(&self, want: Msg) -> Result<(), InitError> {
        match self.recv()? {
            Some(m) if m == want => Ok(()),
            None => crate::sys::exit_child(1),
            Some(Msg::Error(e)) => Err(e),
            Some(other) => Err(unexpected(&other, Some(&want))),
        }
    }
}

/// What init writes on the connection `start` made to start.sock, when it
/// does not simply exec (the connection then closes with execve: success).
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub(crate) enum StartReply {
    /// The program could not be run: `start` fails with this.
    Failed(InitError),
    /// A startContainer hook failed: init exits without running the
    /// program. As with runc, whose init runs these hooks after it has
    /// told `start` to go on, `start` succeeds (with a warning) and runs
    /// the poststart hooks; the container is then stopped.
    HookFailed(InitError),
}

impl StartReply {
    /// Reads a reply; bytes that are not one (an init of an older build
    /// wrote the bare error) fail `start` with what they say.
    pub(crate) fn parse(bytes: &[u8]) -> StartReply {
        serde_json::from_slice(bytes).unwrap_or_else(|_| {
            StartReply::Failed(
                serde_json::from_slice::<InitError>(bytes)
                    .unwrap_or_else(|_| InitError::msg(String::from_utf8_lossy(bytes).into_owned())),
            )
        })
    }
}

/// A message that has no place at this point of the conversation.
pub(crate) fn unexpected(got: &Msg, wanted: Option<&Msg>) -> InitError {
    let why = match wanted {
        Some(w) => format!("got {got:?}, wanted {w:?}"),
        None => format!("got {got:?}"),
    };
    InitError::other("sync with the runtime", why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_replies_round_trip_and_older_ones_still_fail() {
        let err = InitError::other("startContainer hook #0 /bin/false", "exit status: 1").field("hooks.startContainer");
        let bytes = serde_json::to_vec(&StartReply::HookFailed(err.clone())).unwrap();
        assert_eq!(StartReply::parse(&bytes), StartReply::HookFailed(err.clone()));
        let bare = serde_json::to_vec(&err).unwrap();
        assert_eq!(StartReply::parse(&bare), StartReply::Failed(err));
        assert!(matches!(StartReply::parse(b"garbled"), StartReply::Failed(_)));
    }

    #[test]
    fn messages_cross_and_eof_is_none() {
        let (a, b) = pair().unwrap();
        a.send(&Msg::Pid(7)).unwrap();
        let err = InitError::path("chdir", "/data", nix::errno::Errno::EACCES).field("process.cwd");
        a.send(&Msg::Error(err.clone())).unwrap();
        assert_eq!(b.recv().unwrap(), Some(Msg::Pid(7)));
        // The error arrives as data: the errno is still there.
        let Some(Msg::Error(got)) = b.recv().unwrap() else { panic!("not an error") };
        assert_eq!(got, err);
        assert_eq!(got.errno(), Some(nix::errno::Errno::EACCES));
        assert_eq!(got.to_string(), "process.cwd: chdir /data: EACCES: Permission denied");
        drop(a);
        assert_eq!(b.recv().unwrap(), None);
    }

    #[test]
    fn an_fd_crosses_after_its_announcement() {
        use std::os::fd::AsFd;
        let (a, b) = pair().unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        a.send(&Msg::SeccompFd).unwrap();
        a.send_fd(w.as_fd()).unwrap();
        drop(w);
        assert_eq!(b.recv().unwrap(), Some(Msg::SeccompFd));
        let got = b.recv_fd().unwrap();
        nix::unistd::write(&got, b"ok").unwrap();
        let mut buf = [0u8; 2];
        nix::unistd::read(r.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(&buf, b"ok");
    }

    /// A pid above the kernel's pid_max (at most 2^22): it never exists.
    const NO_PID: i32 = 0x7fff_fff0;

    /// The SCMP_ACT_NOTIFY handover init makes: the fd crosses the channel
    /// and the runtime's agent answers for the child.
    #[test]
    fn notify_fd_crosses_the_sync_channel_and_answers_for_the_child() {
        use libseccomp::{ScmpNotifReq, ScmpNotifResp, ScmpNotifRespFlags};
        let f = crate::seccomp::Filter::compile(
            &serde_json::from_value(serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/unused",
            "syscalls": [{"names": ["kill"], "action": "SCMP_ACT_NOTIFY"}]}))
            .unwrap(),
        )
        .unwrap();
        let (ours, theirs) = pair().unwrap();
        match crate::sys::seccomp::fork_for_test().unwrap() {
            crate::sys::Forked::Child => {
                drop(ours);
                if nix::sys::prctl::set_no_new_privs().is_err() {
                    crate::sys::exit_child(100);
                }
                let Ok(Some(fd)) = f.load() else { crate::sys::exit_child(101) };
                if theirs.send(&Msg::SeccompFd).is_err() || theirs.send_fd(std::os::fd::AsFd::as_fd(&fd)).is_err() {
                    crate::sys::exit_child(102);
                }
                drop(fd);
                // The agent (the parent) answers EXDEV.
                crate::sys::exit_child(
                    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(NO_PID), None) == Err(nix::errno::Errno::EXDEV)
                    {
                        0
                    } else {
                        103
                    },
                )
            }
            crate::sys::Forked::Parent(pid) => {
                drop(theirs);
                assert_eq!(ours.recv().unwrap(), Some(Msg::SeccompFd));
                let fd = ours.recv_fd().unwrap();
                let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
                let req = ScmpNotifReq::receive(raw).unwrap();
                assert_eq!(i64::from(req.pid), i64::from(pid.as_raw()));
                assert_eq!(u64::try_from(NO_PID).ok(), Some(req.data.args[0]));
                ScmpNotifResp::new_error(req.id, -libc::EXDEV, ScmpNotifRespFlags::empty()).respond(raw).unwrap();
                let st = nix::sys::wait::waitpid(pid, None).unwrap();
                assert_eq!(st, nix::sys::wait::WaitStatus::Exited(pid, 0));
            }
        }
    }
}
