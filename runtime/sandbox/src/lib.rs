//! `tinyrun sandbox`: a hardened box for code nobody reviewed, on top of the
//! same create/start/exec/delete code as every other container.
//!
//! The sandbox only writes an OCI spec (module `spec`) and drives the
//! runtime through its public API ([`tinyrun::Runtime`]); it adds no
//! isolation mechanism of its own. Defaults, each loosened only by an
//! explicit option: a user namespace mapping the box to a range of
//! unprivileged host ids of its own (module `ids`), no capabilities,
//! no_new_privs, private pid/mount/ipc/uts/net/cgroup namespaces,
//! loopback-only network, a read-only root made of the host's /usr, /bin,
//! /lib* and a few /etc files, size-capped tmpfs at /tmp and /work,
//! memory/CPU/pids limits, a seccomp allowlist, and a wall-clock timeout
//! enforced from outside.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod boxfs;
mod boxlock;
mod copy;
mod error;
mod gc;
pub mod guard;
mod idle;
mod ids;
mod image;
mod lifetime;
mod lockdir;
mod net;
mod options;
mod passwd;
mod pool;
mod process;
mod result;
mod run;
mod spec;
mod stdio;
mod storage;
mod sys;
mod tombstone;
mod wait;
mod writes;

#[cfg(test)]
mod tests;

pub use copy::{cp, CopyIn, CpOptions, DEFAULT_COPY_LIMIT};
pub use error::{Error, Result};
pub use ids::IdRange;
pub use lifetime::{extend, DEFAULT_IDLE_TIMEOUT, DEFAULT_LIFETIME};
pub use net::{parse_dns, AllowHost, Cidr, Egress};
pub use options::{parse_duration, parse_size, Preset, SandboxOptions, DEFAULT_CGROUP_PARENT, MIN_MEMORY};
pub use pool::{
    drain as pool_drain, fill as pool_fill, list as pool_list, take as pool_take, PoolBox, PoolOptions,
    DEFAULT_IDLE_LIFETIME,
};
pub use run::{
    exec, launch, list, run, run_pooled, shell, terminate, ExecRequest, Output, PoolUse, SandboxResult, SCHEMA_VERSION,
    TIMED_OUT, TINYRUN_FAILED,
};
pub use writes::{Writes, Written};
