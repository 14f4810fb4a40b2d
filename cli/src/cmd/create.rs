use tinyrun::{CreateOptions, Runtime};

use crate::args::{Cli, CreateArgs};
use crate::logging::Logger;

pub(crate) fn run(rt: &Runtime, cli: &Cli, a: &CreateArgs, log: &Logger, guarded: bool) -> anyhow::Result<u8> {
    let opts = options(cli, a, true, log)?;
    match guarded {
        // The runtime's own errors as they are: main looks for one of them.
        true => tinyrun_sandbox::guard::create(rt, &a.id, &opts).map_err(|e| match e {
            tinyrun_sandbox::Error::Runtime(r) => anyhow::Error::from(r),
            e => e.into(),
        })?,
        false => drop(rt.create(&a.id, &opts)?),
    }
    Ok(0)
}

/// The create options runc derives from its flags and environment.
pub(crate) fn options(cli: &Cli, a: &CreateArgs, detach: bool, log: &Logger) -> anyhow::Result<CreateOptions> {
    if a.pidfd_socket.is_some() {
        anyhow::bail!("--pidfd-socket is not supported");
    }
    let bundle = super::absolute(a.bundle.as_deref().unwrap_or(std::path::Path::new(".")));
    Ok(CreateOptions {
        bundle,
        pid_file: a.pid_file.as_deref().map(super::absolute),
        console_socket: a.console_socket.as_deref().map(super::absolute),
        no_pivot: a.no_pivot,
        no_new_keyring: a.no_new_keyring,
        preserve_fds: a.preserve_fds,
        listen_fds: listen_fds(log),
        systemd_cgroup: cli.systemd_cgroup,
        rootless_cgroups: super::rootless_cgroups(cli)?,
        detach,
    })
}

/// systemd socket activation: fds 3.. are ours to pass on when LISTEN_PID
/// names this process.
fn listen_fds(log: &Logger) -> u32 {
    let pid_ok = std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let n = std::env::var("LISTEN_FDS").ok().and_then(|n| n.parse::<u32>().ok()).unwrap_or(0);
    if pid_ok && n > 0 {
        log.debug(&format!("passing {n} LISTEN_FDS"));
        n
    } else {
        0
    }
}
