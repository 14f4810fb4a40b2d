use std::io::Write;
use std::path::Path;

use tinyrun_sandbox::{self as sandbox, parse_duration, parse_size, CopyIn, IdRange, Preset, SandboxOptions};

use crate::args::{ListFormat, SandboxCommand, SandboxFilesArgs, SandboxPoolCommand, SandboxSizeArgs};

pub(crate) fn run(root: &Path, c: &SandboxCommand) -> anyhow::Result<u8> {
    // The runtime's own errors go up as they are: main re-executes from a
    // sealed binary on one of them.
    dispatch(root, c).map_err(|e| match e.downcast::<sandbox::Error>() {
        Ok(sandbox::Error::Runtime(e)) => e.into(),
        Ok(e) => e.into(),
        Err(e) => e,
    })
}

fn dispatch(root: &Path, c: &SandboxCommand) -> anyhow::Result<u8> {
    match c {
        SandboxCommand::Run(a) => {
            let mut opts = options(&a.size)?;
            files(&mut opts, &a.files)?;
            opts.report_writes = a.report_writes.clone();
            opts.output_cap = usize::try_from(parse_size(&a.output_cap)?).unwrap_or(usize::MAX);
            let res = if a.pool {
                sandbox::run_pooled(root, &opts, &a.command, a.json)?
            } else {
                sandbox::run(root, &opts, &a.command, a.json)?
            };
            if a.json {
                outln!("{}", serde_json::to_string(&res)?);
                return Ok(0);
            }
            Ok(u8::try_from(res.status()).unwrap_or(255))
        }
        SandboxCommand::Launch(a) => {
            let mut opts = options(&a.size)?;
            files(&mut opts, &a.files)?;
            outln!("{}", sandbox::launch(root, &opts, "sbx")?);
            Ok(0)
        }
        SandboxCommand::Cp(a) => {
            let limit = a.copy_limit.as_deref().map(parse_size).transpose()?.unwrap_or(sandbox::DEFAULT_COPY_LIMIT);
            sandbox::cp(root, &a.src, &a.dst, limit)?;
            Ok(0)
        }
        SandboxCommand::Exec(a) => {
            Ok(u8::try_from(sandbox::exec(root, &a.id, &a.command, &a.env, false)?).unwrap_or(255))
        }
        SandboxCommand::Shell(a) => Ok(u8::try_from(sandbox::shell(root, &a.id)?).unwrap_or(255)),
        SandboxCommand::Terminate(a) => sandbox::terminate(root, &a.id).map(|_| 0).map_err(Into::into),
        SandboxCommand::List(a) => {
            let all = sandbox::list(root)?;
            let mut out = std::io::stdout().lock();
            match a.format {
                ListFormat::Json => writeln!(out, "{}", serde_json::to_string(&all)?)?,
                ListFormat::Table => {
                    let w = all.iter().map(|s| s.id.len()).max().unwrap_or(2).max(2);
                    writeln!(out, "{:<w$}   {:<8} {:<8} CREATED", "ID", "PID", "STATUS")?;
                    for s in all {
                        writeln!(out, "{:<w$}   {:<8} {:<8} {}", s.id, s.pid, s.status, s.created)?;
                    }
                }
            }
            Ok(0)
        }
        SandboxCommand::Pool(SandboxPoolCommand::Fill(a)) => {
            for id in sandbox::pool_fill(root, &options(&a.size)?, a.count)? {
                outln!("{id}");
            }
            Ok(0)
        }
    }
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
    if let Some(m) = &a.memory {
        o.memory = parse_size(m)?;
    }
    if let Some(c) = a.cpus {
        anyhow::ensure!(c > 0.0 && c.is_finite(), "invalid --cpus {c}: must be above 0");
        o.cpus = c;
    }
    if let Some(p) = a.pids {
        anyhow::ensure!(p > 0, "invalid --pids {p}: must be above 0");
        o.pids = p;
    }
    if let Some(t) = &a.timeout {
        o.timeout = parse_duration(t)?;
    }
    if let Some(t) = &a.tmpfs_size {
        o.tmpfs_size = parse_size(t)?;
    }
    o.rootfs = a.rootfs.as_deref().map(super::absolute);
    o.bundle = a.bundle.as_deref().map(super::absolute);
    o.image = a.image.as_deref().map(super::absolute);
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
