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

const SANDBOX_FILES: &str = "Under the state root (/run/tinyrun, or --root): sandbox/ (the boxes' container state), \
     sandbox-bundles/ (their bundles and generated roots), sandbox-pool/ (how many pooled boxes to keep, per \
     configuration), sandbox-ids/ (the host id ranges in use, one file per box) and sandbox-net/ (the /30 link \
     of each box with --network egress, one file per box, named by its first address). /etc/subuid and \
     /etc/subgid are read so no box gets a range listed there. With --network egress, the box's host-side link \
     trb-<hash> and nftables table inet tinyrun-<hash> live in the host's network namespace.";

const ZERO_OR_ONE: &str = "0 on success; 1 on any error, with the error on stderr (and, with --log, in the log).";

/// The sections for the page of `name` (`tinyrun`, `tinyrun-create`, `tinyrun-sandbox-run`, ...).
pub(crate) fn extra(name: &str) -> Extra {
    let (exit_status, examples): (&str, &[(&str, &str)]) = match name {
        "tinyrun" => (
            "That of the command run; see each command's page.",
            &[
                ("tinyrun spec && tinyrun run demo", "make a config in the current bundle directory and run it"),
                ("tinyrun --root /run/mine list", "list the containers of another state root"),
            ],
        ),
        "tinyrun-create" => (
            ZERO_OR_ONE,
            &[("tinyrun create --bundle /srv/b --pid-file /run/b.pid web", "create web from the bundle /srv/b")],
        ),
        "tinyrun-start" => (ZERO_OR_ONE, &[("tinyrun start web", "run the program of the created container web")]),
        "tinyrun-state" => (ZERO_OR_ONE, &[("tinyrun state web", "print web's state as JSON")]),
        "tinyrun-kill" => (
            "0 once the signal is sent; 1 if the container does not exist, is not running, or the signal is \
             unknown.",
            &[("tinyrun kill web KILL", "send SIGKILL to web's init"), ("tinyrun kill --all web TERM", "to all")],
        ),
        "tinyrun-delete" => (
            ZERO_OR_ONE,
            &[("tinyrun delete web", "remove a stopped container"), ("tinyrun delete --force web", "kill it first")],
        ),
        "tinyrun-run" => (
            "The program's exit status, or 128+N if signal N killed it; with --detach, 0 once it runs. 1 if the \
             container could not be made or started.",
            &[
                ("tinyrun run --bundle /srv/b web", "create, start, wait, delete"),
                ("tinyrun run -d --bundle /srv/b web", "leave it running"),
            ],
        ),
        "tinyrun-list" => (ZERO_OR_ONE, &[("tinyrun list -q", "the ids only"), ("tinyrun list --format json", "")]),
        "tinyrun-spec" => (
            ZERO_OR_ONE,
            &[("tinyrun spec", "write config.json here"), ("tinyrun spec --rootless", "one for an unprivileged user")],
        ),
        "tinyrun-exec" => (
            "The program's exit status, or 128+N if signal N killed it; with --detach, 0 once it runs. 255 if \
             the process could not be made or its program could not be run (the error says which).",
            &[
                ("tinyrun exec web sh -c 'echo hi'", "run a command in web"),
                ("tinyrun exec -t web sh", "an interactive shell on a terminal"),
            ],
        ),
        "tinyrun-ps" => {
            (ZERO_OR_ONE, &[("tinyrun ps web", "the container's processes"), ("tinyrun ps -f json web", "")])
        }
        "tinyrun-events" => (
            ZERO_OR_ONE,
            &[
                ("tinyrun events --stats web", "one set of statistics"),
                ("tinyrun events --interval 1s web", "a stream"),
            ],
        ),
        "tinyrun-pause" => (ZERO_OR_ONE, &[("tinyrun pause web", "freeze every process of web")]),
        "tinyrun-resume" => (ZERO_OR_ONE, &[("tinyrun resume web", "thaw them")]),
        "tinyrun-update" => (
            ZERO_OR_ONE,
            &[("tinyrun update --memory 512M web", "change a limit"), ("tinyrun update -r - web < res.json", "")],
        ),
        "tinyrun-features" => (ZERO_OR_ONE, &[("tinyrun features", "what this build supports, as JSON")]),
        "tinyrun-sandbox-run" | "tinyrun-sandbox-exec" => (
            "The command's exit status, or 128+N if signal N killed it; 1 if the box could not be made.",
            &[
                ("tinyrun sandbox run -- python3 -c 'print(2 + 2)'", "a one-shot box"),
                ("tinyrun sandbox run --json --timeout 2s -- sh -c 'sleep 5'", "a result object, timed out"),
                (
                    "tinyrun sandbox run --network egress --dns 192.0.2.53 --allow-host pypi.org:443 -- pip download x",
                    "egress to one host and port, names resolved by 192.0.2.53",
                ),
            ],
        ),
        _ if name.starts_with("tinyrun-sandbox") => (
            ZERO_OR_ONE,
            &[
                ("id=$(tinyrun sandbox launch)", "a persistent box"),
                ("tinyrun sandbox exec \"$id\" -- pip install --user x", "use it"),
                ("tinyrun sandbox terminate \"$id\"", "remove it and every trace of it"),
            ],
        ),
        _ => (ZERO_OR_ONE, &[]),
    };
    let files = if name.starts_with("tinyrun-sandbox") { SANDBOX_FILES } else { STATE_FILES };
    Extra { exit_status, files, examples }
}
