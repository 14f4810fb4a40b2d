//! A process's environment as runc builds it (its `prepareEnv`): one entry
//! per name, the last one given winning, in the place of that last one. The
//! one rule for every process the runtime starts: a container's init
//! (`process.env`), `exec --env` (appended to the config's), and every
//! program a resident init forks (the box's environment, then the
//! caller's). Callers that take variables from users check them here too.

/// An environment entry runc would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid environment variable {entry:?}: {why}")]
pub struct InvalidEnv {
    /// The entry as given.
    pub entry: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// `base` then `over`, as one environment: see [`prepare`]. Exported as
/// `merge_env` (and the others as `prepare_env`, `check_env`).
pub fn merge(base: &[String], over: &[String]) -> Result<Vec<String>, InvalidEnv> {
    prepare(base.iter().chain(over))
}

/// One entry per name, the last winning in its own place; an entry without
/// `=`, with an empty name or with a NUL byte is refused, as runc refuses it.
pub fn prepare<'a>(env: impl IntoIterator<Item = &'a String>) -> Result<Vec<String>, InvalidEnv> {
    let all: Vec<&String> = env.into_iter().collect();
    let mut seen = std::collections::HashSet::with_capacity(all.len());
    let mut out = Vec::with_capacity(all.len());
    // Backwards, so the last entry of a name is the one kept.
    for kv in all.into_iter().rev() {
        let name = check(kv)?;
        if seen.insert(name) {
            out.push(kv.clone());
        }
    }
    out.reverse();
    Ok(out)
}

/// The name of `NAME=VALUE`, if runc would take the entry.
pub fn check(kv: &str) -> Result<&str, InvalidEnv> {
    let bad = |why| InvalidEnv { entry: kv.to_string(), why };
    match kv.split_once('=') {
        None => Err(bad("missing '='")),
        Some(("", _)) => Err(bad("name cannot be empty")),
        Some(_) if kv.contains('\0') => Err(bad("contains a NUL byte")),
        Some((name, _)) => Ok(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_last_entry_of_a_name_wins_in_its_own_place() {
        let env = v(&["PATH=/bin", "TERM=xterm", "A=1", "TERM=dumb", "A=2=3"]);
        assert_eq!(prepare(&env).unwrap(), v(&["PATH=/bin", "TERM=dumb", "A=2=3"]));
    }

    #[test]
    fn an_override_replaces_the_base_value() {
        let base = v(&["PATH=/bin", "FOO=one", "HOME=/work"]);
        assert_eq!(merge(&base, &v(&["FOO=two"])).unwrap(), v(&["PATH=/bin", "HOME=/work", "FOO=two"]));
        assert_eq!(merge(&base, &[]).unwrap(), base);
        assert_eq!(merge(&base, &v(&["EMPTY="])).unwrap().last().map(String::as_str), Some("EMPTY="));
    }

    #[test]
    fn what_runc_refuses_is_refused() {
        for (bad, why) in [("X", "missing '='"), ("=v", "name cannot be empty"), ("A=b\0c", "NUL")] {
            let e = prepare(&v(&["OK=1", bad])).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
