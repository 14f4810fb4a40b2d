//! One function per subcommand: build the library call, print what runc
//! prints, return the exit status.

mod create;
mod delete;
mod events;
mod exec;
mod features;
mod kill;
mod list;
mod pause;
mod ps;
mod run;
mod sandbox;
mod spec;
mod start;
mod state;
mod update;

pub(crate) use sandbox::{failure_code, print_error_result};

use std::path::{Path, PathBuf};

use tinyrun::Runtime;

use crate::args::{Cli, Command};
use crate::logging::Logger;

/// `guarded`: called as the guarded class (`tinyrun-guarded`).
pub(crate) fn dispatch(cli: &Cli, command: &Command, log: &Logger, guarded: bool) -> anyhow::Result<u8> {
    let rt = Runtime::new(state_root(cli));
    log.debug(&format!("state root {}", rt.root().display()));
    if guarded && matches!(command, Command::Run(_) | Command::Sandbox(_)) {
        anyhow::bail!("{} offers create, start and exec: not run or sandbox", tinyrun_sandbox::guard::GUARDED_NAME);
    }
    match command {
        Command::Create(a) => create::run(&rt, cli, a, log, guarded),
        Command::Start(a) => start::run(&rt, a),
        Command::State(a) => state::run(&rt, a),
        Command::Kill(a) => kill::run(&rt, a),
        Command::Delete(a) => delete::run(&rt, a),
        Command::Run(a) => run::run(&rt, cli, a, log),
        Command::List(a) => list::run(&rt, a),
        Command::Spec(a) => spec::run(a),
        Command::Exec(a) => exec::run(&rt, a, log, guarded),
        Command::Ps(a) => ps::run(&rt, a),
        Command::Events(a) => events::run(&rt, a),
        Command::Pause(a) => pause::pause(&rt, a),
        Command::Resume(a) => pause::resume(&rt, a),
        Command::Update(a) => update::run(&rt, a, log),
        Command::Features => features::run(),
        Command::Sandbox(c) => sandbox::run(&state_root(cli), c),
    }
}

/// `--root`, or runc's default: `/run/tinyrun` for real root, and
/// `$XDG_RUNTIME_DIR/tinyrun` for anyone else, including root inside a user
/// namespace unless `USER=root` (podman calls `state` without `--root`, so
/// this must come out the same every time).
pub(crate) fn state_root(cli: &Cli) -> PathBuf {
    if let Some(r) = &cli.root {
        return absolute(r);
    }
    let xdg = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty());
    match xdg {
        Some(dir) if honor_xdg() => Path::new(&dir).join("tinyrun"),
        _ => PathBuf::from("/run/tinyrun"),
    }
}

/// `--rootless`: whether the caller may lack permission for cgroups. As in
/// runc, `auto` (the default) means yes for a non-root caller and for root
/// inside a user namespace, unless the systemd driver manages the cgroups.
pub(crate) fn rootless_cgroups(cli: &Cli) -> anyhow::Result<bool> {
    match cli.rootless.as_deref().unwrap_or("auto") {
        "true" => Ok(true),
        "false" => Ok(false),
        "auto" => Ok(!cli.systemd_cgroup && (!nix::unistd::geteuid().is_root() || in_user_namespace())),
        other => anyhow::bail!("invalid --rootless value {other:?}: want true, false or auto"),
    }
}

fn honor_xdg() -> bool {
    if nix::unistd::geteuid().as_raw() != 0 {
        return true;
    }
    if !in_user_namespace() {
        return false;
    }
    std::env::var("USER").map(|u| u != "root").unwrap_or(true)
}

fn in_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"])
        .unwrap_or(false)
}

pub(crate) fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf())
    }
}

pub(crate) fn version_text() -> String {
    format!(
        "tinyrun version {}\ncommit: {}\nspec: {}\n",
        env!("CARGO_PKG_VERSION"),
        option_env!("TINYRUN_COMMIT").unwrap_or("unknown"),
        tinyrun::SPEC_VERSION
    )
}
