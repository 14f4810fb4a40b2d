//! `tinyrun sandbox`: a hardened box for code nobody reviewed, on top of the
//! same create/start/exec/delete code as every other container.
//!
//! The sandbox only writes an OCI spec (module `spec`) and drives the
//! runtime through its public API ([`tinyrun::Runtime`], and its extension
//! point for supervisors, [`tinyrun::Supervised`]); it adds no isolation
//! mechanism of its own. Defaults, each loosened only by an explicit
//! option: a user namespace mapping the box to a range of unprivileged
//! host ids of its own (module `ids`), no capabilities, no_new_privs,
//! private pid/mount/ipc/uts/net/cgroup namespaces, loopback-only network,
//! a read-only root made of the host's /usr, /bin, /lib* and a few /etc
//! files, size-capped tmpfs at /tmp and /work, memory/CPU/pids limits, a
//! seccomp allowlist, and a wall-clock timeout enforced from outside.
//!
//! The modules form layers, each using only those below it (checked by
//! `conformance/layers`; ARCHITECTURE.md has the map): records under the
//! root; the mechanisms a box is made of (`net`, `image`, `storage`,
//! `process`) and its `spec`; taking a box apart (`teardown`), its ends
//! (`expiry`), and what commands read and write through it (`copy`,
//! `writes`, `stdio`, `wait`); making one (`make`) and the commands on
//! boxes (`run`, `exec`); the `pool`; the root's `reaper`. This file is
//! the entry: it composes what calls across the top layers (a launch, a
//! fill and a refill leave a reaper; a run first collects the garbage).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod boxfs;
mod boxlock;
mod claim;
mod copy;
mod detach;
mod error;
mod exec;
mod expiry;
mod gc;
pub mod guard;
mod idle;
mod ids;
mod image;
mod keys;
mod layout;
mod lifetime;
mod limits;
mod lockdir;
mod make;
mod net;
mod options;
mod passwd;
mod pool;
mod process;
mod reaper;
mod refused;
mod result;
mod run;
mod spec;
mod stdio;
mod storage;
mod teardown;
mod tombstone;
mod unprivileged;
mod wait;
mod writes;

#[cfg(test)]
mod tests;

use std::path::Path;

pub use copy::{cp, CpOptions};
pub use error::{Error, Result};
pub use exec::{check_cwd, exec, shell, ExecRequest};
pub use expiry::{extend, list};
pub use ids::IdRange;
pub use keys::{PoolOptions, DEFAULT_IDLE_LIFETIME};
pub use lifetime::{DEFAULT_IDLE_TIMEOUT, DEFAULT_LIFETIME};
pub use limits::Report as LimitsReport;
pub use net::{parse_dns, AllowHost, Cidr, Egress};
pub use options::{
    parse_duration, parse_size, CopyIn, LimitsMode, Preset, SandboxOptions, DEFAULT_CGROUP_PARENT, DEFAULT_COPY_LIMIT,
    MIN_MEMORY,
};
pub use pool::{drain as pool_drain, list as pool_list, take as pool_take, PoolBox};
pub use refused::{list_with_refused, of_box as refused, Listed, Refused, RefusedConnection, RefusedSyscall};
pub use result::{Output, PoolUse, SandboxResult, SCHEMA_VERSION, TIMED_OUT, TINYRUN_FAILED};
pub use teardown::terminate;
pub use unprivileged::{enter as enter_unprivileged, mode as unprivileged_mode, Mode as UserMode};
pub use writes::{Writes, Written};

/// Launched box `id`'s deadline in unix milliseconds, if it has one.
pub fn expires_at(root: &Path, id: &str) -> Option<u64> {
    tinyrun::check_id(id).ok()?;
    lifetime::expires(root, id)
}

/// Runs `cmd` in a fresh sandbox and removes it. With `capture`, output is
/// collected into the result; otherwise it goes to our stdout/stderr.
/// What crashed runs left behind is collected first.
pub fn run(root: &Path, opts: &SandboxOptions, cmd: &[String], capture: bool) -> Result<SandboxResult> {
    opts.validate()?;
    gc::collect(root);
    run::run(root, opts, cmd, capture)
}

/// Makes a persistent sandbox whose init idles until terminated, until
/// its lifetime (`opts.lifetime`, default [`DEFAULT_LIFETIME`]) ends, or
/// until no command has touched it for `opts.idle_timeout`; returns its
/// id. The root's reaper enforces its end (see `reaper`).
///
/// # Preconditions
/// The caller is single-threaded (it may leave a reaper).
pub fn launch(root: &Path, opts: &SandboxOptions, prefix: &str) -> Result<String> {
    let id = make::launch(root, opts, prefix)?;
    if let Err(e) = reaper::ensure(root) {
        // A box nobody would purge at its deadline is not made.
        let lock = boxlock::lock(root, &id)?;
        return Err(make::undo(root, &id, &lock, e));
    }
    Ok(id)
}

/// Makes idle sandboxes until `n` of these options are waiting (or removes
/// idle ones until only `n` are), and records the options and `n` for
/// later refills; returns the ids made. Each waits at most `opts.lifetime`
/// (default [`DEFAULT_IDLE_LIFETIME`]) unused.
///
/// # Preconditions
/// The caller is single-threaded (it may leave a reaper).
pub fn pool_fill(root: &Path, opts: &SandboxOptions, n: usize) -> Result<Vec<String>> {
    let made = pool::fill(root, opts, n);
    // Whatever was made has a deadline, even if the fill failed midway.
    let reaper = reaper::ensure(root);
    let made = made?;
    reaper.map(|()| made)
}

/// Runs `cmd` in a sandbox taken from the pool (a fresh one if the pool is
/// empty), removes it, and starts a detached refill.
///
/// # Preconditions
/// The caller is single-threaded (the refill is a forked child).
pub fn run_pooled(root: &Path, opts: &SandboxOptions, cmd: &[String], capture: bool) -> Result<SandboxResult> {
    opts.validate()?;
    // Computed once: it builds the box's whole spec.
    let key = pool::key(opts)?;
    // What a fresh box would run: with an image, its Entrypoint and Cmd.
    let pooled_cmd = spec::command(opts, cmd)?;
    let Some(id) = pool::take_keyed(root, &key, opts.timeout)? else {
        let mut res = run(root, opts, cmd, capture)?;
        res.pool = Some(PoolUse::Miss);
        recycle_detached(root, &key, None)?;
        return Ok(res);
    };
    let result = exec::run_in_pooled(root, &id, opts, &pooled_cmd, capture);
    let result = result.map(|r| SandboxResult { pool: Some(PoolUse::Hit), ..r });
    // Removing the used box and starting its replacement happen after the
    // caller has its answer: that is the point of a pool.
    let recycled = recycle_detached(root, &key, Some(&id));
    match (result, recycled) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e),
    }
}

/// Removes a used pool sandbox (`used`; none after a miss) and tops the
/// pool back up, in a detached child, so the caller that just used it
/// waits for neither. After a miss the pool is empty (its boxes expired
/// unused, or all are taken): it is topped up as after a hit, where `pool
/// fill` left a record for the key.
///
/// # Preconditions
/// The caller is single-threaded (see `detach::fork`).
fn recycle_detached(root: &Path, key: &str, used: Option<&str>) -> Result<()> {
    let filled = keys::read(root, key).is_some();
    if used.is_none() && !filled {
        return Ok(());
    }
    let remove = || used.map_or(Ok(()), |id| terminate(root, id));
    let child = match detach::fork() {
        Ok(c) => c,
        // No child to do it: remove the used box here, so it never lingers.
        Err(_) => return remove(),
    };
    if child {
        // Nothing is left to report to: the caller has its answer.
        detach::detach(&[]);
        // The caller's command line (its --env values too) is not ours to
        // show for as long as a refill takes: without a title of our own,
        // the used box is removed but nothing is refilled.
        let concealed = tinyrun::conceal_cmdline(c"tinyrun-pool").is_ok();
        let removed = remove();
        // A key nobody filled (or one drained since) is not refilled; the
        // boxes a refill makes have deadlines for the reaper.
        let refilled = match filled && concealed {
            true => pool::refill(root, key, keys::Take::Wait).and_then(|_| reaper::ensure(root)),
            false => Ok(()),
        };
        detach::exit(i32::from(removed.is_err() || refilled.is_err()));
    }
    Ok(())
}
