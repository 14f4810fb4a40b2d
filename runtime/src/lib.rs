//! tinyrun: an OCI runtime library.
//!
//! [`Runtime`] holds a state root; its methods are the OCI operations
//! (`create`, `start`, `state`, `kill`, `delete`) plus what callers of runc
//! also use (`run`, `list`). Everything the kernel is asked to do lives in
//! one module per isolation layer; `sys` holds the `unsafe` calls.
#![deny(unsafe_code)]

mod capabilities;
mod cgroups;
mod devices;
mod env;
mod error;
mod exe;
pub mod features;
mod hooks;
mod idmap;
mod lifecycle;
mod lsm;
mod mempolicy;
pub mod mountinfo;
mod namespaces;
pub mod os;
mod personality;
mod process;
mod rlimits;
mod rootfs;
mod sched;
mod seccomp;
pub mod spec;
mod state;
mod sys;
pub mod tree;
mod tty;
mod user;
mod warn;

pub use cgroups::LimitsHit;
pub use env::{check as check_env, merge as merge_env, prepare as prepare_env, InvalidEnv};
pub use error::{CgroupError, InitError, MountCall, Object, Reason, Result, RuntimeError, SysError};
pub use exe::reexec_sealed;
pub use idmap::{enter_own as enter_own_user_namespace, join_own as join_own_user_namespace, OwnUserns};
pub use lifecycle::kill::parse_signal;
pub use lifecycle::{
    check_id, load_process, Container, ContainerState, CreateOptions, ExecOptions, Init, ProcessOverrides, Resident,
    ResidentCommand, ResidentExit, ResidentProcess, ResidentStdio, ResidentTerminal, RunOptions, Runtime, Status,
    Supervised, Usage,
};
pub use lifecycle::{parse_bytes, UpdateFlags};
pub use oci_spec;
pub use process::title::conceal_cmdline;
pub use rlimits::raise_nofile;
pub use seccomp::refusals::{
    RefusalListener, Refusals, RefusedCall, MAX_ARGS as MAX_REFUSED_ARGS, MAX_CALLS as MAX_REFUSED_CALLS,
};
pub use seccomp::Filter as SeccompFilter;
pub use warn::{set_warning_sink, warn};

/// The runtime-spec version this build implements.
pub const SPEC_VERSION: &str = oci_spec::runtime::VERSION;
