//! The hand-written sections of the man pages: EXIT STATUS, FILES and
//! EXAMPLES, which clap's definitions can't say. `man.rs` appends them to
//! each generated page.

/// The sections of one page.
pub(crate) struct Extra {
    pub exit_status: &'static str,
    pub files: &'static str,
    /// (command line, what it does).
    pub examples: &'static [(&'static str, &'static str)],
}

const STATE_FILES: &str = "/run/tinyrun (or the directory given with --root): the state root, one directory per \
     container holding state.json (the record), config.json (the config as it was at create) and, while the \
     container is created, start.sock (what start connects to).";

const SANDBOX_FILES: &str = "Under the state root (/run/tinyrun, or --root): sandbox/ (the boxes' container state; a \
     launched box's holds agent.sock, 0600, where its resident init takes the programs exec and run --pool ask \
     for, and resident.json, 0600, the cgroup directory their cgroups are made in), \
     sandbox-bundles/ (their bundles and generated roots; a launched box's deadline is sandbox-bundles/ID/expires, \
     in unix milliseconds, and its idle timeout sandbox-bundles/ID/idle, touched by every command that uses the \
     box; a pooled box taken by a run has sandbox/ID/claimed: the run's deadline, pid and start \
     time), sandbox-pool/ (a directory per pool key, 0700, whose record.json, 0600, holds how many boxes to keep \
     and the options they are made with; its lock is held while boxes of the key are made or drained), \
     sandbox-expired/ (when and why each box that expired in the last hour ended), sandbox-ids/ (the host id \
     ranges in use, one file per box), sandbox-images/ (the image cache, 0700: layers/ holds each layer applied \
     onto the ones below it, by chain id, with the image's own owners; a box's bundle lists the layers it uses in \
     image-layers), sandbox-seccomp/ (the seccomp program of each \
     profile in use, compiled by this build of tinyrun and libseccomp, 0700), sandbox-net/ (the /30 link of \
     each box with --network egress, one file per box, named by its first address; for an ordinary user's box, \
     pasta.ID: its pasta's pid and start time, with pasta's pid file and log beside it), sandbox-boxes.lock (one \
     byte per box, locked while the box is made or removed) and sandbox-reaper.lock (held by the root's reaper \
     while it runs). /etc/subuid and /etc/subgid are read so no box gets a range listed \
     there. With --network egress, the box's host-side link trb-<hash> and nftables table inet tinyrun-<hash> \
     live in the host's network namespace, with the forward guard ip tinyrun while tinyrun keeps \
     net.ipv4.ip_forward on for its boxes; /run/tinyrun-egress.lock orders their changes between state roots. \
     An ordinary user's egress box has its network namespace bound at sandbox-bundles/ID/netns (in the \
     user's own mount namespace), holding its table inet tinyrun-<hash>.";

const SANDBOX_STATUS: &str = "The command's exit status, or 128+N if signal N killed it (or stopped tinyrun, \
     which then killed the command); 124 if the time limit \
     killed it (--timeout, or the end of a launched box's lifetime); 125 if tinyrun failed (a bad option, a box \
     that could not be made or does not exist); 126 if the command could not be executed; 127 if it was not \
     found. With --json: 0 once the result object is printed, whatever the command did (the object says how it \
     ended), and 125, with an object holding only error, if it could not be run.";

/// A paragraph of a hand-written man page section.
pub(crate) enum Block {
    /// Text.
    P(&'static str),
    /// A term (in bold) and what it means.
    Item(&'static str, &'static str),
    /// Lines shown as they are (commands, JSON).
    Example(&'static str),
}

/// The reference sections of `tinyrun sandbox`'s page: what the --json
/// result holds, the exit statuses, presets and defaults, the box's files,
/// and what the host must provide.
const SANDBOX_REFERENCE: &[(&str, &[Block])] = &[
    (
        "JSON RESULT",
        &[
            Block::P(
                "sandbox run --json and sandbox exec --json print exactly one JSON object on one line, on stdout, \
                 in every case, failures to make the box included. Fields may be added within a schema_version; \
                 one that changes meaning or goes away raises it.",
            ),
            Block::Item("schema_version", "The format's version: 2 (2 added refused)."),
            Block::Item(
                "error",
                "null, or why the command could not be run at all (a bad option, a box that could not be made, \
                 an unknown box); the other fields are then empty and tinyrun exits 125.",
            ),
            Block::Item(
                "exit_code",
                "The command's exit status, or null if a signal killed it. 126: it could not be executed; 127: \
                 it was not found (the reason is on its stderr, as a shell puts it).",
            ),
            Block::Item("signal", "The signal that killed the command (\"SIGKILL\"), or null if it exited."),
            Block::Item(
                "timed_out",
                "true if the time limit killed it (run: --timeout; exec: --timeout or the end of the box's \
                 lifetime). signal is then SIGKILL.",
            ),
            Block::Item("oom_killed", "true if the kernel's OOM killer acted in the box (signal is then SIGKILL)."),
            Block::Item("duration_ms", "Wall time from the start of the box (exec: of the command) to its end."),
            Block::Item("cpu_ms", "CPU time used by the whole box."),
            Block::Item("peak_memory_bytes", "The highest memory use of the whole box."),
            Block::Item(
                "stdout",
                "The command's output, {\"text\", \"encoding\", \"truncated\"}: text is the bytes as UTF-8 \
                 (encoding \"utf-8\"), or, if they are not UTF-8, base64 of the bytes (encoding \"base64\"), so \
                 nothing is lost. truncated: more than --output-cap bytes were written and only the first were \
                 kept (a character cut at the cap is dropped).",
            ),
            Block::Item("stderr", "The same for its standard error."),
            Block::Item("pool", "With run --pool only: \"hit\" if a pre-started box was taken, \"miss\" if not."),
            Block::Item(
                "writes",
                "With --report-writes DIR only (run or exec): the files the command made or changed there.",
            ),
            Block::Item(
                "refused",
                "What the box tried and was refused while the command ran; absent when nothing was. syscalls: \
                 the calls the seccomp filter refused (each still fails with EPERM, as the profile says), by \
                 name and count, in the order first seen, with the first few values of a telling argument (arg: \
                 the request of ioctl and ptrace, the flags of unshare and clone, the domain of socket; values \
                 in hex); at most 64 distinct calls, the refusals of any others counted in syscalls_unlisted. \
                 limits: the counters of the box's cgroup that grew, pids_max (forks refused at --pids), \
                 memory_high, memory_max and memory_oom (cgroup v2; memory_max is memory.failcnt on v1), \
                 oom_kills, cpu_throttled_periods and cpu_throttled_us. connections: with --network egress, the \
                 destinations its rules rejected (the metadata address, the private ranges, the host's own \
                 addresses, what --allow-host does not list), each {address, protocol (tcp, udp, icmp or the \
                 number), port (tcp and udp), count (packets; a refused connection is one)}; at most 64 distinct \
                 destinations, the first ones refused, the packets to any others counted in \
                 connections_unlisted; IPv6 is not listed. network_unreachable: connections and datagrams that \
                 failed for want of a route (ENETUNREACH), which without --network egress is every one off the \
                 box. output_cut_bytes: bytes written beyond --output-cap. exec's result has what was refused while its command ran, including refusals \
                 of other commands running in the box then; the box's whole record is in list --format json \
                 and terminate --json. Without the seccomp filter (--no-seccomp) there is no syscalls entry.",
            ),
            Block::P(
                "The command's stdin is /dev/null unless -i (--interactive) gives it ours, as docker exec -i does.",
            ),
            Block::P(
                "Example, refused: sandbox run --json -- python3 -c 'import ctypes, fcntl, termios; \
                 ctypes.CDLL(None).ptrace(0, 0, 0, 0); fcntl.ioctl(0, termios.TIOCSTI, b\"x\")' (the second \
                 call fails, so the command exits 1)",
            ),
            Block::Example(
                r#"{"schema_version":2,"error":null,"exit_code":1,"signal":null,"timed_out":false,
 "oom_killed":false,"duration_ms":85,"cpu_ms":18,"peak_memory_bytes":3604480,
 "stdout":{"text":"","encoding":"utf-8","truncated":false},
 "stderr":{"text":"...PermissionError: [Errno 1] Operation not permitted\n","encoding":"utf-8","truncated":false},
 "refused":{"syscalls":[{"name":"ptrace","count":1,"arg":"request","values":["0x0"]},
  {"name":"ioctl","count":1,"arg":"request","values":["0x5412"]}]}}"#,
            ),
            Block::P(
                "Example, refused connections: sandbox run --json --network egress -- python3 -c 'import \
                 socket; socket.create_connection((\"169.254.169.254\", 80), timeout=3)' (an SSRF to the \
                 metadata address: the connection is refused at once)",
            ),
            Block::Example(
                r#"{"schema_version":2,"error":null,"exit_code":1,"signal":null,"timed_out":false,
 "oom_killed":false,"duration_ms":1008,"cpu_ms":61,"peak_memory_bytes":5111808,
 "stdout":{"text":"","encoding":"utf-8","truncated":false},
 "stderr":{"text":"...OSError: [Errno 113] No route to host\n","encoding":"utf-8","truncated":false},
 "refused":{"connections":[{"address":"169.254.169.254","protocol":"tcp","port":80,"count":1}]}}"#,
            ),
            Block::P("Example, exit: sandbox run --json -- sh -c 'echo hello; exit 3'"),
            Block::Example(
                r#"{"schema_version":2,"error":null,"exit_code":3,"signal":null,"timed_out":false,
 "oom_killed":false,"duration_ms":40,"cpu_ms":3,"peak_memory_bytes":471040,
 "stdout":{"text":"hello\n","encoding":"utf-8","truncated":false},
 "stderr":{"text":"","encoding":"utf-8","truncated":false}}"#,
            ),
            Block::P("Example, signal: sandbox run --json -- python3 -c 'import ctypes; ctypes.string_at(0)'"),
            Block::Example(
                r#"{"schema_version":2,"error":null,"exit_code":null,"signal":"SIGSEGV","timed_out":false,
 "oom_killed":false,"duration_ms":64,"cpu_ms":14,"peak_memory_bytes":3354624,
 "stdout":{"text":"","encoding":"utf-8","truncated":false},
 "stderr":{"text":"","encoding":"utf-8","truncated":false}}"#,
            ),
            Block::P("Example, timeout: sandbox run --json --timeout 1s -- sleep 10"),
            Block::Example(
                r#"{"schema_version":2,"error":null,"exit_code":null,"signal":"SIGKILL","timed_out":true,
 "oom_killed":false,"duration_ms":1005,"cpu_ms":3,"peak_memory_bytes":466944,
 "stdout":{"text":"","encoding":"utf-8","truncated":false},
 "stderr":{"text":"","encoding":"utf-8","truncated":false}}"#,
            ),
            Block::P(
                "Example, OOM: sandbox run --json --memory 32M -- python3 -c 'a = [b\"x\" * (1 << 20) for _ in \
                 range(64)]'",
            ),
            Block::Example(
                r#"{"schema_version":2,"error":null,"exit_code":null,"signal":"SIGKILL","timed_out":false,
 "oom_killed":true,"duration_ms":52,"cpu_ms":35,"peak_memory_bytes":33554432,
 "stdout":{"text":"","encoding":"utf-8","truncated":false},
 "stderr":{"text":"","encoding":"utf-8","truncated":false},"refused":{"limits":{"oom_kills":1}}}"#,
            ),
            Block::P("Example, setup error: sandbox run --json --rootfs /nonexistent -- true (exit status 125)"),
            Block::Example(
                r#"{"schema_version":2,"error":"open --rootfs /nonexistent: No such file or directory (os error 2)",
 "exit_code":null,"signal":null,"timed_out":false,"oom_killed":false,"duration_ms":0,"cpu_ms":0,
 "peak_memory_bytes":0,"stdout":{"text":"","encoding":"utf-8","truncated":false},
 "stderr":{"text":"","encoding":"utf-8","truncated":false}}"#,
            ),
            Block::P("(Shown over several lines here; tinyrun prints each on one line.)"),
        ],
    ),
    (
        "EXIT STATUS",
        &[
            Block::Item("0..123", "The command's own exit status (run, exec, shell)."),
            Block::Item(
                "124",
                "The time limit killed the command: run --timeout, exec --timeout, or the end of a \
                 launched box's lifetime.",
            ),
            Block::Item(
                "125",
                "tinyrun failed: a bad option or usage, a box that could not be made, an unknown \
                 box. The error is on stderr (and in --log); under --json it is also the object's error.",
            ),
            Block::Item(
                "126",
                "The command was found but could not be executed (not executable, a bad \
                 interpreter).",
            ),
            Block::Item("127", "The command was not found."),
            Block::Item(
                "128+N",
                "Signal N killed the command (137 for SIGKILL: the OOM killer, or a kill from \
                 outside), or tinyrun itself got SIGINT, SIGTERM or SIGHUP (130, 143, 129) and killed the \
                 command: run then removes its box, exec leaves the box as it was.",
            ),
            Block::P("With --json, tinyrun exits 0 once it has printed a result, and 125 with an error object."),
        ],
    ),
    (
        "PRESETS AND DEFAULTS",
        &[
            Block::P(
                "--type picks a preset; explicit --memory, --cpus, --pids, --timeout and --tmpfs-size go on top. \
                 With no --type: micro.",
            ),
            Block::Example(
                "PRESET  MEMORY  CPUS  PIDS  TIMEOUT  TMPFS (each of /tmp, /work)
nano    128M    0.25   128       5s  32M
micro   256M    0.5    256      10s  64M
small   512M    1      512      30s  128M
medium  1G      2     1024      60s  256M
large   2G      4     2048     120s  512M",
            ),
            Block::P(
                "PIDS counts threads as well as processes (the kernel's tasks): the presets leave a threaded \
                 program room for a few hundred threads while still stopping a fork bomb. A preset's CPUs and \
                 memory above what the host has are lowered to the host's, with a warning; an explicit --cpus \
                 or --memory above it is refused.",
            ),
            Block::P("The smallest --memory a box starts with is 8M. Swap is not allowed on top of the limit."),
            Block::P(
                "Defaults, each loosened only by its own option: network loopback only (--network none: not \
                 even lo up); the seccomp allowlist on (--no-seccomp); a read-only root (--writable-root); no \
                 capabilities, no_new_privs; private pid, mount, ipc, uts, network, cgroup and user namespaces; \
                 --output-cap 1M; --copy-limit 1G; --cgroup-parent /tinyrun-sandbox (each box's cgroup is \
                 PARENT/ID; on cgroup v1 only in the cpu, cpuacct, memory, pids and freezer hierarchies, \
                 elsewhere the box stays in the caller's cgroup).",
            ),
            Block::P(
                "A launched box lives for --lifetime (default 30m, or --timeout if that is given; a preset's \
                 timeout is a run's, not a session's), and ends sooner if no command has touched it for \
                 --idle-timeout (default 10m; off for none): exec, shell, cp and extend touch a box when they \
                 start and when they end, and a box is never idle while one of them runs. sandbox extend ID \
                 --lifetime D makes the box end D from now, sooner or later than before. An expired box is \
                 terminated and purged by the root's reaper, a small process (tinyrun-reaper) that runs while \
                 a box of the root has a deadline; if it is gone, the next sandbox command of the root purges \
                 expired boxes first. For an hour after, exec, cp, shell, extend and terminate on its id fail \
                 with \"sandbox ID expired at T (why)\", T in RFC 3339. exec --timeout limits one command, \
                 from the call on (it and all it started are killed by its own cgroup; the box lives on). Outside --json, the sandbox's errors are \
                 one line, \"tinyrun sandbox: what failed\" (with --log, the log gets its line as well). A pool keeps the number of idle boxes pool \
                 fill asked for (never more): a run that takes one, and the reaper, replace what is taken, \
                 terminated or past its --idle-lifetime (default 10m) until pool drain KEY (or --all) empties \
                 the pool and stops its refills. A run whose tinyrun process dies gives its pooled box back to \
                 the reaper, which removes it.",
            ),
            Block::P(
                "exec (and run --pool) returns when its command exits, with its output up to then. What the \
                 command leaves running (a server started with &, a daemon) is a background process of the box: \
                 it runs on until the box ends and serves later execs, its writes to the output it was given are \
                 discarded, and it never holds the caller's terminal or input; --kill-children kills it with the \
                 command instead. Each command runs in a cgroup of its own under the box's: exec --timeout \
                 (counted from the call, so a paused or busy box can't stretch it) kills the command and \
                 everything it started, setsid or not, with SIGKILL, and the box lives on. So does a caller \
                 that dies or is stopped.",
            ),
        ],
    ),
    (
        "THE BOX'S FILES",
        &[
            Block::P(
                "By default the root is a skeleton made in the box's bundle directory: the host's /usr, /bin, \
                 /sbin and /lib* bound read-only (or the host's symlinks for a merged /usr), read-only binds of \
                 a few /etc entries programs need (ld.so.cache, ld.so.conf*, localtime, nsswitch.conf, \
                 alternatives, ssl, ca-certificates, mime.types), and /etc/passwd, group, hosts and hostname of \
                 its own. Nothing else of the host is there.",
            ),
            Block::P(
                "Writable: /tmp and /work, each a tmpfs of --tmpfs-size owned by the box's user; /work is the \
                 home and working directory. /dev/shm is a tmpfs of the same size.",
            ),
            Block::P(
                "Also: /proc; /dev as a small tmpfs with null, zero, full, random, urandom and tty, its own \
                 devpts (/dev/pts, /dev/ptmx) and mqueue; /sys read-only, with /sys/kernel, /sys/firmware and \
                 /sys/fs/cgroup masked, as are /proc/kcore, /proc/keys and the other masked /proc files.",
            ),
            Block::P(
                "With --image the root is an overlay: the image read-only below, a tmpfs of --tmpfs-size above \
                 holding every write (for a launched box, for as long as it lives). The image's files keep their \
                 owners (0 to 65535) inside the box: the box sees them through id-mapped mounts, so a file the \
                 image gives to 1000 is the box user's. An OCI layout's layers are applied as an engine applies \
                 them, each onto the layers below (a symlink to a directory followed inside the image), and kept \
                 once for every box in <root>/sandbox-images; over --image-cache-size (default 4G, or half the \
                 size of the cache's file system if that is less) the least recently used layers no box uses are \
                 removed.",
            ),
            Block::P(
                "With --rootfs or --bundle, that directory is the read-only lower layer of an overlay whose \
                 upper layer is in the box's tmpfs: mount points are made there, nothing is ever written into \
                 the directory, and the root stays read-only unless --writable-root. Its owners are the host's \
                 (a file of the host's root is nobody's in the box).",
            ),
            Block::P(
                "Copies (--copy-in, sandbox cp) reach any absolute path in the box but those under the host's \
                 read-only binds (/usr, /bin, /sbin, /lib*, the /etc entries above), /proc, /sys and /dev, \
                 which are refused; missing directories on the way are made, owned by the box's user. What is \
                 copied outside /work and /tmp goes into the box's root: with the default root that is the \
                 skeleton, read-only in the box (so a copied /app can be run but not written, unless \
                 --writable-root), though a copy into a launched box shows up in it at once; with --image it \
                 is the overlay, writable; with --rootfs or --bundle the root is the caller's directory, and \
                 copies only read it. Directories are treated as docker cp treats them, both ways (see \
                 tinyrun-sandbox-cp(8)).",
            ),
            Block::P(
                "The command runs as uid and gid 1000 (sandbox) in the box's own user namespace, where ids \
                 0..65535 map to a range of 65536 unprivileged host ids of its own (see Host ids above). An \
                 image's User, or --user USER[:GROUP], changes that: names are looked up in the box's \
                 /etc/passwd and /etc/group, and root is the root of the box's user namespace, without \
                 capabilities. An image that names no User runs as 1000, not as root.",
            ),
            Block::P(
                "An OCI image's config applies as docker run applies it: Env, WorkingDir (else /work), and \
                 Entrypoint followed by the given command, or by Cmd when none is given (sandbox exec runs its \
                 command as given, as the box's user in its working directory). --image LAYOUT:TAG picks the \
                 image tagged TAG (org.opencontainers.image.ref.name); a layout holding several images needs \
                 one. The environment is PATH, HOME, TMPDIR=/tmp and LANG, then the image's Env (not its HOME \
                 or TMPDIR), then -e, each replacing an earlier one of its name. HOME is /work, except with an \
                 image: the image's HOME if the box runs as the image's User, else the user's home from \
                 /etc/passwd if the image has it as a directory of the user's, else /work.",
            ),
        ],
    ),
    (
        "REQUIREMENTS",
        &[
            Block::P(
                "tinyrun sandbox runs as root on the host: it makes user namespaces with id ranges of their \
                 own, cgroups and mounts. Nothing in the box is root on the host. The kernel needs user, pid, \
                 mount, network and cgroup namespaces, pidfds and overlayfs (for --image and --rootfs). \
                 --image needs Linux 6.15 (overlayfs layers on detached id-mapped mounts) and a cache (--root) \
                 on a file system with id-mapped mounts: ext4, xfs, btrfs, or tmpfs (from Linux 6.3).",
            ),
            Block::P(
                "The box's root user is an unprivileged host id, which must be able to reach its root \
                 filesystem: every directory above --root's sandbox-bundles must be \
                 searchable by others (o+x); tinyrun says so if one is not.",
            ),
        ],
    ),
];

/// The reference sections for the page of `name`, besides EXIT STATUS,
/// FILES and EXAMPLES.
pub(crate) fn reference(name: &str) -> &'static [(&'static str, &'static [Block])] {
    match name {
        "tinyrun-sandbox" => SANDBOX_REFERENCE,
        _ => &[],
    }
}

const SANDBOX_ZERO_OR_125: &str = "0 on success; 125 on any error, with the error on stderr (and, with --log, in the \
     log).";

const ZERO_OR_ONE: &str = "0 on success; 1 on any error, with the error on stderr (and, with --log, in the log).";

type Page = (&'static [&'static str], &'static str, &'static [(&'static str, &'static str)]);

/// Each page's EXIT STATUS and EXAMPLES, by page name.
const PAGES: &[Page] = &[
    (
        &["tinyrun"],
        "That of the command run; see each command's page.",
        &[
            ("tinyrun spec && tinyrun run demo", "make a config in the current bundle directory and run it"),
            ("tinyrun --root /run/mine list", "list the containers of another state root"),
        ],
    ),
    (
        &["tinyrun-create"],
        ZERO_OR_ONE,
        &[("tinyrun create --bundle /srv/b --pid-file /run/b.pid web", "create web from the bundle /srv/b")],
    ),
    (&["tinyrun-start"], ZERO_OR_ONE, &[("tinyrun start web", "run the program of the created container web")]),
    (&["tinyrun-state"], ZERO_OR_ONE, &[("tinyrun state web", "print web's state as JSON")]),
    (
        &["tinyrun-kill"],
        "0 once the signal is sent; 1 if the container does not exist, is not running, or the signal is \
         unknown.",
        &[("tinyrun kill web KILL", "send SIGKILL to web's init"), ("tinyrun kill --all web TERM", "to all")],
    ),
    (
        &["tinyrun-delete"],
        ZERO_OR_ONE,
        &[("tinyrun delete web", "remove a stopped container"), ("tinyrun delete --force web", "kill it first")],
    ),
    (
        &["tinyrun-run"],
        "The program's exit status, or 128+N if signal N killed it; with --detach, 0 once it runs. 1 if the \
         container could not be made or started.",
        &[
            ("tinyrun run --bundle /srv/b web", "create, start, wait, delete"),
            ("tinyrun run -d --bundle /srv/b web", "leave it running"),
        ],
    ),
    (&["tinyrun-list"], ZERO_OR_ONE, &[("tinyrun list -q", "the ids only"), ("tinyrun list --format json", "")]),
    (
        &["tinyrun-spec"],
        ZERO_OR_ONE,
        &[("tinyrun spec", "write config.json here"), ("tinyrun spec --rootless", "one for an unprivileged user")],
    ),
    (
        &["tinyrun-exec"],
        "The program's exit status, or 128+N if signal N killed it; with --detach, 0 once it runs. 255 if \
         the process could not be made or its program could not be run (the error says which).",
        &[
            ("tinyrun exec web sh -c 'echo hi'", "run a command in web"),
            ("tinyrun exec -t web sh", "an interactive shell on a terminal"),
        ],
    ),
    (&["tinyrun-ps"], ZERO_OR_ONE, &[("tinyrun ps web", "the container's processes"), ("tinyrun ps -f json web", "")]),
    (
        &["tinyrun-events"],
        ZERO_OR_ONE,
        &[("tinyrun events --stats web", "one set of statistics"), ("tinyrun events --interval 1s web", "a stream")],
    ),
    (&["tinyrun-pause"], ZERO_OR_ONE, &[("tinyrun pause web", "freeze every process of web")]),
    (&["tinyrun-resume"], ZERO_OR_ONE, &[("tinyrun resume web", "thaw them")]),
    (
        &["tinyrun-update"],
        ZERO_OR_ONE,
        &[("tinyrun update --memory 512M web", "change a limit"), ("tinyrun update -r - web < res.json", "")],
    ),
    (&["tinyrun-features"], ZERO_OR_ONE, &[("tinyrun features", "what this build supports, as JSON")]),
    (
        &["tinyrun-sandbox-run"],
        SANDBOX_STATUS,
        &[
            ("tinyrun sandbox run -- python3 -c 'print(2 + 2)'", "a one-shot box"),
            ("tinyrun sandbox run --json --timeout 2s -- sh -c 'sleep 5'", "a result object, timed out"),
            (
                "tinyrun sandbox run --network egress --dns 192.0.2.53 --allow-host pypi.org:443 -- pip download x",
                "egress to one host and port, names resolved by 192.0.2.53",
            ),
            ("echo x | tinyrun sandbox run -i --json -- cat", "stdin reaches the command with -i"),
        ],
    ),
    (
        &["tinyrun-sandbox-exec"],
        SANDBOX_STATUS,
        &[
            ("tinyrun sandbox exec \"$id\" -- pip install --user x", "run a command in a launched box"),
            ("tinyrun sandbox exec --json --timeout 30s \"$id\" -- make test", "a result object, as run gives"),
            (
                "tinyrun sandbox exec \"$id\" -- sh -c 'python3 -m http.server 8000 &'",
                "a server that outlives its exec and answers later ones",
            ),
        ],
    ),
    (
        &["tinyrun-sandbox"],
        // Not shown: the page's reference sections have their own.
        "",
        &[
            ("tinyrun sandbox run -- python3 -c 'print(2 + 2)'", "a one-shot box"),
            ("id=$(tinyrun sandbox launch --lifetime 2h)", "a persistent box, gone after 2 hours (or 10 idle minutes)"),
            ("tinyrun sandbox extend \"$id\" --lifetime 1h", "it now ends an hour from now"),
            ("tinyrun sandbox exec \"$id\" -- pip install --user x", "use it"),
            ("tinyrun sandbox terminate \"$id\"", "remove it and every trace of it now"),
            ("tinyrun sandbox pool fill 4 && tinyrun sandbox run --pool --json -- true", "a warm pool"),
        ],
    ),
    (
        &["tinyrun-sandbox-cp"],
        SANDBOX_ZERO_OR_125,
        &[
            (
                "tinyrun sandbox cp ./app \"$id\":/app",
                "make the box's /app a copy of ./app (into /app/app if it exists)",
            ),
            ("tinyrun sandbox cp ./app/. \"$id\":/app", "copy ./app's entries into /app"),
            ("tinyrun sandbox cp \"$id\":/work/out ./results/", "copy the box's /work/out into ./results"),
            ("tinyrun sandbox cp -L \"$id\":/work/latest ./latest", "a symlink: what it names in the box"),
        ],
    ),
    (
        &["tinyrun-sandbox-shell"],
        "The shell's exit status; 125 if tinyrun failed (an unknown box, one past its lifetime).",
        &[("tinyrun sandbox shell \"$id\"", "an interactive /bin/sh in a launched box, on a terminal")],
    ),
    (
        &["tinyrun-sandbox-pool-list", "tinyrun-sandbox-pool-drain", "tinyrun-sandbox-pool-fill"],
        SANDBOX_ZERO_OR_125,
        &[
            ("tinyrun sandbox pool fill --type nano --idle-lifetime 5m 8", "keep 8 nano boxes waiting"),
            ("tinyrun sandbox pool list", "the pools' boxes, idle or in use, with each key's options"),
            ("tinyrun sandbox pool drain --all", "empty every pool of the root"),
        ],
    ),
];

/// Pages of the sandbox's commands not listed in [`PAGES`].
const SANDBOX_DEFAULT: (&str, &[(&str, &str)]) = (
    SANDBOX_ZERO_OR_125,
    &[
        ("id=$(tinyrun sandbox launch)", "a persistent box"),
        ("tinyrun sandbox exec \"$id\" -- pip install --user x", "use it"),
        ("tinyrun sandbox terminate \"$id\"", "remove it and every trace of it"),
    ],
);

/// The sections for the page of `name` (`tinyrun`, `tinyrun-create`, `tinyrun-sandbox-run`, ...).
pub(crate) fn extra(name: &str) -> Extra {
    let listed = PAGES.iter().find(|(names, _, _)| names.contains(&name)).map(|&(_, s, e)| (s, e));
    let (exit_status, examples) =
        listed.unwrap_or(if name.starts_with("tinyrun-sandbox") { SANDBOX_DEFAULT } else { (ZERO_OR_ONE, &[]) });
    let files = if name.starts_with("tinyrun-sandbox") { SANDBOX_FILES } else { STATE_FILES };
    Extra { exit_status, files, examples }
}
