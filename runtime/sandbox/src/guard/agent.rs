//! The refusal agent of the guarded class: what a guarded container tried
//! and was refused, where a node agent can read it.
//!
//! A box's record lives in the process that supervises it; a guarded
//! container has none once `create` returns (containerd's shim calls the
//! runtime once per step). So with `refusalAgent` in the policy, `create`
//! records the container's refusals (the filter notifies them instead of
//! failing them, [`tinyrun::RefusalListener`]) and hands the listener to a
//! long-lived agent on the node, `tinyrun sandbox guard-agent`, which
//! answers each refused call with the profile's errno and keeps one report
//! per container: `<reports>/<container id>.json`, the `refused` object of
//! a box's result (system calls, limits hit) with the pod's names, written
//! again within [`WRITE_EVERY`] of a change and once more when the
//! container's last process is gone (`"ended": true`). Ended reports are
//! removed after `keep`.
//!
//! Fails closed: a container whose listener can't be handed over is not
//! created; if the agent dies, the kernel fails every refused call of its
//! containers with ENOSYS (no listener), so nothing refused goes through,
//! only the record stops. The agent takes a listener only from its own
//! user (the runtime, root), checked on the socket.
//!
//! The agent's CPU is not the container's: a container that floods refused
//! calls costs the agent about what it costs the container. Run it in a
//! cgroup with a CPU limit (the README's unit does).

use std::collections::HashMap;
use std::io::{IoSlice, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::socket::{sendmsg, sockopt, ControlMessage, MsgFlags};
use serde::{Deserialize, Serialize};
use tinyrun::{RefusalListener, Refusals, Runtime};

use crate::error::{Error, Result};
use crate::net::NetRefusals;
use crate::refused::Refused;

/// A changed report is written again at most this often.
pub const WRITE_EVERY: Duration = Duration::from_millis(200);

/// The most a handover message may hold.
const MAX_MESSAGE: usize = 16 << 10;

/// The CRI annotations a report names the container by.
const ANNOTATIONS: [(&str, &str); 4] = [
    ("io.kubernetes.cri.sandbox-namespace", "namespace"),
    ("io.kubernetes.cri.sandbox-name", "pod"),
    ("io.kubernetes.cri.container-name", "container"),
    ("io.kubernetes.cri.sandbox-id", "sandbox_id"),
];

/// What `create` sends with the listener.
#[derive(Serialize, Deserialize)]
struct Handover {
    /// The container's id.
    id: String,
    /// The runtime's state root, where its limits are read.
    root: PathBuf,
    /// The errno refused calls are answered with.
    errno: i32,
    /// The container's pod and name, from its CRI annotations.
    names: HashMap<String, String>,
}

/// Hands container `id`'s refusal listener to the agent at `socket`.
pub(crate) fn hand_over(
    socket: &Path,
    rt: &Runtime,
    id: &str,
    annotations: &serde_json::Value,
    listener: RefusalListener,
) -> Result<()> {
    let (fd, errno) = listener.into_parts();
    let names = ANNOTATIONS
        .iter()
        .filter_map(|(key, name)| Some((name.to_string(), annotations[key].as_str()?.chars().take(256).collect())))
        .collect();
    let msg = Handover { id: id.to_string(), root: rt.root().to_path_buf(), errno, names };
    let payload = serde_json::to_vec(&msg).map_err(|e| Error::InvalidState(format!("refusal agent: {e}")))?;
    let agent = |e: std::io::Error| Error::io("hand the container's refused calls to the refusal agent at", socket, e);
    let conn = UnixStream::connect(socket).map_err(agent)?;
    let fds = [fd.as_raw_fd()];
    sendmsg::<()>(
        conn.as_raw_fd(),
        &[IoSlice::new(&payload)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|e| agent(e.into()))?;
    // The agent answers one byte once it holds the listener: before that,
    // a container could be started with nobody to answer it.
    conn.set_read_timeout(Some(Duration::from_secs(5))).map_err(agent)?;
    let mut ok = [0u8; 1];
    match std::io::Read::read(&mut &conn, &mut ok) {
        Ok(1) => Ok(()),
        Ok(_) => Err(agent(std::io::Error::other("it closed the connection without taking the listener"))),
        Err(e) => Err(agent(e)),
    }
}

/// `tinyrun sandbox guard-agent`'s options.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Where it listens (the policy's `refusalAgent`).
    pub socket: PathBuf,
    /// Where the reports are written.
    pub reports: PathBuf,
    /// How long a report stays once its container has ended.
    pub keep: Duration,
}

/// One container the agent answers for.
struct Watched {
    handover: Handover,
    listener: RefusalListener,
    record: Refusals,
    /// Changed since last written.
    dirty: bool,
    written: Instant,
}

/// A report on disk, as a node agent reads it.
#[derive(Serialize)]
struct Report<'a> {
    id: &'a str,
    #[serde(flatten)]
    names: &'a HashMap<String, String>,
    /// The container's last process is gone: nothing more will come.
    ended: bool,
    refused: Refused,
}

/// Serves refusal listeners at `opts.socket` until killed.
pub fn serve(opts: &AgentOptions) -> Result<()> {
    // What pods tried is the node's business, not every local user's: the
    // directory is made 0700 and each report 0600 (a node agent runs as
    // the agent's user, or the operator opens the directory up).
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&opts.reports)
        .map_err(|e| Error::io("create", &opts.reports, e))?;
    let listener = bind(&opts.socket)?;
    let mut watched: Vec<Watched> = Vec::new();
    let mut ended: Vec<(PathBuf, Instant)> = Vec::new();
    loop {
        let dirty = watched.iter().any(|w| w.dirty);
        let timeout = if dirty { WRITE_EVERY } else { Duration::from_secs(1) };
        let mut fds = vec![nix::poll::PollFd::new(listener.as_fd(), nix::poll::PollFlags::POLLIN)];
        fds.extend(watched.iter().map(|w| nix::poll::PollFd::new(w.listener.as_fd(), nix::poll::PollFlags::POLLIN)));
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Error::Sys { op: "poll the refusal listeners", errno: e }),
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
        drop(fds);
        for (w, _) in watched.iter_mut().zip(&ready[1..]).filter(|(_, r)| **r) {
            let before = total(&w.record);
            w.listener.answer(&mut w.record);
            w.dirty |= total(&w.record) != before || w.listener.is_closed();
        }
        if ready[0] {
            accept_all(&listener, &mut watched);
        }
        let now = Instant::now();
        for w in watched.iter_mut().filter(|w| w.dirty && (w.listener.is_closed() || now >= w.written + WRITE_EVERY)) {
            write_report(&opts.reports, w);
            (w.dirty, w.written) = (false, now);
        }
        for w in watched.iter().filter(|w| w.listener.is_closed()) {
            ended.push((report_path(&opts.reports, &w.handover.id), now));
        }
        watched.retain(|w| !w.listener.is_closed());
        ended.retain(|(path, at)| {
            let keep = now.duration_since(*at) < opts.keep;
            if !keep {
                let _ = std::fs::remove_file(path);
            }
            keep
        });
    }
}

fn total(r: &Refusals) -> u64 {
    r.calls.iter().map(|c| u64::from(c.count)).sum::<u64>() + u64::from(r.unlisted)
}

/// The socket, 0600 in a directory only its owner may write: a stale one
/// of an earlier agent is replaced, anything else there is an error.
fn bind(socket: &Path) -> Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let dir = socket.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
    let meta = std::fs::metadata(dir).map_err(|e| Error::io("stat", dir, e))?;
    if meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(Error::InvalidState(format!(
            "refusal agent: {} must be the agent user's and writable by no one else",
            dir.display()
        )));
    }
    match std::fs::symlink_metadata(socket) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(socket).map_err(|e| Error::io("remove", socket, e))?
        }
        Ok(_) => return Err(Error::InvalidState(format!("refusal agent: {} is not a socket", socket.display()))),
        Err(_) => {}
    }
    let l = UnixListener::bind(socket).map_err(|e| Error::io("listen on", socket, e))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("chmod", socket, e))?;
    l.set_nonblocking(true).map_err(|e| Error::io("listen on", socket, e))?;
    Ok(l)
}

/// Takes every waiting handover. A connection from anyone but the agent's
/// own user, or one that sends no whole message within a second, is
/// dropped: only the runtime hands listeners over.
fn accept_all(listener: &UnixListener, watched: &mut Vec<Watched>) {
    while let Ok((conn, _)) = listener.accept() {
        let own = nix::sys::socket::getsockopt(&conn, sockopt::PeerCredentials)
            .is_ok_and(|c| c.uid() == nix::unistd::geteuid().as_raw());
        if !own {
            continue;
        }
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
        if let Some((handover, fd)) = receive(&conn) {
            let listener = RefusalListener::from_parts(fd, handover.errno);
            watched.push(Watched {
                handover,
                listener,
                record: Refusals::default(),
                dirty: true,
                written: Instant::now(),
            });
            let _ = (&conn).write_all(&[1]);
        }
    }
}

/// One handover: its message, and the one fd it carries.
fn receive(conn: &UnixStream) -> Option<(Handover, OwnedFd)> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let (fds, len) = tinyrun::os::recv_fds(conn.as_fd(), &mut buf).ok()?;
    let handover: Handover = serde_json::from_slice(&buf[..len]).ok()?;
    // Its id names the report file: a container id, never a path.
    tinyrun::check_id(&handover.id).ok()?;
    let mut fds = fds.into_iter();
    match (fds.next(), fds.next()) {
        (Some(fd), None) => Some((handover, fd)),
        _ => None,
    }
}

fn report_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.json"))
}

/// Writes `w`'s report whole (a temporary file renamed over it), with its
/// container's limits as its cgroup counts them now; a container already
/// deleted keeps none.
fn write_report(dir: &Path, w: &Watched) {
    let limits = Runtime::new(&w.handover.root).load(&w.handover.id).map(|c| c.limits_hit()).unwrap_or_default();
    let refused = Refused::of(&w.record, limits, &NetRefusals::default(), 0).unwrap_or_default();
    let report = Report { id: &w.handover.id, names: &w.handover.names, ended: w.listener.is_closed(), refused };
    let Ok(mut bytes) = serde_json::to_vec(&report) else { return };
    bytes.push(b'\n');
    let path = report_path(dir, &w.handover.id);
    let tmp = dir.join(format!(".{}.json.tmp", w.handover.id));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
