//! Handing the `SCMP_ACT_NOTIFY` fd to the seccomp agent (runtime-spec
//! `config-linux.md` "The Container Process State"). Runs in the runtime
//! process, once init has installed its filter and passed the fd back.
//!
//! One `SOCK_STREAM` connection to `listenerPath` per container: the
//! container process state as JSON, with the fd as the only `SCM_RIGHTS`
//! fd of the first `sendmsg`, then the connection is closed.

use std::io::{IoSlice, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use serde::Serialize;

use super::Listener;
use crate::error::{Result, RuntimeError, SysError};

/// The name of the fd in `fds`, as the spec spells it.
pub(crate) const SECCOMP_FD_NAME: &str = "seccompFd";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ProcessState<'a> {
    oci_version: &'a str,
    fds: [&'a str; 1],
    pid: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a str>,
    state: serde_json::Value,
}

/// The container process state for the agent; `state` is the container's
/// State JSON (as hooks get it).
pub(crate) fn process_state(listener: &Listener, pid: i32, state: &[u8]) -> Result<Vec<u8>> {
    let state: serde_json::Value =
        serde_json::from_slice(state).map_err(|e| RuntimeError::InvalidSpec(format!("seccomp agent state: {e}")))?;
    serde_json::to_vec(&ProcessState {
        oci_version: oci_spec::runtime::VERSION,
        fds: [SECCOMP_FD_NAME],
        pid,
        metadata: listener.metadata.as_deref(),
        state,
    })
    .map_err(|e| RuntimeError::InvalidSpec(format!("seccomp agent state: {e}")))
}

/// Connects to the agent and sends `payload` with `fd`.
pub(crate) fn send(listener: &Listener, fd: BorrowedFd<'_>, payload: &[u8]) -> Result<()> {
    let path = &listener.path;
    let mut conn = UnixStream::connect(path).map_err(|e| RuntimeError::io("connect to seccomp agent at", path, e))?;
    let fds = [fd.as_raw_fd()];
    let sent = loop {
        match sendmsg::<()>(
            conn.as_raw_fd(),
            &[IoSlice::new(payload)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(SysError::new("send seccomp fd to", path.display(), e).into()),
            Ok(n) => break n,
        }
    };
    // A stream may take a long state in several writes; the fd went with
    // the first.
    conn.write_all(&payload[sent..]).map_err(|e| RuntimeError::io("send container state to seccomp agent at", path, e))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixListener;

    use super::*;

    #[test]
    fn agent_gets_state_and_one_fd() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let agent = UnixListener::bind(&path).unwrap();
        let l = Listener { path: path.clone(), metadata: Some("MKNOD=/dev/null".into()) };
        let state = br#"{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":42,"bundle":"/b"}"#;
        let payload = process_state(&l, 42, state).unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        send(&l, w.as_fd(), &payload).unwrap();

        let (conn, _) = agent.accept().unwrap();
        let mut buf = vec![0u8; 4096];
        let (mut fds, n) = crate::sys::recv_fds(&conn, &mut buf).unwrap();
        assert_eq!(fds.len(), 1, "exactly one fd");
        let got = fds.pop().unwrap();
        // The fd received is the pipe's write end: what goes in comes out of `r`.
        nix::unistd::write(&got, b"x").unwrap();
        let mut b = [0u8; 1];
        nix::unistd::read(r.as_raw_fd(), &mut b).unwrap();
        assert_eq!(&b, b"x");

        let v: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap();
        assert_eq!(v["ociVersion"], oci_spec::runtime::VERSION);
        assert_eq!(v["fds"], serde_json::json!(["seccompFd"]));
        assert_eq!(v["pid"], 42);
        assert_eq!(v["metadata"], "MKNOD=/dev/null");
        assert_eq!(v["state"]["id"], "c1");
        assert_eq!(v["state"]["status"], "creating");
    }

    #[test]
    fn no_agent_is_an_error_naming_the_path() {
        let l = Listener { path: "/nonexistent/agent.sock".into(), metadata: None };
        let (_r, w) = nix::unistd::pipe().unwrap();
        let e = send(&l, w.as_fd(), b"{}").unwrap_err().to_string();
        assert!(e.contains("/nonexistent/agent.sock"), "{e}");
    }
}
