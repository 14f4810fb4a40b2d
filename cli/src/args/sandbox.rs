//! `tinyrun sandbox`'s command line: its own, not runc's.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::ListFormat;

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
    Terminate(SandboxTerminateArgs),
    /// set the lifetime a persistent sandbox has left: it now ends --lifetime from now
    Extend(SandboxExtendArgs),
    /// copy files into or out of a persistent sandbox: cp HOSTPATH ID:/BOXPATH, or cp ID:/BOXPATH HOSTPATH
    ///
    /// As docker cp, both ways: into an existing directory DEST, SRC goes as DEST/basename(SRC), or, when SRC ends
    /// with /., SRC's entries go into DEST; a missing DEST is made as a copy of SRC (of a directory's entries); a
    /// file SRC replaces a file DEST, and a directory SRC over anything but a directory is an error. Missing
    /// parents of DEST are made in the box, owned by its user, but not on the host. Any absolute box path can be
    /// copied but those under the host's read-only directories and files (/usr, /lib*, the few /etc entries),
    /// /proc, /sys and /dev; box paths are resolved inside the box. Below SRC and DEST nothing is followed: copying
    /// in, a symlink is copied as it is; copying out, a symlink that leads out of what is copied is refused, as its
    /// copy would name a path on the host, unless -L follows it inside the box; a symlink at DEST in the box is
    /// replaced, not written through. Fifos, sockets and devices inside a directory are left out. A copy is made
    /// whole under a temporary name before it is moved into place, so one that fails leaves nothing behind.
    Cp(SandboxCpArgs),
    /// list sandboxes
    List(SandboxListArgs),
    /// manage the pool of pre-started sandboxes
    #[command(subcommand)]
    Pool(SandboxPoolCommand),
    /// serve the sandbox over HTTP/JSON (runs tinyrun-sandbox-api, installed beside tinyrun; its flags:
    /// tinyrun-sandbox-serve(8))
    Serve(SandboxServeArgs),
    /// answer and report the refused system calls of guarded containers (the policy's refusalAgent)
    ///
    /// Listens on --socket (0600, in a directory only its user may write) for the listeners the guarded class
    /// (tinyrun-guarded) hands over at each create, answers every refused call with the profile's errno, and keeps
    /// one report per container in --reports (made 0700; each report 0600): <container id>.json, the refused object
    /// of a sandbox result (system
    /// calls, limits hit) with the pod's namespace, pod and container names, rewritten within 200 ms of a change and
    /// once more with "ended": true when the container's last process is gone; removed --keep after that. Runs until
    /// killed. While it is down, guarded containers are not created, and running ones get ENOSYS for a refused call.
    GuardAgent(SandboxGuardAgentArgs),
}

#[derive(Debug, Args)]
pub(crate) struct SandboxGuardAgentArgs {
    /// the socket to listen on: the guard policy's refusalAgent
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// the directory the reports are written to
    #[arg(long, value_name = "DIR")]
    pub reports: PathBuf,
    /// how long an ended container's report is kept, e.g. 10m
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub keep: String,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxServeArgs {
    /// the server's flags, passed on as they are (see tinyrun-sandbox-serve(8))
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "FLAGS")]
    pub flags: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SandboxPoolCommand {
    /// start idle sandboxes until N of these sizes are waiting
    Fill(Box<SandboxPoolFillArgs>),
    /// list the pool's sandboxes: idle or in use, their key, and the time an idle one has left
    List(SandboxListArgs),
    /// empty a pool (the KEY `pool list` shows) or, with --all, every pool: stop refilling it and terminate its
    /// idle sandboxes (one in use goes when its run ends)
    Drain(SandboxPoolDrainArgs),
}

#[derive(Debug, Args)]
pub(crate) struct SandboxPoolDrainArgs {
    /// drain every pool of the root
    #[arg(long, conflicts_with = "key")]
    pub all: bool,
    /// the pool's key, as `pool list` shows it
    #[arg(required_unless_present = "all")]
    pub key: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct SandboxSizeArgs {
    /// size preset: nano, micro, small, medium or large
    #[arg(long = "type", value_name = "PRESET")]
    pub preset: Option<String>,
    /// memory limit, e.g. 256M or 1G; at most the host's memory
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub memory: Option<String>,
    /// CPU limit in cores, e.g. 0.5; at most the host's CPUs
    #[arg(long, value_name = "CORES", allow_hyphen_values = true)]
    pub cpus: Option<f64>,
    /// most processes at once, threads included
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub pids: Option<i64>,
    /// wall-clock limit of a run, e.g. 10s or 500ms; given to launch, the box's lifetime unless --lifetime is also
    /// given
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub timeout: Option<String>,
    /// size of the /tmp and /work tmpfs, e.g. 64M
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub tmpfs_size: Option<String>,
    /// use this root filesystem instead of the host's /usr, /bin and /lib (read-only, as the lower layer of an
    /// overlay: nothing is ever written into DIR)
    #[arg(long, value_name = "DIR", conflicts_with = "bundle")]
    pub rootfs: Option<PathBuf>,
    /// use this OCI bundle's root filesystem (as --rootfs uses its DIR)
    #[arg(long, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
    /// use an image as the root, with writes going to a tmpfs of --tmpfs-size: a root filesystem directory, an OCI
    /// image layout directory, or LAYOUT:TAG for its image tagged TAG (org.opencontainers.image.ref.name)
    ///
    /// A path that exists is taken whole, colons and all; otherwise the text after its last colon is the tag, if
    /// what comes before it is a layout directory. A layout with several images needs a tag. Layers are applied
    /// once into <root>/sandbox-images, shared by every box; the image's owners (0 to 65535) are the box's own.
    /// The image's Env, User, WorkingDir, Entrypoint and Cmd apply as docker run applies them.
    #[arg(long, value_name = "DIR|LAYOUT:TAG", conflicts_with_all = ["rootfs", "bundle"])]
    pub image: Option<PathBuf>,
    /// the most bytes the image cache keeps (least recently used layers no box uses go first), e.g. 2G (default:
    /// 4G, or half the size of the cache's file system if that is less)
    #[arg(long, value_name = "SIZE")]
    pub image_cache_size: Option<String>,
    /// run as USER[:GROUP] (names or ids, looked up in the box's /etc/passwd and /etc/group), instead of the
    /// image's User or the sandbox's user 1000; root is the box's own root, without capabilities (for installs
    /// into an image's overlay)
    #[arg(long, value_name = "USER[:GROUP]")]
    pub user: Option<String>,
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
    /// this further; --dns names the resolver and opens its port 53 only. All of it is set up over netlink (the
    /// kernel needs nf_tables; no program is run). If net.ipv4.ip_forward is off, it is turned on while egress boxes run, with a guard (the nftables table ip
    /// tinyrun) that forwards nothing but the boxes' traffic, and turned off again with the last box; a host that
    /// forwards already is left as it is. No IPv6 egress: the box's IPv6 packets are dropped. If any part fails to
    /// install, the box does not start. For an ordinary user the box reaches the network through pasta (Debian:
    /// passt) instead, with a copy of the host's address and no port forwarded either way; the same destinations
    /// (the host's addresses and gateways included) are refused by the same rules, loaded into the box's own
    /// network namespace, which the box has no capability over, before pasta starts; --egress-range does not apply
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
    /// the cgroup each box's own cgroup is made under (an absolute cgroup path; for an ordinary user, below the
    /// cgroup v2 subtree delegated to it)
    #[arg(long, value_name = "PATH", default_value = "/tinyrun-sandbox")]
    pub cgroup_parent: String,
    /// for an ordinary user without a delegated cgroup v2 subtree (a cgroup v1 host, no systemd user instance):
    /// enforced refuses the box, naming what is missing; best-effort makes it with the rlimits that still apply
    /// (RLIMIT_NPROC, RLIMIT_AS, RLIMIT_DATA, RLIMIT_FSIZE, RLIMIT_CPU, at most the caller's hard limits), and each
    /// --json result says "limits": "best-effort" with the lists limits_applied and limits_not_applied. Root's
    /// boxes always have their cgroup
    #[arg(long, value_name = "MODE", default_value = "enforced", value_parser = ["enforced", "best-effort"])]
    pub limits: String,
    /// the pool of host ids each box gets 65536 of its own from: FIRST:COUNT, multiples of 65536, decimal or 0x hex
    /// (default 1879048192:268304384, i.e. 0x70000000 up to 0x7FFE0000). An ordinary user's boxes take 4096 each
    /// from its /etc/subuid and /etc/subgid ranges instead
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
    /// (default 169.254.64.0/18); root's boxes only
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
    /// give the command our stdin (without it, its stdin is /dev/null)
    #[arg(short, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub interactive: bool,
    /// the command and its arguments (with an image, after its Entrypoint; none: the image's Cmd)
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct SandboxFilesArgs {
    /// copy host file or directory SRC to box path DST before the command runs, owned by the box's user, as sandbox
    /// cp does (repeatable)
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
    /// not a tinyrun command is running (default: 30m, or --timeout if given); `sandbox extend` changes it
    #[arg(long, value_name = "DURATION")]
    pub lifetime: Option<String>,
    /// end the box once no command has touched it (exec, shell, cp or extend, counted from when the last one
    /// ended) for this long, or "off" (default: 10m)
    #[arg(long, value_name = "DURATION")]
    pub idle_timeout: Option<String>,
    #[command(flatten)]
    pub files: SandboxFilesArgs,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxCpArgs {
    /// the cap on the bytes copied, e.g. 100M (default 1G)
    #[arg(long, value_name = "SIZE")]
    pub copy_limit: Option<String>,
    /// copying out, follow a symlink that leads out of what is copied (SRC itself, or one inside it) inside the box,
    /// and copy what it names there
    #[arg(short = 'L', long)]
    pub follow_link: bool,
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
    /// the command's wall-clock limit from this call on, e.g. 10s: then it and everything it started are killed
    /// (SIGKILL, by its cgroup); the box lives on (the box's lifetime applies in any case)
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// give the command our stdin (without it, its stdin is /dev/null)
    #[arg(short, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub interactive: bool,
    /// kill what the command leaves running (background processes, daemons) when it exits; without it they run on
    /// until the box ends
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub kill_children: bool,
    /// with --json, list the files the command wrote under this box directory (e.g. /work)
    #[arg(long, value_name = "DIR")]
    pub report_writes: Option<PathBuf>,
    /// the command's working directory in the box (an absolute path), instead of the box's own (as `docker exec -w`)
    #[arg(short = 'w', long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
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
pub(crate) struct SandboxExtendArgs {
    /// the lifetime the box has left from now on (longer or shorter than before), e.g. 30m
    #[arg(long, value_name = "DURATION", required = true)]
    pub lifetime: String,
    /// the sandbox's id
    pub id: String,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxIdArg {
    /// the sandbox's id
    pub id: String,
}

#[derive(Debug, Args)]
pub(crate) struct SandboxTerminateArgs {
    /// the sandbox's id
    pub id: String,
    /// print what the box tried and was refused over its life, as JSON ({"id": ..., "refused": {...}}), read
    /// before it is removed
    #[arg(long)]
    pub json: bool,
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
