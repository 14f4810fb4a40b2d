//! runc's command line, in clap.
//!
//! runc parses with Go's `flag` package, so callers send `-flag` as well as
//! `--flag`, `--flag=value`, booleans as `--flag=true`, and repeat flags
//! (the last one wins). [`normalize`] rewrites the single-dash long forms
//! before clap sees them; booleans take an optional `=value`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod normalize;
mod sandbox;

pub(crate) use normalize::normalize;
pub(crate) use sandbox::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ListFormat {
    Table,
    Json,
}

#[derive(Debug, Parser)]
#[command(
    name = "tinyrun",
    about = "an OCI container runtime with runc's command line",
    disable_version_flag = true,
    args_override_self = true,
    subcommand_required = false
)]
pub(crate) struct Cli {
    /// root directory for storage of container state (this should be located in tmpfs)
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// set the log file to write tinyrun logs to (default is stderr)
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// set the log format ('text' (default), or 'json')
    #[arg(long, value_enum, default_value = "text", value_name = "FORMAT")]
    pub log_format: LogFormat,
    /// enable debug logging
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub debug: bool,
    /// enable systemd cgroup support: each container is a transient scope unit (a slice for a name ending in
    /// ".slice") of systemd, or of the caller's own systemd when rootless (needs systemd as PID 1 on cgroup
    /// v2); cgroupsPath is then "slice:prefix:name"
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub systemd_cgroup: bool,
    /// ignored: accepted because callers still pass it
    #[arg(long, hide = true, value_name = "PATH")]
    pub criu: Option<String>,
    /// ignore cgroup permission errors ('true', 'false', or 'auto')
    #[arg(long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub rootless: Option<String>,
    /// print the version
    #[arg(short = 'v', long)]
    pub version: bool,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// create a container
    Create(CreateArgs),
    /// executes the user defined process in a created container
    ///
    /// The poststart hooks run once the program is executed, before start returns, even when
    /// the program has already exited. A failing poststart hook is logged as a warning and start
    /// still succeeds, as the runtime spec says. A failing startContainer hook keeps the program
    /// from running and stops the container (status 1, the failure on its stderr), and, as with
    /// runc, start logs a warning, runs the poststart hooks and succeeds.
    Start(IdArg),
    /// output the state of a container
    State(IdArg),
    /// kill sends the specified signal (default: SIGTERM) to the container's init process
    Kill(KillArgs),
    /// delete any resources held by the container often used with detached containers
    ///
    /// The poststop hooks run once everything is removed. A failing poststop hook is logged as a
    /// warning and delete still succeeds, as the runtime spec says.
    Delete(DeleteArgs),
    /// create and run a container
    Run(RunArgs),
    /// lists containers started by tinyrun with the given root
    List(ListArgs),
    /// create a new specification file
    Spec(SpecArgs),
    /// execute new process inside the container
    Exec(ExecArgs),
    /// ps displays the processes running inside a container
    Ps(PsArgs),
    /// display container events such as OOM notifications, cpu, memory, and IO usage statistics
    Events(EventsArgs),
    /// pause suspends all processes inside the container
    Pause(IdArg),
    /// resumes all processes that have been previously paused
    Resume(IdArg),
    /// update container resource constraints
    Update(UpdateArgs),
    /// show the enabled features
    Features,
    /// run untrusted code in a hardened, throw-away box
    ///
    /// Host ids: every box maps its uids and gids 0..65535 to a range of 65536 host ids of its own, taken
    /// from a pool (default 0x70000000 up to 0x7FFE0000: above Debian's SUB_UID_MAX, outside systemd's container
    /// and foreign-image ranges, below 2^31) and skipping every range in /etc/subuid and /etc/subgid. Ranges in
    /// use are recorded under <root>/sandbox-ids and freed when the box is removed. Choose another pool with
    /// --id-range FIRST:COUNT or TINYRUN_SANDBOX_ID_RANGE=FIRST:COUNT (multiples of 65536). Ranges are kept apart
    /// among the boxes of one --root: give boxes under different roots different pools.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
}

impl Command {
    /// The exit status of a failure of this command.
    pub(crate) fn failure_code(&self) -> u8 {
        // exec's own failures are told apart from the program's status;
        // the sandbox's too, as podman does (125).
        match self {
            Command::Exec(_) => 255,
            Command::Sandbox(_) => 125,
            _ => 1,
        }
    }

    /// Whether this is `tinyrun sandbox`, whose errors read as sentences
    /// (runc's commands keep runc's log lines).
    pub(crate) fn is_sandbox(&self) -> bool {
        matches!(self, Command::Sandbox(_))
    }
}

#[derive(Debug, Args)]
pub(crate) struct IdArg {
    /// the container's id
    pub id: String,
}

#[derive(Debug, Args, Clone)]
pub(crate) struct CreateArgs {
    /// path to the root of the bundle directory, defaults to the current directory
    #[arg(short, long, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
    /// path to an AF_UNIX socket which will receive a file descriptor referencing the master end of the console's pseudoterminal
    #[arg(long, value_name = "PATH")]
    pub console_socket: Option<PathBuf>,
    /// specify the file to write the process id to
    #[arg(long, value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
    /// do not use pivot root to jail process inside rootfs
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub no_pivot: bool,
    /// do not create a new session keyring for the container
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub no_new_keyring: bool,
    /// pass N additional file descriptors to the container (stdio + $LISTEN_FDS + N in total)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub preserve_fds: u32,
    /// path to an AF_UNIX socket which will receive a pidfd of the container's init (not supported)
    #[arg(long, value_name = "PATH")]
    pub pidfd_socket: Option<PathBuf>,
    /// the container's id
    pub id: String,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub create: CreateArgs,
    /// detach from the container's process
    #[arg(short, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub detach: bool,
    /// do not delete the container after it exits
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub keep: bool,
    /// disable the use of the subreaper used to reap reparented processes
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub no_subreaper: bool,
}

#[derive(Debug, Args)]
pub(crate) struct KillArgs {
    /// send the specified signal to all processes inside the container
    #[arg(short, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub all: bool,
    /// the container's id
    pub id: String,
    /// the signal: a number, or a name with or without SIG
    #[arg(default_value = "SIGTERM")]
    pub signal: String,
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// forcibly deletes the container if it is still running (uses SIGKILL)
    #[arg(short, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub force: bool,
    /// the container's id
    pub id: String,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// select one of: table or json
    #[arg(short, long, value_enum, default_value = "table")]
    pub format: ListFormat,
    /// display only container IDs
    #[arg(short, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SpecArgs {
    /// path to the root of the bundle directory
    #[arg(short, long, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
    /// generate a configuration for a rootless container
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub rootless: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// path to an AF_UNIX socket which will receive a file descriptor referencing the master end of the console's pseudoterminal
    #[arg(long, value_name = "PATH")]
    pub console_socket: Option<PathBuf>,
    /// path to an AF_UNIX socket which will receive a pidfd of the process (not supported)
    #[arg(long, value_name = "PATH")]
    pub pidfd_socket: Option<PathBuf>,
    /// current working directory in the container
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// set environment variables (repeatable); each overrides the config's variable of that name
    #[arg(short, long, value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// allocate a pseudo-TTY
    #[arg(short, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub tty: bool,
    /// UID (format: <uid>[:<gid>])
    #[arg(short, long, value_name = "UID[:GID]")]
    pub user: Option<String>,
    /// additional gids (repeatable)
    #[arg(short = 'g', long, value_name = "GID")]
    pub additional_gids: Vec<u32>,
    /// path to the process.json
    #[arg(short, long, value_name = "FILE")]
    pub process: Option<PathBuf>,
    /// detach from the container's process
    #[arg(short, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub detach: bool,
    /// specify the file to write the process id to
    #[arg(long, value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
    /// set the asm process label for the process commonly used with selinux
    #[arg(long, value_name = "LABEL")]
    pub process_label: Option<String>,
    /// set the apparmor profile for the process
    #[arg(long, value_name = "PROFILE")]
    pub apparmor: Option<String>,
    /// set the no new privileges value for the process
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub no_new_privs: bool,
    /// add a capability to the bounding set for the process (repeatable)
    #[arg(short, long, value_name = "CAP")]
    pub cap: Vec<String>,
    /// pass N additional file descriptors to the container (stdio + N in total)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub preserve_fds: u32,
    /// run the process in an (existing) sub-cgroup(s): [controller:]path (repeatable)
    #[arg(long, value_name = "PATH")]
    pub cgroup: Vec<String>,
    /// allow exec in a paused container
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub ignore_paused: bool,
    /// the container's id
    pub id: String,
    /// the command and its arguments (ignored with --process)
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct PsArgs {
    /// select one of: table or json
    #[arg(short, long, value_enum, default_value = "table")]
    pub format: ListFormat,
    /// the container's id
    pub id: String,
    /// arguments for the host's ps (default -ef)
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub ps_args: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct EventsArgs {
    /// set the stats collection interval (a Go duration such as 5s)
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub interval: String,
    /// display the container's stats then exit
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub stats: bool,
    /// the container's id
    pub id: String,
}

#[derive(Debug, Args)]
pub(crate) struct UpdateArgs {
    /// path to a file containing the resources to update, or '-' to read from standard input
    #[arg(short, long, value_name = "FILE")]
    pub resources: Option<PathBuf>,
    /// specifies per cgroup weight, range is from 10 to 1000
    #[arg(long)]
    pub blkio_weight: Option<u16>,
    /// CPU CFS period to be used for hardcapping (in usecs). 0 to use system default
    #[arg(long)]
    pub cpu_period: Option<u64>,
    /// CPU CFS hardcap limit (in usecs). Allowed cpu time in a given period
    #[arg(long, allow_negative_numbers = true)]
    pub cpu_quota: Option<i64>,
    /// CPU CFS hardcap burst limit (in usecs)
    #[arg(long)]
    pub cpu_burst: Option<u64>,
    /// CPU shares (relative weight vs. other containers)
    #[arg(long)]
    pub cpu_share: Option<u64>,
    /// CPU realtime period to be used for hardcapping (in usecs)
    #[arg(long)]
    pub cpu_rt_period: Option<u64>,
    /// CPU realtime hardcap limit (in usecs)
    #[arg(long, allow_negative_numbers = true)]
    pub cpu_rt_runtime: Option<i64>,
    /// CPU(s) to use
    #[arg(long)]
    pub cpuset_cpus: Option<String>,
    /// memory node(s) to use
    #[arg(long)]
    pub cpuset_mems: Option<String>,
    /// set cgroup SCHED_IDLE or not, 0: default behavior, 1: SCHED_IDLE
    #[arg(long)]
    pub cpu_idle: Option<i64>,
    /// memory limit (in bytes, or with a k/m/g suffix; -1 for unlimited)
    #[arg(long, allow_negative_numbers = true)]
    pub memory: Option<String>,
    /// memory reservation or soft_limit (in bytes)
    #[arg(long, allow_negative_numbers = true)]
    pub memory_reservation: Option<String>,
    /// total memory usage (memory + swap); set '-1' to enable unlimited swap
    #[arg(long, allow_negative_numbers = true)]
    pub memory_swap: Option<String>,
    /// maximum number of pids allowed in the container
    #[arg(long, allow_negative_numbers = true)]
    pub pids_limit: Option<i64>,
    /// the string of Intel RDT/CAT L3 cache schema (not supported)
    #[arg(long)]
    pub l3_cache_schema: Option<String>,
    /// the string of Intel RDT/MBA memory bandwidth schema (not supported)
    #[arg(long)]
    pub mem_bw_schema: Option<String>,
    /// ignored: kernel memory limits are gone from the kernel
    #[arg(long, hide = true)]
    pub kernel_memory: Option<String>,
    /// ignored: kernel memory limits are gone from the kernel
    #[arg(long, hide = true)]
    pub kernel_memory_tcp: Option<String>,
    /// the container's id
    pub id: String,
}
