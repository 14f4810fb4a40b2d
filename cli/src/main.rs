//! tinyrun: an OCI container runtime with runc's command line.
//!
//! A thin front end: parse runc-style arguments, set up logging the way
//! containerd and podman read it, call one function of the runtime library,
//! and turn its result into an exit status.
#![forbid(unsafe_code)]

/// Writes to stdout, ignoring a closed pipe (`tinyrun state x | head`):
/// `print!` would panic on it, as Rust ignores SIGPIPE.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

/// [`out!`] with a newline.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

mod args;
mod cmd;
mod logging;
#[cfg(test)]
mod man;
#[cfg(test)]
mod man_text;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

fn main() -> ExitCode {
    tinyrun::raise_nofile();
    let raw: Vec<String> = std::env::args().collect();
    // Called by the guarded class's name: every container gets its guard.
    let guarded = raw.first().is_some_and(|a| tinyrun_sandbox::guard::selected(a));
    // Built once: making clap's command tree is a good part of our startup.
    let command = args::Cli::command();
    let argv = args::normalize(&command, raw);
    let matches = match command.try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) => return usage_error(&argv, &e),
    };
    let cli = match args::Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(1);
        }
    };
    if cli.version {
        out!("{}", cmd::version_text());
        return ExitCode::SUCCESS;
    }
    let log = match logging::Logger::new(&cli) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("level=error msg={:?}", format!("{e:#}"));
            return ExitCode::from(1);
        }
    };
    if let Ok(sink) = log.try_clone() {
        tinyrun::set_warning_sink(move |msg| sink.warn(msg));
    }
    let Some(command) = cli.command.as_ref() else {
        let _ = args::Cli::command().print_help();
        return ExitCode::from(1);
    };
    let failure_code = command.failure_code();
    let fail = |e: &anyhow::Error| match command.is_sandbox() {
        true => log.sentence("tinyrun sandbox", &one_line(e)),
        false => log.error(&one_line(e)),
    };
    match cmd::dispatch(&cli, command, &log, guarded) {
        Ok(code) => ExitCode::from(code),
        // The container could reach our binary: run again from a sealed copy.
        Err(e) if matches!(e.downcast_ref(), Some(tinyrun::RuntimeError::NeedsSealedBinary)) => {
            log.debug("re-executing from a sealed copy of the runtime binary");
            let Err(e) = tinyrun::reexec_sealed();
            fail(&e.into());
            ExitCode::from(failure_code)
        }
        Err(e) => {
            fail(&e);
            ExitCode::from(cmd::failure_code(&e).unwrap_or(failure_code))
        }
    }
}

/// clap's error for a command line that doesn't parse, with a hint where
/// it can't name the mistake, and the one JSON object a sandbox `--json`
/// caller always gets. A sandbox's usage error exits 125, as its other
/// failures do; runc's commands exit 1.
fn usage_error(argv: &[String], e: &clap::Error) -> ExitCode {
    let _ = e.print();
    if let Some(hint) = args::usage_hint(argv, e) {
        eprintln!("{hint}");
    }
    if e.use_stderr() && args::wants_json(argv) {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or("invalid arguments");
        cmd::print_error_result(first.trim_start_matches("error: "));
    }
    let failed = if args::is_sandbox(argv) { 125 } else { 1 };
    ExitCode::from(if e.use_stderr() { failed } else { 0 })
}

/// The error and its causes on one line, each cause once: the library's
/// messages already quote their source, which `{:#}` would repeat.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
