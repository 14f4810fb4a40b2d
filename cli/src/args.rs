//! runc's command line, in clap.
//!
//! runc parses with Go's `flag` package, so callers send `-flag` as well as
//! `--flag`, `--flag=value`, booleans as `--flag=true`, and repeat flags
//! (the last one wins). [`normalize`] rewrites the single-dash long forms
//! before clap sees them; booleans take an optional `=value`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    /// enable systemd cgroup support; cgroupsPath is then "slice:prefix:name"
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
    /// still succeeds, as the runtime spec says.
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

#[derive(Debug, Subcommand)]
pub(crate) enum SandboxCommand {
    /// run a command in a new sandbox, then remove every trace of it
    Run(SandboxRunArgs),
    /// make a persistent sandbox and print its id
    Launch(SandboxLaunchArgs),
    /// run a command in a persistent sandbox (its files persist between calls)
    Exec(SandboxExecArgs),
    /// an interactive shell in a persistent sandbox
    Shell(SandboxIdArg),
    /// remove a persistent sandbox
    Terminate(SandboxIdArg),
    /// copy files into or out of a persistent sandbox: cp HOSTPATH ID:/BOXPATH, or cp ID:/BOXPATH HOSTPATH
    ///
    /// Box paths are resolved inside the box (a symlink the box planted can't lead to the host); a symlink is
    /// copied as a symlink, never followed, and copying in replaces whatever the box has at the path. Without
    /// --image only /work and /tmp can be copied. An existing directory at the destination takes a file under its
    /// name, or a directory's contents.
    Cp(SandboxCpArgs),
    /// list sandboxes
    List(SandboxListArgs),
    /// manage the pool of pre-started sandboxes
    #[command(subcommand)]
    Pool(SandboxPoolCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum SandboxPoolCommand {
    /// start idle sandboxes until N of these sizes are waiting
    Fill(Box<SandboxPoolFillArgs>),
    /// list the pool's sandboxes: idle or in use, their key, and the time an idle one has left
    List(SandboxListArgs),
    /// empty the pool: stop refilling it and terminate every idle sandbox (one in use goes when its run ends)
    Drain,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct SandboxSizeArgs {
    /// size preset: nano, micro, small, medium or large
    #[arg(long = "type", value_name = "PRESET")]
    pub preset: Option<String>,
    /// memory limit, e.g. 256M or 1G
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// CPU limit in cores, e.g. 0.5
    #[arg(long, value_name = "CORES")]
    pub cpus: Option<f64>,
    /// most processes at once
    #[arg(long, value_name = "N")]
    pub pids: Option<i64>,
    /// wall-clock limit of a run, e.g. 10s or 500ms; a launched box's lifetime unless --lifetime is given
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// size of the /tmp and /work tmpfs, e.g. 64M
    #[arg(long, value_name = "SIZE")]
    pub tmpfs_size: Option<String>,
    /// use this root filesystem instead of the host's /usr, /bin and /lib
    #[arg(long, value_name = "DIR", conflicts_with = "bundle")]
    pub rootfs: Option<PathBuf>,
    /// use this OCI bundle's root filesystem
    #[arg(long, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
    /// use an image as the read-only root, with writes going to a tmpfs of --tmpfs-size: a root filesystem
    /// directory, or an OCI image layout directory (its layers are unpacked once into <root>/sandbox-images)
    #[arg(long, value_name = "DIR", conflicts_with_all = ["rootfs", "bundle"])]
    pub image: Option<PathBuf>,
    /// set an environment variable (repeatable)
    #[arg(short, long, value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// network: "loopback" (default), "none" (loopback left down), or "egress" (NAT to the host's uplink, with
    /// 169.254/16, the private ranges and the host itself refused)
    ///
    /// "egress" gives the box eth0, a veth to the host with a default route through it; the host masquerades its
    /// IPv4 traffic to its own uplink. Refused from the box, by rules in the host's namespace: 169.254.0.0/16
    /// (cloud metadata), 10/8, 172.16/12, 192.168/16, 100.64/10, 0/8, 127/8, 224/4, 240/4, all IPv6 (fc00::/7 and
    /// fe80::/10 with it), every address of the host itself, and connections into the box. --allow-host narrows
    /// this further; --dns names the resolver and opens its port 53 only. Needs nft (nftables); turns on
    /// net.ipv4.ip_forward if it is off. If any part fails to install, the box does not start.
    #[arg(long, value_name = "MODE", default_value = "loopback")]
    pub network: String,
    #[command(flatten)]
    pub egress: SandboxEgressArgs,
    /// loosen: keep the root filesystem writable
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub writable_root: bool,
    /// loosen: run without the seccomp allowlist
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub no_seccomp: bool,
    /// the cgroup each box's own cgroup is made under (an absolute cgroup path)
    #[arg(long, value_name = "PATH", default_value = "/tinyrun-sandbox")]
    pub cgroup_parent: String,
    /// the pool of host ids each box gets 65536 of its own from: FIRST:COUNT, multiples of 65536, decimal or 0x hex
    /// (default 1879048192:268304384, i.e. 0x70000000 up to 0x7FFE0000)
    #[arg(long, value_name = "FIRST:COUNT", env = "TINYRUN_SANDBOX_ID_RANGE")]
    pub id_range: Option<String>,
}

/// The options of `--network egress`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SandboxEgressArgs {
    /// with --network egress: allow only this destination, a host name (resolved once, at set-up) or an IPv4
    /// address, and only PORT there if given (repeatable)
    #[arg(long, value_name = "HOST[:PORT]")]
    pub allow_host: Vec<String>,
    /// with --network egress: the resolver the box's /etc/resolv.conf names; port 53 there is allowed even if the
    /// address is private or the host's own
    #[arg(long, value_name = "IP")]
    pub dns: Option<String>,
    /// with --network egress: where each box's /30 link comes from, inside 169.254.0.0/16 or 100.64.0.0/10
    /// (default 169.254.64.0/18)
    #[arg(long, value_name = "CIDR", env = "TINYRUN_SANDBOX_EGRESS_RANGE")]
    pub egress_range: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxRunArgs {
    #[command(flatten)]
    pub size: SandboxSizeArgs,
    /// print one JSON object with the outcome, output and usage
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub json: bool,
    /// most bytes of stdout and of stderr kept with --json
    #[arg(long, value_name = "SIZE", default_value = "1M")]
    pub output_cap: String,
    #[command(flatten)]
    pub files: SandboxFilesArgs,
    /// with --json, list the files the command wrote under this box directory (e.g. /work)
    #[arg(long, value_name = "DIR")]
    pub report_writes: Option<PathBuf>,
    /// take a pre-started sandbox from the pool (see `sandbox pool fill`)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub pool: bool,
    /// the command and its arguments
    #[arg(required = true, last = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct SandboxFilesArgs {
    /// put host file or directory SRC at box path DST before the command runs, owned by the box's user
    /// (repeatable)
    #[arg(long, value_name = "SRC:DST")]
    pub copy_in: Vec<String>,
    /// the cap on the bytes copied (all --copy-in together, or one cp), e.g. 100M (default 1G)
    #[arg(long, value_name = "SIZE")]
    pub copy_limit: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxLaunchArgs {
    #[command(flatten)]
    pub size: SandboxSizeArgs,
    /// how long the box lives: when this has passed it is terminated and every trace of it removed, whether or
    /// not a tinyrun command is running (default: --timeout, or the preset's)
    #[arg(long, value_name = "DURATION")]
    pub lifetime: Option<String>,
    #[command(flatten)]
    pub files: SandboxFilesArgs,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxCpArgs {
    /// the cap on the bytes copied, e.g. 100M (default 1G)
    #[arg(long, value_name = "SIZE")]
    pub copy_limit: Option<String>,
    /// what to copy: a host path, or ID:/PATH in a sandbox
    pub src: String,
    /// where to: ID:/PATH in a sandbox, or a host path
    pub dst: String,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxExecArgs {
    /// set an environment variable (repeatable)
    #[arg(short, long, value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// the command's wall-clock limit, e.g. 10s: then it, and what it started in its session, is killed; the box
    /// lives on (the box's lifetime applies in any case)
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// print one JSON object with the outcome, output and usage, as `sandbox run --json` does
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub json: bool,
    /// most bytes of stdout and of stderr kept with --json
    #[arg(long, value_name = "SIZE", default_value = "1M")]
    pub output_cap: String,
    /// the sandbox's id
    pub id: String,
    /// the command and its arguments
    #[arg(required = true, last = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxIdArg {
    /// the sandbox's id
    pub id: String,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxListArgs {
    /// select one of: table or json
    #[arg(short, long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxPoolFillArgs {
    #[command(flatten)]
    pub size: SandboxSizeArgs,
    /// how long a pooled sandbox may wait unused before it is removed (default 10m)
    #[arg(long, value_name = "DURATION")]
    pub idle_lifetime: Option<String>,
    /// how many idle sandboxes to keep
    pub count: usize,
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

/// Rewrites Go-style `-flag` into `--flag` for every long flag the command
/// line knows, stopping at `--` and, for commands whose trailing arguments
/// belong to the container (exec, ps), at the first positional after the
/// subcommand.
/// Whether `argv` is a `tinyrun sandbox ...` command line (whose usage
/// errors exit 125, as its other failures do).
pub(crate) fn is_sandbox(argv: &[String]) -> bool {
    argv.iter().skip(1).take_while(|a| *a != "--").any(|a| a == "sandbox")
}

/// Whether `argv` is a sandbox command that asked for a `--json` result,
/// which it must print even when its command line doesn't parse.
pub(crate) fn wants_json(argv: &[String]) -> bool {
    is_sandbox(argv) && argv.iter().take_while(|a| *a != "--").any(|a| a == "--json" || a == "--json=true")
}

/// A line to add to clap's error for a mistake it can't name: a sandbox
/// command given without the `--` before it.
pub(crate) fn usage_hint(argv: &[String], e: &clap::Error) -> Option<String> {
    use clap::error::ErrorKind;
    if !is_sandbox(argv) || argv.iter().any(|a| a == "--") {
        return None;
    }
    let sub = argv.iter().skip_while(|a| *a != "sandbox").nth(1)?;
    let usage = match sub.as_str() {
        "run" => "tinyrun sandbox run [OPTIONS] -- COMMAND [ARG...]",
        "exec" => "tinyrun sandbox exec [OPTIONS] ID -- COMMAND [ARG...]",
        _ => return None,
    };
    matches!(e.kind(), ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument)
        .then(|| format!("hint: the command goes after --, so its options are not read as ours: {usage}"))
}

pub(crate) fn normalize(cmd: &clap::Command, argv: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut it = argv.into_iter();
    if let Some(a0) = it.next() {
        out.push(a0);
    }
    let mut scope = cmd.clone();
    let mut in_sub = false;
    let mut positionals = 0;
    let mut expect_value = false;
    for arg in it.by_ref() {
        if expect_value {
            expect_value = false;
            out.push(arg);
            continue;
        }
        if arg == "--" {
            out.push(arg);
            break;
        }
        let long_name = |a: &str| -> Option<(String, Option<String>)> {
            let body = a.strip_prefix("--").or_else(|| a.strip_prefix('-').filter(|b| !b.is_empty()))?;
            let (name, val) = match body.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (body.to_string(), None),
            };
            Some((name, val))
        };
        if arg.starts_with('-') && arg.len() > 1 {
            if let Some((name, val)) = long_name(&arg) {
                let found = if name.chars().count() == 1 {
                    let c = name.chars().next().unwrap_or('-');
                    scope.get_arguments().find(|a| a.get_short() == Some(c)).cloned()
                } else {
                    scope.get_arguments().find(|a| a.get_long() == Some(name.as_str())).cloned()
                };
                if let Some(a) = found {
                    let takes_value =
                        a.get_action().takes_values() && a.get_num_args().is_none_or(|n| n.min_values() > 0);
                    expect_value = takes_value && val.is_none();
                    // Spell every flag the long way, so `-e=X` or `-cwd` can't
                    // be read as a cluster of short flags.
                    let long = a.get_long().map(str::to_string).unwrap_or(name);
                    out.push(match val {
                        Some(v) => format!("--{long}={v}"),
                        None => format!("--{long}"),
                    });
                    continue;
                }
            }
            out.push(arg);
            continue;
        }
        if !in_sub {
            if let Some(sub) = scope.find_subcommand(&arg).cloned() {
                in_sub = true;
                scope = sub;
                out.push(arg);
                continue;
            }
        } else {
            positionals += 1;
            let stop = matches!(scope.get_name(), "exec" | "ps" | "kill");
            out.push(arg);
            if stop && positionals >= 1 {
                break;
            }
            continue;
        }
        out.push(arg);
    }
    out.extend(it);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn norm(v: &[&str]) -> Vec<String> {
        normalize(&Cli::command(), v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn single_dash_long_flags_become_double_dash() {
        assert_eq!(
            norm(&["tinyrun", "-root", "/r", "-log-format=json", "create", "-bundle", "/b", "x"]),
            ["tinyrun", "--root", "/r", "--log-format=json", "create", "--bundle", "/b", "x"]
        );
    }

    #[test]
    fn values_that_look_like_flags_are_left_alone() {
        assert_eq!(norm(&["tinyrun", "--root", "-weird", "state", "x"]), ["tinyrun", "--root", "-weird", "state", "x"]);
    }

    #[test]
    fn parses_go_style_forms() {
        let c = Cli::try_parse_from(norm(&[
            "tinyrun",
            "--root=/r",
            "-debug",
            "--criu",
            "criu",
            "run",
            "--detach=true",
            "--keep",
            "--keep",
            "id1",
            "-b",
            "/b",
        ]))
        .unwrap();
        assert!(c.debug);
        let Some(Command::Run(r)) = c.command else { panic!("not run") };
        assert!(r.detach && r.keep);
        assert_eq!(r.create.id, "id1");
        assert_eq!(r.create.bundle.as_deref(), Some(std::path::Path::new("/b")));
    }

    #[test]
    fn short_flags_with_separate_values_keep_the_rest_flags() {
        assert_eq!(
            norm(&["tinyrun", "exec", "-e=ONE=1", "-e", "TWO=2", "-cwd", "/tmp", "-u=1000", "id", "sh", "-c", "x"]),
            ["tinyrun", "exec", "--env=ONE=1", "--env", "TWO=2", "--cwd", "/tmp", "--user=1000", "id", "sh", "-c", "x"]
        );
    }

    #[test]
    fn kill_takes_id_then_signal() {
        let c = Cli::try_parse_from(norm(&["tinyrun", "kill", "--all", "x", "9"])).unwrap();
        let Some(Command::Kill(k)) = c.command else { panic!("not kill") };
        assert!(k.all);
        assert_eq!((k.id.as_str(), k.signal.as_str()), ("x", "9"));
    }
}
