use tinyrun::{load_process, ExecOptions, ProcessOverrides, Runtime};

use crate::args::ExecArgs;
use crate::logging::Logger;

/// Exit status: the program's, or 255 when exec itself fails (the caller
/// tells the two apart by that).
pub(crate) fn run(rt: &Runtime, a: &ExecArgs, log: &Logger, guarded: bool) -> anyhow::Result<u8> {
    if a.pidfd_socket.is_some() {
        anyhow::bail!("--pidfd-socket is not supported");
    }
    if a.process_label.is_some() || a.apparmor.is_some() {
        anyhow::bail!("--process-label and --apparmor are not supported on this build");
    }
    let c = rt.load(&a.id)?;
    let process = match &a.process {
        // runc ignores every other process-shaping flag when -p is given.
        Some(p) => load_process(&super::absolute(p))?,
        None => c.exec_process(&ProcessOverrides {
            args: a.command.clone(),
            env: a.env.clone(),
            cwd: a.cwd.clone(),
            user: a.user.as_deref().map(parse_user).transpose()?,
            additional_gids: a.additional_gids.clone(),
            caps: a.cap.clone(),
            no_new_privs: a.no_new_privs,
            tty: a.tty,
        })?,
    };
    let process = match guarded {
        true => tinyrun_sandbox::guard::exec_process(rt, process).map_err(anyhow::Error::from)?,
        false => process,
    };
    log.debug(&format!("exec {:?} in {}", process.args(), a.id));
    let code = c.exec(&ExecOptions {
        process,
        detach: a.detach,
        pid_file: a.pid_file.as_deref().map(super::absolute),
        console_socket: a.console_socket.as_deref().map(super::absolute),
        preserve_fds: a.preserve_fds,
        cgroups: a.cgroup.clone(),
        ignore_paused: a.ignore_paused,
        stdio: None,
    })?;
    Ok(u8::try_from(code).unwrap_or(255))
}

fn parse_user(s: &str) -> anyhow::Result<(u32, Option<u32>)> {
    let (u, g) = match s.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (s, None),
    };
    let uid = u.parse().map_err(|_| anyhow::anyhow!("invalid --user {s:?}: expected uid[:gid]"))?;
    let gid =
        g.map(|g| g.parse()).transpose().map_err(|_| anyhow::anyhow!("invalid --user {s:?}: expected uid[:gid]"))?;
    Ok((uid, gid))
}
