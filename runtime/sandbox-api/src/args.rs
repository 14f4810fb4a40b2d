//! The command line of `tinyrun sandbox serve` (this binary's own): the
//! man page tinyrun-sandbox-serve(8) is generated from it (module `man`).

use std::path::PathBuf;

use clap::Parser;

/// serve the sandbox over HTTP/JSON, on a unix socket (and loopback TCP with a token)
///
/// Clients make and use boxes as `tinyrun sandbox` does, with the same options and the same JSON result
/// (runtime/sandbox-api/openapi.yaml has the routes). Each box is its creator's: the peer's uid on the socket, the
/// token on TCP; a client sees only its own boxes, uid 0 sees all. What clients may ask is bounded by --policy.
/// The library calls run in single-threaded worker processes, this binary run again with --worker.
#[derive(Debug, Parser)]
#[command(name = "tinyrun-sandbox-serve", version, args_override_self = true)]
pub(crate) struct Args {
    /// the sandbox root (state, bundles, the socket)
    #[arg(long, value_name = "DIR", default_value = "/run/tinyrun")]
    pub root: PathBuf,
    /// the group that may connect to the socket (mode 0660); without it only root may
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// the unix socket to listen on (default: <root>/sandbox.sock)
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// also listen on this loopback TCP address (127.0.0.1:PORT or [::1]:PORT); needs --token-file
    #[arg(long, value_name = "ADDR", requires = "token_file")]
    pub listen: Option<String>,
    /// also serve the e2b SDK's control plane and in-box daemon on the TCP address
    ///
    /// Point the unmodified e2b Python SDK here with E2B_API_URL=http://ADDR, E2B_SANDBOX_URL=http://ADDR and
    /// E2B_API_KEY=one of the tokens. It can then make, list, extend and end boxes (Sandbox.create, Sandbox.list,
    /// set_timeout, kill), run commands in them (commands.run, in the foreground or background, and kill) and read,
    /// write and list their files. Each box answers to the access token its create handed out. What a box here
    /// cannot do (another template, metadata, internet access, pause, a terminal, stdin, cwd, another user) is
    /// refused naming the field; the SDK's other calls are answered 404 or unimplemented.
    #[arg(long, requires = "listen")]
    pub e2b: bool,
    /// the bearer tokens TCP clients must send (one per line; each token is a client of its own)
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// what clients may ask for, as JSON (default: the sandbox's defaults only)
    ///
    /// Fields: presets, max_memory, max_cpus, max_pids, max_timeout, max_tmpfs_size, max_lifetime, max_copy_limit,
    /// max_pool_size, max_boxes (per client), images (paths, or prefixes ending in *), networks, allow_hosts
    /// (HOST[:PORT], *.DOMAIN, or * for any), allow_no_seccomp, allow_writable_root, allow_host_paths,
    /// allow_cgroup_parent, allow_id_range, allow_best_effort_limits (a request's limits: best-effort, for an ordinary
    /// user's server on a host that delegates it no cgroup). A request looser than the policy is refused with 403 naming
    /// its field.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// the most bytes of a request body (uploads: of a file or archive)
    #[arg(long, value_name = "SIZE", default_value = "1G")]
    pub max_body: String,
    /// close a connection that has not sent a whole request header for this long (and an upload that stalls)
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub idle_timeout: String,
    /// on SIGTERM, leave the boxes clients made running (a restarted server adopts them)
    #[arg(long)]
    pub keep_boxes: bool,
    /// how long SIGTERM waits for requests in flight before the boxes are terminated
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub drain_timeout: String,
    /// internal: run one library call read from stdin
    #[arg(long, hide = true)]
    pub worker: bool,
}
