//! Guarded egress for an ordinary user's box: no veth (making one takes
//! CAP_NET_ADMIN in the host's namespace), but pasta, which gives the
//! box's namespace a tap device with a copy of the host's address and
//! sends what the box sends on from ordinary sockets of the host's.
//!
//! The guard is the box's table ([`super::rules::output_ruleset`]) in the
//! box's own network namespace, loaded by the runtime (root of the
//! caller's user namespace, the parent of the box's) before pasta is
//! started and so before anything leaves the box; the box holds no
//! CAP_NET_ADMIN in the user namespace that owns its network namespace,
//! so it can't change the table. pasta opens no way in: no port is
//! forwarded to the box, none from the box to the host's loopback, and
//! the gateway's address is not the host's (`--no-map-gw`); IPv4 only.
//!
//! pasta lives as long as the box: started when the box is made, ended by
//! its removal, and recorded (`<root>/sandbox-net/pasta.<id>`: its pid and
//! start time) before it may run, so a crashed maker's pasta is found and
//! ended by the garbage collection.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::link::Route;
use super::nft::Nft;
use super::records::Records;
use super::rules::output_ruleset;
use super::*;

/// The program, looked for on PATH.
const PROGRAM: &str = "pasta";

/// How long pasta may take to set the box's namespace up.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// pasta on PATH, or the error that says how to get it.
pub(crate) fn program() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(PROGRAM))
        .find(|p| nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::X_OK).is_ok())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "--network egress: an ordinary user's box reaches the network through pasta, which is not on PATH: \
                 install it (Debian: apt-get install passt)"
                    .into(),
            )
        })
}

/// The files of box `id`'s pasta under the records dir: the record (pid
/// and start time), the pid file pasta writes once the namespace is set up,
/// and its log.
fn files(records: &Records, id: &str) -> [PathBuf; 3] {
    ["", ".ready", ".log"].map(|s| records.dir.join(format!("{PASTA_PREFIX}{id}{s}")))
}

/// What every pasta record's name starts with.
pub(super) const PASTA_PREFIX: &str = "pasta.";

/// Where box `id`'s network namespace is kept (a bind mount of it, in
/// the caller's mount namespace): in its bundle dir, which its spec names
/// it from (module `spec`).
pub(crate) fn netns_path(bundle: &Path) -> PathBuf {
    bundle.join("netns")
}

/// Gives box `id` (its bundle written, its container not yet created) its
/// guarded egress through pasta: a network namespace of the caller's user
/// namespace, which the box's init joins, its table loaded there, then
/// pasta attached to it. On error some of it may be in place: the caller
/// removes the box, and with it all of this ([`stop`]).
pub(super) fn setup(root: &Path, id: &str, egress: &Egress) -> Result<()> {
    let program = program()?;
    tun_usable()?;
    let allow = resolve(&egress.allow)?;
    let rules = output_ruleset(&names(id), &host_addresses()?, egress.dns, &allow);
    let netns = netns_path(&crate::layout::bundle(root, id));
    let (mut route, mut nft) = make_netns(&netns)?;
    route.loopback_up()?;
    // The table comes first: pasta never connects the box without it.
    nft.apply(&rules).map_err(|e| Error::Network(format!("load the box's egress rules into its namespace: {e}")))?;
    start(root, id, &netns, &program)
}

/// Makes a network namespace and keeps it at `path` (a bind mount of it):
/// owned by the caller's user namespace, where the box, in a user
/// namespace of its own below it, holds no capability. Returns a route and
/// an nftables socket of it. Made by a thread that unshares and ends, as
/// [`super::link::open_in`] joins one.
fn make_netns(path: &Path) -> Result<(Route, Nft)> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("create", path, e))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            let fail = |what: &str, e: nix::errno::Errno| Error::Network(format!("{what}: {e}"));
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| fail("make the box's network namespace", e))?;
            let own = Path::new("/proc/thread-self/ns/net");
            nix::mount::mount(Some(own), path, None::<&str>, nix::mount::MsFlags::MS_BIND, None::<&str>)
                .map_err(|e| fail(&format!("keep the box's network namespace at {}", path.display()), e))?;
            let nft = Nft::open().map_err(|e| fail("open nftables in the box's network namespace", e))?;
            Ok((Route::open()?, nft))
        })
        .join()
        .unwrap_or_else(|_| Err(Error::Network("the box's network set-up panicked".into())))
    })
}

/// The host's own addresses and its gateways, outside the refused ranges
/// (those are refused anyway): pasta would reach each from the host.
fn host_addresses() -> Result<Vec<Ipv4Addr>> {
    let mut route = Route::open()?;
    let mut all: Vec<Ipv4Addr> = route.addrs()?.into_iter().map(|(a, _)| a).collect();
    all.extend(route.gateways()?);
    all.retain(|a| refused(*a).is_none());
    all.sort_unstable();
    all.dedup();
    Ok(all)
}

/// pasta opens /dev/net/tun as the caller: a node only root may open (mode
/// 0600, where no udev rule made it 0666) fails here, by name.
fn tun_usable() -> Result<()> {
    let tun = Path::new("/dev/net/tun");
    std::fs::OpenOptions::new().read(true).write(true).open(tun).map(drop).map_err(|e| {
        Error::InvalidArgument(format!(
            "--network egress: pasta needs {} usable by you (mode 0666, as Debian ships it): {e}",
            tun.display()
        ))
    })
}

/// pasta's arguments: attached to the network namespace at `netns` (and to
/// no user namespace: the namespace is of pasta's own), in the foreground (its pid is the one recorded), quiet, IPv4 only, the
/// namespace configured by pasta itself; no port forwarded either way, the
/// gateway not mapped to the host, no DHCP, NDP or router advertisements.
fn args(netns: &Path, ready: &Path) -> Vec<CString> {
    let mut v: Vec<CString> = [
        PROGRAM,
        "--foreground",
        "--quiet",
        "--ipv4-only",
        "--config-net",
        "--tcp-ports",
        "none",
        "--udp-ports",
        "none",
        "--tcp-ns",
        "none",
        "--udp-ns",
        "none",
        "--no-map-gw",
        "--no-dhcp",
        "--no-ndp",
        "--no-dhcpv6",
        "--no-ra",
        "--netns-only",
    ]
    .iter()
    .filter_map(|a| CString::new(*a).ok())
    .collect();
    for (flag, path) in [("--pid", ready), ("--netns", netns)] {
        v.extend(CString::new(flag).ok());
        v.extend(CString::new(path.as_os_str().as_bytes()).ok());
    }
    v
}

/// Starts pasta for box `id` and waits until the box's namespace is set up.
/// The child runs pasta only once its record is written: a maker that
/// dies before that leaves a child that exits, never an unrecorded pasta.
fn start(root: &Path, id: &str, netns: &Path, program: &Path) -> Result<()> {
    let records = Records::new(root);
    let [record, ready, log] = files(&records, id);
    let lock = records.lock()?;
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&log)
        .map_err(|e| Error::io("create", &log, e))?;
    let null = File::open("/dev/null").map_err(|e| Error::io("open", "/dev/null", e))?;
    let prog = CString::new(program.as_os_str().as_bytes())
        .map_err(|_| Error::InvalidArgument(format!("pasta's path {} has a NUL byte", program.display())))?;
    let argv = args(netns, &ready);
    let (go_read, go_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| Error::Sys { op: "pipe2", errno: e })?;
    let child = match tinyrun::os::fork() {
        Ok(tinyrun::os::Forked::Child) => run_when_told(&go_read, &null, &out, &prog, &argv),
        Ok(tinyrun::os::Forked::Parent(p)) => p,
        Err(e) => return Err(Error::Sys { op: "fork", errno: e.errno }),
    };
    drop(go_read);
    let start = crate::claim::start_time(child.as_raw()).unwrap_or(0);
    let tmp = records.dir.join(format!(".{PASTA_PREFIX}{id}"));
    let written = std::fs::write(&tmp, format!("{child} {start}\n"))
        .and_then(|()| std::fs::rename(&tmp, &record))
        .map_err(|e| Error::io("write", &record, e));
    if let Err(e) = written {
        // The child sees the pipe closed and exits without running pasta.
        drop(go_write);
        let _ = waitpid(child, None);
        return Err(e);
    }
    drop(lock);
    nix::unistd::write(&go_write, b"1").map_err(|e| Error::Sys { op: "write to pasta's start pipe", errno: e })?;
    drop(go_write);
    wait_ready(child, &ready, &log)
}

/// In the forked child: a session of its own, stdin /dev/null, stdout and
/// stderr the log; pasta is run once the parent says so, else the child
/// exits.
fn run_when_told(go: &OwnedFd, null: &File, log: &File, prog: &CStr, argv: &[CString]) -> ! {
    let _ = nix::unistd::setsid();
    // The caller may have blocked SIGTERM and friends, and ignores SIGPIPE
    // (as Rust does): pasta starts from the defaults, and refuses to start
    // with SIGPIPE ignored.
    tinyrun::os::reset_signals();
    let _ = nix::unistd::chdir("/");
    let ok = [(null.as_raw_fd(), 0), (log.as_raw_fd(), 1), (log.as_raw_fd(), 2)]
        .iter()
        .all(|&(from, to)| nix::unistd::dup2(from, to).is_ok());
    let mut b = [0u8; 1];
    if ok && matches!(nix::unistd::read(go.as_fd().as_raw_fd(), &mut b), Ok(1)) {
        let _ = nix::unistd::execv(prog, argv);
    }
    tinyrun::os::exit_child(127)
}

/// Waits until pasta has written its pid file (it does once the namespace
/// is set up); an error with its log if it ends first or takes too long.
fn wait_ready(child: Pid, ready: &Path, log: &Path) -> Result<()> {
    let t = Instant::now();
    let failed = |why: String| {
        let said = std::fs::read_to_string(log).unwrap_or_default();
        let said = said.trim();
        Error::Network(format!("pasta {why}{}{said}", if said.is_empty() { "" } else { ": " }))
    };
    loop {
        if std::fs::metadata(ready).is_ok_and(|m| m.len() > 0) {
            return Ok(());
        }
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(WaitStatus::Exited(_, code)) => {
                return Err(failed(format!("exited with {code} before the box's network was up")))
            }
            Ok(s) => return Err(failed(format!("ended before the box's network was up ({s:?})"))),
            Err(e) => return Err(failed(format!("could not be waited for: {e}"))),
        }
        if t.elapsed() > READY_TIMEOUT {
            return Err(failed(format!("did not set the box's network up within {READY_TIMEOUT:?}")));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Ends box `id`'s pasta, if it still runs, and removes its files. Nothing
/// there is fine.
pub(super) fn stop(root: &Path, id: &str) -> Result<()> {
    let records = Records::new(root);
    let [record, ready, log] = files(&records, id);
    if let Some((pid, start)) = std::fs::read_to_string(&record).ok().as_deref().and_then(parse) {
        // Only the process recorded, not a later one with its pid.
        if crate::claim::start_time(pid.as_raw()) == Some(start) {
            match kill(pid, Signal::SIGKILL) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => return Err(Error::Network(format!("end the box's pasta ({pid}): {e}"))),
            }
            // Ours when this process made the box; else its parent (init,
            // once the maker exited) reaps it.
            let _ = waitpid(pid, None);
        }
    }
    let netns = netns_path(&crate::layout::bundle(root, id));
    match nix::mount::umount2(&netns, nix::mount::MntFlags::MNT_DETACH) {
        // Not a mount point, or not there.
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(Error::Network(format!("release the box's network namespace {}: {e}", netns.display()))),
    }
    for p in [&record, &ready, &log, &netns] {
        match std::fs::remove_file(p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove pasta record", p, e)),
        }
    }
    Ok(())
}

/// `PID START`.
fn parse(text: &str) -> Option<(Pid, u64)> {
    let (pid, start) = text.trim().split_once(' ')?;
    Some((Pid::from_raw(pid.parse().ok()?), start.parse().ok()?))
}

/// The boxes that have a pasta record.
pub(super) fn owners(records: &Records) -> Vec<String> {
    crate::layout::names(&records.dir)
        .into_iter()
        .filter_map(|n| n.strip_prefix(PASTA_PREFIX).map(str::to_string))
        .filter(|id| !id.contains('.'))
        .collect()
}

/// Whether box `id` has a pasta (and so its table in its own namespace).
pub(super) fn has(root: &Path, id: &str) -> bool {
    files(&Records::new(root), id)[0].exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pasta_opens_no_way_in_and_attaches_to_the_box() {
        let (ns, ready) = (Path::new("/b/netns"), Path::new("/r/pasta.x.ready"));
        let a: Vec<String> = args(ns, ready).iter().map(|c| c.to_string_lossy().into()).collect();
        let pair = |k: &str, v: &str| a.windows(2).any(|w| w[0] == k && w[1] == v);
        for k in ["--tcp-ports", "--udp-ports", "--tcp-ns", "--udp-ns"] {
            assert!(pair(k, "none"), "{k} none: {a:?}");
        }
        for f in ["--no-map-gw", "--ipv4-only", "--config-net", "--foreground", "--quiet"] {
            assert!(a.iter().any(|x| x == f), "{f}: {a:?}");
        }
        assert!(pair("--pid", "/r/pasta.x.ready"));
        assert!(
            pair("--netns", "/b/netns") && a.iter().any(|x| x == "--netns-only"),
            "the box's namespace only: {a:?}"
        );
    }

    #[test]
    fn records_are_told_from_their_side_files() {
        let t = tempfile::tempdir().unwrap();
        let records = Records { dir: t.path().to_path_buf() };
        for f in ["pasta.sbx-a", "pasta.sbx-a.ready", "pasta.sbx-a.log", ".pasta.run-b", "169.254.64.0", ".lock"] {
            std::fs::write(t.path().join(f), "1 2\n").unwrap();
        }
        assert_eq!(owners(&records), ["sbx-a"]);
        assert_eq!(parse("12 345\n"), Some((Pid::from_raw(12), 345)));
        assert_eq!(parse("12"), None);
    }
}
