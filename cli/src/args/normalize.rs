//! Go `flag` package spellings, rewritten for clap.

/// Rewrites Go-style `-flag` into `--flag` for every long flag the command
/// line knows, stopping at `--` and, for commands whose trailing arguments
/// belong to the container (exec, ps), at the first positional after the
/// subcommand.
pub(crate) fn normalize(cmd: &clap::Command, argv: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut it = argv.into_iter();
    out.extend(it.next());
    let mut scope = cmd;
    let mut in_sub = false;
    let mut positionals = 0;
    let mut expect_value = false;
    for arg in it.by_ref() {
        if expect_value || arg == "--" {
            let end = arg == "--" && !expect_value;
            expect_value = false;
            out.push(arg);
            if end {
                break;
            }
            continue;
        }
        if arg.starts_with('-') && arg.len() > 1 {
            match spell_long(scope, &arg) {
                Some((long, takes_value)) => {
                    expect_value = takes_value;
                    out.push(long);
                }
                None => out.push(arg),
            }
            continue;
        }
        if !in_sub {
            if let Some(sub) = scope.find_subcommand(&arg) {
                in_sub = true;
                scope = sub;
            }
            out.push(arg);
            continue;
        }
        positionals += 1;
        out.push(arg);
        // The container's own argv follows the first positional of these.
        if matches!(scope.get_name(), "exec" | "ps" | "kill") && positionals >= 1 {
            break;
        }
    }
    out.extend(it);
    out
}

/// `arg` (`-name`, `--name`, `-n`, with or without `=value`) as the long
/// flag of `scope` it names, and whether its value is the next argument;
/// `None` if it names no flag there. Spelling every flag the long way keeps
/// `-e=X` or `-cwd` from being read as a cluster of short flags.
fn spell_long(scope: &clap::Command, arg: &str) -> Option<(String, bool)> {
    let body = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-').filter(|b| !b.is_empty()))?;
    let (name, val) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (body, None),
    };
    let mut chars = name.chars();
    let found = match (chars.next(), chars.next()) {
        (Some(c), None) => scope.get_arguments().find(|a| a.get_short() == Some(c)),
        _ => scope.get_arguments().find(|a| a.get_long() == Some(name)),
    }?;
    let takes_value = found.get_action().takes_values() && found.get_num_args().is_none_or(|n| n.min_values() > 0);
    let long = found.get_long().unwrap_or(name);
    Some(match val {
        Some(v) => (format!("--{long}={v}"), false),
        None => (format!("--{long}"), takes_value),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::CommandFactory;
    use clap::Parser;

    fn norm(v: &[&str]) -> Vec<String> {
        normalize(&Cli::command(), v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn single_dash_long_flags_become_double_dash() {
        assert_eq!(
            norm(&["tinyrun", "-root", "/r", "-log-format=json", "create", "-bundle", "/b", "x"]),
            ["tinyrun", "--root", "/r", "--log-format=json", "create", "--bundle", "/b", "x"]
        );
    }

    #[test]
    fn values_that_look_like_flags_are_left_alone() {
        assert_eq!(norm(&["tinyrun", "--root", "-weird", "state", "x"]), ["tinyrun", "--root", "-weird", "state", "x"]);
    }

    #[test]
    fn parses_go_style_forms() {
        let c = Cli::try_parse_from(norm(&[
            "tinyrun",
            "--root=/r",
            "-debug",
            "--criu",
            "criu",
            "run",
            "--detach=true",
            "--keep",
            "--keep",
            "id1",
            "-b",
            "/b",
        ]))
        .unwrap();
        assert!(c.debug);
        let Some(Command::Run(r)) = c.command else { panic!("not run") };
        assert!(r.detach && r.keep);
        assert_eq!(r.create.id, "id1");
        assert_eq!(r.create.bundle.as_deref(), Some(std::path::Path::new("/b")));
    }

    #[test]
    fn short_flags_with_separate_values_keep_the_rest_flags() {
        assert_eq!(
            norm(&["tinyrun", "exec", "-e=ONE=1", "-e", "TWO=2", "-cwd", "/tmp", "-u=1000", "id", "sh", "-c", "x"]),
            ["tinyrun", "exec", "--env=ONE=1", "--env", "TWO=2", "--cwd", "/tmp", "--user=1000", "id", "sh", "-c", "x"]
        );
    }

    #[test]
    fn kill_takes_id_then_signal() {
        let c = Cli::try_parse_from(norm(&["tinyrun", "kill", "--all", "x", "9"])).unwrap();
        let Some(Command::Kill(k)) = c.command else { panic!("not kill") };
        assert!(k.all);
        assert_eq!((k.id.as_str(), k.signal.as_str()), ("x", "9"));
    }
}
