//! Containers made by a supervisor: a program that makes and drives
//! containers of its own (`tinyrun sandbox`; an API server), rather than an
//! engine through runc's command line. What runc's `create` takes is
//! [`CreateOptions`]; what a supervisor asks for beyond it is
//! [`Supervised`], given to [`Runtime::create_supervised`]. Nothing here
//! loosens the container's config: each field changes how the runtime sets
//! up, feeds or watches the container, and the spec still says what it
//! may do.
//!
//! With [`Init::Resident`], init stays as the container's pid 1 once
//! started and runs programs on request ([`Runtime::resident`], module
//! `resident`): a supervisor that runs many short commands in one
//! long-lived container pays a fork and an execve per command instead of
//! an `exec`.

use std::os::fd::RawFd;
use std::path::PathBuf;

use super::{check_id, Container, CreateOptions, Runtime};
use crate::error::Result;

/// What a supervisor's container gets beyond runc's `create`.
#[derive(Debug, Clone, Default)]
pub struct Supervised {
    /// fds to become init's stdin, stdout and stderr (default: ours).
    pub stdio: Option<[RawFd; 3]>,
    /// The container is killed if the calling process dies, even after
    /// `create` returned (a supervisor that enforces limits from outside,
    /// such as a timeout, must not leave a container that nobody limits).
    pub die_with_runtime: bool,
    /// Bring `lo` up when the container gets a new network namespace
    /// (runc leaves it down): loopback-only networking with no other setup.
    pub loopback: bool,
    /// A directory of compiled seccomp programs, one per profile, shared
    /// by the containers created with it: a container whose profile is
    /// already there skips libseccomp. It must be the caller's own (it is
    /// made 0700; one that others can write is not used), trusted like the
    /// state root.
    pub seccomp_cache: Option<PathBuf>,
    /// On a cgroup v1 (or hybrid) host, make and join the container's
    /// cgroup only in the hierarchies of these controllers (`cpu`,
    /// `memory`, ...) instead of in every mounted hierarchy as runc does
    /// (`None`). `pids` and `freezer` are always added: later commands
    /// list, signal and freeze the container through them. Named
    /// hierarchies (`name=systemd`) and a hybrid host's cgroup2 mount are
    /// left out, so there the container stays in the caller's cgroup. A
    /// limit whose controller is not listed (device rules and
    /// `linux.devices` need `devices`) is refused. Kept in the state
    /// record for every later command; no effect on a cgroup v2 host or
    /// with the systemd driver. Each hierarchy left out is a directory
    /// less to make, join and remove per container.
    pub cgroup_v1_controllers: Option<Vec<String>>,
    /// What init becomes once started.
    pub init: Init,
    /// Record the calls the seccomp filter refuses: each is answered with
    /// the profile's errno by a supervisor that keeps the record (see
    /// [`crate::Refusals`]). With [`Init::Resident`] that is the resident
    /// init ([`crate::Resident::refused`], [`crate::ResidentProcess::refused`]);
    /// otherwise the caller, through the listener [`Container::refusals`]
    /// hands over once. A profile that can't be recorded this way (a
    /// `listenerPath`, several refusing errnos) is refused.
    pub record_refusals: bool,
    /// The caller may lack permission for cgroups (runc's `--rootless`):
    /// with no `linux.cgroupsPath` the container gets a cgroup only where
    /// the caller may make one, and otherwise must ask for no limit.
    pub rootless_cgroups: bool,
}

/// What a supervisor's container's init does at `start`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Init {
    /// It execs `process.args`, as under runc.
    #[default]
    Program,
    /// It does not exec `process.args` but stays as the container's pid 1
    /// and runs programs on request ([`Runtime::resident`]), each forked
    /// from it with every isolation step already applied. The container
    /// must have no terminal; `process.args` must still name a program of
    /// the container.
    Resident,
}

impl Runtime {
    /// Creates container `id` from the bundle at `bundle` for a
    /// supervisor, as `create` does (detached: it returns once init waits
    /// for `start`) with what `how` adds.
    pub fn create_supervised(&self, id: &str, bundle: impl Into<PathBuf>, how: &Supervised) -> Result<Container> {
        check_id(id)?;
        let opts = CreateOptions {
            bundle: bundle.into(),
            detach: true,
            rootless_cgroups: how.rootless_cgroups,
            ..CreateOptions::default()
        };
        let bundle = crate::spec::load(&opts.bundle)?;
        self.create_from(id, &bundle, &opts, how, None)
    }
}
