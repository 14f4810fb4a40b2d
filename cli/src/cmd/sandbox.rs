use std::io::Write;
use std::path::Path;

use tinyrun_sandbox::{
    self as sandbox, parse_duration, parse_size, CopyIn, ExecRequest, IdRange, LimitsMode, Preset, SandboxOptions,
    SandboxResult,
};

use crate::args::{ListFormat, SandboxCommand, SandboxFilesArgs, SandboxPoolCommand, SandboxRunArgs, SandboxSizeArgs};

pub(crate) fn run(root: &Path, c: &SandboxCommand) -> anyhow::Result<u8> {
    let json = match c {
        SandboxCommand::Run(a) => a.json,
        SandboxCommand::Exec(a) => a.json,
        _ => false,
    };
    // What the sandbox makes for a box's own user (its root filesystem's
    // directories, its files) must stay readable by that user: a caller's
    // narrow umask (077 in a hardened shell) would leave boxes that can't
    // start. The runtime's own records get explicit modes either way.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    // An ordinary user's sandbox runs in a user namespace of its own, as
    // its root; this process is still single-threaded here. Not the API
    // server: it is started as the user, and its workers enter the
    // namespace of the root it serves themselves (entered here, it would
    // run as root of this one, and make root's boxes).
    let entered = match c {
        SandboxCommand::Serve(_) | SandboxCommand::GuardAgent(_) => Ok(()),
        _ => sandbox::enter_unprivileged(root).map(drop).map_err(anyhow::Error::from),
    };
    match entered.and_then(|_| dispatch(root, c)) {
        Ok(code) => Ok(code),
        // The runtime asks to be run again from a sealed binary: main does
        // that, and this command's output comes from the second run.
        Err(e)
            if matches!(e.downcast_ref(), Some(sandbox::Error::Runtime(tinyrun::RuntimeError::NeedsSealedBinary))) =>
        {
            Err(tinyrun::RuntimeError::NeedsSealedBinary.into())
        }
        Err(e) => {
            // Under --json there is always exactly one object, failures
            // included; the error goes to stderr (and the log) as well.
            if json {
                print_error_result(&crate::one_line(&e));
            }
            Err(e)
        }
    }
}

/// The `--json` object of a command that could not be run: only `error`.
pub(crate) fn print_error_result(error: &str) {
    let res = SandboxResult { error: Some(error.to_string()), ..SandboxResult::default() };
    if let Ok(text) = serde_json::to_string(&res) {
        outln!("{text}");
    }
}

/// 126 or 127 for a command that could not be executed or was not found,
/// 128+N when signal N stopped us; `None` for any other failure (the
/// command's usual failure status).
pub(crate) fn failure_code(e: &anyhow::Error) -> Option<u8> {
    e.downcast_ref::<sandbox::Error>().and_then(sandbox::Error::exit_status).and_then(|s| u8::try_from(s).ok())
}

/// Prints the result under --json (tinyrun then exits 0: the object says
/// how the command ended), or returns the status a shell would report.
fn report(res: &SandboxResult, json: bool) -> anyhow::Result<u8> {
    if json {
        outln!("{}", serde_json::to_string(res)?);
        return Ok(0);
    }
    Ok(u8::try_from(res.status()).unwrap_or(255))
}

fn dispatch(root: &Path, c: &SandboxCommand) -> anyhow::Result<u8> {
    match c {
        SandboxCommand::Run(a) => run_once(root, a),
        SandboxCommand::Launch(a) => {
            let mut opts = options(&a.size)?;
            files(&mut opts, &a.files)?;
            // An explicit --timeout is the lifetime, as it always was; a
            // preset's is a run's limit, too short for a session.
            let lifetime = a.lifetime.as_deref().map(|l| ("--lifetime", l)).or(a
                .size
                .timeout
                .as_deref()
                .map(|t| ("--timeout", t)));
            opts.lifetime = lifetime.map(|(flag, l)| duration(flag, l)).transpose()?;
            opts.idle_timeout = match a.idle_timeout.as_deref() {
                Some("off") => None,
                Some(t) => Some(duration("--idle-timeout", t)?),
                None => Some(sandbox::DEFAULT_IDLE_TIMEOUT),
            };
            outln!("{}", sandbox::launch(root, &opts, "sbx")?);
            Ok(0)
        }
        SandboxCommand::Cp(a) => {
            let limit = a.copy_limit.as_deref().map(parse_size).transpose()?.unwrap_or(sandbox::DEFAULT_COPY_LIMIT);
            sandbox::cp(root, &a.src, &a.dst, &sandbox::CpOptions { limit, follow_links: a.follow_link })?;
            Ok(0)
        }
        SandboxCommand::Exec(a) => {
            let req = ExecRequest {
                env: a.env.clone(),
                timeout: a.timeout.as_deref().map(|t| duration("--timeout", t)).transpose()?,
                capture: a.json,
                report: a.json,
                output_cap: output_cap(&a.output_cap)?,
                interactive: a.interactive,
                kill_children: a.kill_children,
                report_writes: a.report_writes.clone(),
                cwd: a.cwd.clone(),
            };
            report(&sandbox::exec(root, &a.id, &a.command, &req)?, a.json)
        }
        SandboxCommand::Shell(a) => Ok(u8::try_from(sandbox::shell(root, &a.id)?).unwrap_or(255)),
        SandboxCommand::Terminate(a) => {
            // Read first: the record goes with the box.
            let refused = a.json.then(|| sandbox::refused(root, &a.id).ok().flatten());
            sandbox::terminate(root, &a.id)?;
            if let Some(refused) = refused {
                outln!("{}", serde_json::json!({"id": a.id, "refused": refused}));
            }
            Ok(0)
        }
        SandboxCommand::Extend(a) => {
            let at = sandbox::extend(root, &a.id, duration("--lifetime", &a.lifetime)?)?;
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at);
            outln!("{}", humantime::format_rfc3339_seconds(at));
            Ok(0)
        }
        SandboxCommand::List(a) => print_list(root, a.format).map(|_| 0),
        SandboxCommand::Pool(SandboxPoolCommand::Fill(a)) => {
            let mut opts = options(&a.size)?;
            opts.lifetime = a.idle_lifetime.as_deref().map(|l| duration("--idle-lifetime", l)).transpose()?;
            for id in sandbox::pool_fill(root, &opts, a.count)? {
                outln!("{id}");
            }
            Ok(0)
        }
        SandboxCommand::Pool(SandboxPoolCommand::List(a)) => {
            print_pool(&sandbox::pool_list(root)?, a.format).map(|_| 0)
        }
        SandboxCommand::Serve(a) => Err(serve(root, &a.flags)),
        SandboxCommand::GuardAgent(a) => {
            let keep = duration("--keep", &a.keep)?;
            let opts = sandbox::guard::AgentOptions { socket: a.socket.clone(), reports: a.reports.clone(), keep };
            sandbox::guard::serve_agent(&opts)?;
            Ok(0)
        }
        SandboxCommand::Pool(SandboxPoolCommand::Drain(a)) => {
            for id in sandbox::pool_drain(root, a.key.as_deref())? {
                outln!("{id}");
            }
            Ok(0)
        }
    }
}

fn run_once(root: &Path, a: &SandboxRunArgs) -> anyhow::Result<u8> {
    let mut opts = options(&a.size)?;
    files(&mut opts, &a.files)?;
    opts.report_writes = a.report_writes.clone();
    opts.output_cap = output_cap(&a.output_cap)?;
    opts.interactive = a.interactive;
    let res = if a.pool {
        sandbox::run_pooled(root, &opts, &a.command, a.json)?
    } else {
        sandbox::run(root, &opts, &a.command, a.json)?
    };
    report(&res, a.json)
}

/// `sandbox serve`: becomes the API server, the binary installed beside
/// ours (it has the async runtime tinyrun leaves out); returns only why it
/// could not.
fn serve(root: &Path, flags: &[String]) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    const SERVER: &str = "tinyrun-sandbox-api";
    let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join(SERVER)));
    let Some(exe) = beside.filter(|p| p.exists()) else {
        return anyhow::anyhow!("sandbox serve: {SERVER} is not installed beside tinyrun");
    };
    let e = std::process::Command::new(&exe).arg("--root").arg(root).args(flags).exec();
    anyhow::anyhow!("sandbox serve: exec {}: {e}", exe.display())
}

/// The JSON form has each box's `refused` record, where it has one.
fn print_list(root: &Path, format: ListFormat) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match format {
        ListFormat::Json => writeln!(out, "{}", serde_json::to_string(&sandbox::list_with_refused(root)?)?)?,
        ListFormat::Table => {
            let all = sandbox::list(root)?;
            let w = all.iter().map(|s| s.id.len()).max().unwrap_or(2).max(2);
            writeln!(out, "{:<w$}   {:<8} {:<8} CREATED", "ID", "PID", "STATUS")?;
            for s in &all {
                writeln!(out, "{:<w$}   {:<8} {:<8} {}", s.id, s.pid, s.status, s.created)?;
            }
        }
    }
    Ok(())
}

fn print_pool(all: &[sandbox::PoolBox], format: ListFormat) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match format {
        ListFormat::Json => writeln!(out, "{}", serde_json::to_string(&all)?)?,
        ListFormat::Table => {
            let w = all.iter().map(|s| s.id.len()).max().unwrap_or(2).max(2);
            writeln!(out, "{:<w$}   {:<7} {:<10} {:<30} OPTIONS", "ID", "STATE", "EXPIRES", "CREATED")?;
            for b in all {
                let left = b.expires_in_s.map_or("-".to_string(), |s| format!("{s}s"));
                let opts = b.options.as_ref().map_or("-".to_string(), sandbox::PoolOptions::summary);
                writeln!(out, "{:<w$}   {:<7} {:<10} {:<30} {opts}", b.id, b.state, left, b.created)?;
            }
        }
    }
    Ok(())
}

fn output_cap(s: &str) -> anyhow::Result<usize> {
    let n = parse_size(s).map_err(|e| anyhow::anyhow!("invalid --output-cap: {e}"))?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// A duration option, its error naming the flag.
fn duration(flag: &str, s: &str) -> anyhow::Result<std::time::Duration> {
    parse_duration(s).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

/// `--copy-in` and `--copy-limit`.
fn files(o: &mut SandboxOptions, a: &SandboxFilesArgs) -> anyhow::Result<()> {
    o.copy_in = a.copy_in.iter().map(|c| c.parse::<CopyIn>()).collect::<Result<_, _>>()?;
    for c in &mut o.copy_in {
        c.src = super::absolute(&c.src);
    }
    if let Some(l) = &a.copy_limit {
        o.copy_limit = parse_size(l)?;
    }
    Ok(())
}

/// `--network egress` and its options, which mean nothing without it.
fn egress(a: &SandboxSizeArgs) -> anyhow::Result<Option<sandbox::Egress>> {
    let e = &a.egress;
    if a.network != "egress" {
        let given = [(!e.allow_host.is_empty(), "--allow-host"), (e.dns.is_some(), "--dns")];
        if let Some((_, flag)) = given.iter().find(|(set, _)| *set) {
            anyhow::bail!("{flag} needs --network egress (the box has no route out with --network {})", a.network);
        }
        return Ok(None);
    }
    let mut eg = sandbox::Egress {
        allow: e.allow_host.iter().map(|h| h.parse::<sandbox::AllowHost>()).collect::<Result<_, _>>()?,
        dns: e.dns.as_deref().map(sandbox::parse_dns).transpose()?,
        ..Default::default()
    };
    if let Some(r) = &e.egress_range {
        eg.range = r.parse::<sandbox::Cidr>()?;
    }
    Ok(Some(eg))
}

/// A preset (default: the defaults) with any explicit size on top.
fn options(a: &SandboxSizeArgs) -> anyhow::Result<SandboxOptions> {
    let mut o = match &a.preset {
        Some(p) => SandboxOptions::preset(p.parse::<Preset>()?),
        None => SandboxOptions::default(),
    };
    // A preset on a small host: fitted, with a word. An explicit limit
    // above the host is refused when the options are validated.
    for note in o.fit_to_host() {
        tinyrun::warn(&note);
    }
    if let Some(m) = &a.memory {
        o.memory = parse_size(m).map_err(|e| anyhow::anyhow!("--memory: {e}"))?;
    }
    if let Some(c) = a.cpus {
        o.cpus = c;
    }
    if let Some(p) = a.pids {
        o.pids = p;
    }
    if let Some(t) = &a.timeout {
        o.timeout = duration("--timeout", t)?;
    }
    if let Some(t) = &a.tmpfs_size {
        o.tmpfs_size = parse_size(t).map_err(|e| anyhow::anyhow!("--tmpfs-size: {e}"))?;
    }
    o.cgroup_parent = a.cgroup_parent.clone();
    o.limits = if a.limits == "best-effort" { LimitsMode::BestEffort } else { LimitsMode::Enforced };
    o.rootfs = a.rootfs.as_deref().map(super::absolute);
    o.bundle = a.bundle.as_deref().map(super::absolute);
    o.image = a.image.as_deref().map(super::absolute);
    o.image_cache_size = a
        .image_cache_size
        .as_deref()
        .map(parse_size)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--image-cache-size: {e}"))?;
    o.user.clone_from(&a.user);
    o.env = a.env.clone();
    o.loopback = match a.network.as_str() {
        "loopback" | "egress" => true,
        "none" => false,
        n => anyhow::bail!("invalid --network {n:?}: loopback, none or egress"),
    };
    o.egress = egress(a)?;
    o.writable_root = a.writable_root;
    o.no_seccomp = a.no_seccomp;
    if let Some(r) = &a.id_range {
        o.host_ids = r.parse::<IdRange>()?;
    }
    Ok(o)
}
