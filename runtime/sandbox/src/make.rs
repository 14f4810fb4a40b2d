//! Making a box: its bundle dir and range of host ids, its spec and
//! storage (module `spec`), its files (`--copy-in`), and the container the
//! runtime creates from it through its extension point for supervisors
//! ([`tinyrun::Supervised`]); then its guarded egress, between `create`
//! and `start`. Runs in the runtime process, holding the box's lock
//! (module `boxlock`) until the box runs or is removed again.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use tinyrun::{Container, Init, RuntimeError, Supervised};

use crate::boxlock::{self, BoxLock};
use crate::error::{Error, Result};
use crate::ids::{Allocator, BoxIds};
use crate::layout;
use crate::lifetime::DEFAULT_LIFETIME;
use crate::options::SandboxOptions;
use crate::spec;
use crate::teardown::remove_box;

/// The cgroup v1 controllers a box joins: those its spec limits (memory,
/// cpu, pids) and reads (cpuacct and memory for a run's usage; the runtime
/// adds pids and freezer, which kill and delete use). Its spec has no
/// device rules. The other hierarchies (cpuset, devices, blkio, the named
/// and hybrid cgroup2 ones) would each be a directory more to make, join
/// and remove per box, for nothing.
fn box_controllers() -> Option<Vec<String>> {
    Some(["cpu", "cpuacct", "memory", "pids", "freezer"].map(String::from).to_vec())
}

/// Makes box `id`'s bundle dir and gives the box a range of host ids of its
/// own; returns them. The dir comes first, so the range is never seen as
/// belonging to a box that doesn't exist. An ordinary user's box takes its
/// range from the user's own ids (module `unprivileged`), and shares the
/// user's single id where that is all it has.
pub(crate) fn provision(root: &Path, id: &str, opts: &SandboxOptions) -> Result<BoxIds> {
    use std::os::unix::fs::DirBuilderExt;
    // Searchable, not listable: a box's root walks through it to its
    // bundle (mounted over with the box's own tmpfs, see `storage`).
    let bundles = layout::bundles(root);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(&bundles)
        .map_err(|e| Error::io("create", &bundles, e))?;
    let bundle = layout::bundle(root, id);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&bundle)
        .map_err(|e| Error::io("create sandbox bundle", &bundle, e))?;
    let alive = layout::box_exists(root);
    match crate::unprivileged::pool() {
        None => Allocator::new(root).allocate(opts.host_ids, id, &alive).map(BoxIds::block),
        Some(pool) if pool.count == 0 => Ok(BoxIds { base: 0, size: 1, root: 0 }),
        Some(pool) => {
            let block = crate::unprivileged::BLOCK;
            let base = Allocator::unprivileged(root, block).allocate(pool, id, &alive)?;
            Ok(BoxIds { base, size: block, root: 0 })
        }
    }
}

/// Creates the container of box `id`, whose bundle is written, with
/// `stdio` and `init`, once what must come before it is there (an ordinary
/// user's egress, `net::prepare`); a one-shot box's init (`Init::Program`) dies with
/// this process, even by SIGKILL: nothing would be left to enforce its
/// timeout.
pub(crate) fn create(root: &Path, id: &str, opts: &SandboxOptions, stdio: [i32; 3], init: Init) -> Result<Container> {
    crate::net::prepare(root, id, opts.egress.as_ref())?;
    let how = Supervised {
        stdio: Some(stdio),
        die_with_runtime: init == Init::Program,
        loopback: opts.loopback,
        seccomp_cache: Some(layout::seccomp_cache(root)),
        cgroup_v1_controllers: box_controllers(),
        init,
        // What the box tried and was refused goes into its results.
        record_refusals: !opts.no_seccomp,
        rootless_cgroups: crate::unprivileged::active(),
    };
    Ok(layout::runtime(root).create_supervised(id, layout::bundle(root, id), &how)?)
}

/// Gives box `id` (created, its init `pid` not yet started) its guarded
/// egress when asked: an error here keeps the box from starting.
pub(crate) fn egress(root: &Path, id: &str, pid: i32, opts: &SandboxOptions) -> Result<()> {
    opts.egress.as_ref().map_or(Ok(()), |e| crate::net::setup(root, id, pid, e))
}

/// Puts `--copy-in`'s files into the box whose bundle dir is `bundle`, and
/// starts watching `--report-writes`'s dir.
pub(crate) fn files_in(bundle: &Path, opts: &SandboxOptions) -> Result<Option<crate::writes::Watch>> {
    crate::copy::copy_ins(bundle, &opts.copy_in, opts.copy_limit)?;
    opts.report_writes.as_deref().map(|d| crate::writes::watch(bundle, d)).transpose()
}

/// Makes a persistent sandbox whose init idles until terminated, until
/// its lifetime (`opts.lifetime`, default [`DEFAULT_LIFETIME`])
/// ends, or until no command has touched it for `opts.idle_timeout`;
/// returns its id. Its deadline is enforced by every later command and by
/// the root's reaper, which the caller makes sure of (`reaper::ensure`).
pub(crate) fn launch(root: &Path, opts: &SandboxOptions, prefix: &str) -> Result<String> {
    opts.validate()?;
    crate::expiry::reap_expired(root);
    let id = layout::new_id(prefix)?;
    let bundle = layout::bundle(root, &id);
    // pid 1 of the box is its resident init: it forks what `exec` asks for
    // and reaps what those programs leave. It never execs its own program,
    // which must still be one the box has.
    let idle = ["/bin/sh".to_string()];
    // Held until the box runs (or is removed again).
    let lock = boxlock::lock(root, &id)?;
    let made = (|| -> Result<()> {
        let ids = provision(root, &id, opts)?;
        let forever = SandboxOptions { timeout: Duration::MAX, ..opts.clone() };
        spec::write_bundle(&bundle, &id, &forever, spec::Program::Exactly(&idle), ids)?;
        crate::copy::copy_ins(&bundle, &opts.copy_in, opts.copy_limit)?;
        let null = Path::new("/dev/null");
        let devnull =
            std::fs::OpenOptions::new().read(true).write(true).open(null).map_err(|e| Error::io("open", null, e))?;
        let fd = devnull.as_raw_fd();
        // Written before the box runs: a box that exists always has one.
        crate::lifetime::set(root, &id, opts.lifetime.unwrap_or(DEFAULT_LIFETIME))?;
        if let Some(t) = opts.idle_timeout {
            crate::idle::set(root, &id, t)?;
        }
        let mut c = create(root, &id, opts, [fd, fd, fd], Init::Resident)?;
        egress(root, &id, c.pid(), opts)?;
        Ok(c.start()?)
    })();
    match made {
        Ok(()) => Ok(id),
        Err(e) => Err(undo(root, &id, &lock, e)),
    }
}

/// Removes box `id`, which failed with `e` while being made (or just
/// after), and returns `e` with the removal's own failure, if any.
pub(crate) fn undo(root: &Path, id: &str, lock: &BoxLock, e: Error) -> Error {
    match remove_box(root, id, lock) {
        Ok(()) | Err(Error::Runtime(RuntimeError::NotFound(_))) => e,
        Err(cleanup) => Error::WithCleanup { error: Box::new(e), cleanup: Box::new(cleanup) },
    }
}
