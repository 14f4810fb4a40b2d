//! `process.rlimits`, applied by init with setrlimit before it drops
//! privileges (raising a hard limit needs CAP_SYS_RESOURCE).

use nix::sys::resource::{setrlimit, Resource};
use oci_spec::runtime::{PosixRlimit, PosixRlimitType};

use crate::error::{InitError, Result, RuntimeError};

/// One limit, converted before cloning.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit {
    pub resource: Resource,
    pub name: &'static str,
    pub soft: u64,
    pub hard: u64,
}

fn resource(t: PosixRlimitType) -> Option<(Resource, &'static str)> {
    use PosixRlimitType as T;
    Some(match t {
        T::RlimitCpu => (Resource::RLIMIT_CPU, "RLIMIT_CPU"),
        T::RlimitFsize => (Resource::RLIMIT_FSIZE, "RLIMIT_FSIZE"),
        T::RlimitData => (Resource::RLIMIT_DATA, "RLIMIT_DATA"),
        T::RlimitStack => (Resource::RLIMIT_STACK, "RLIMIT_STACK"),
        T::RlimitCore => (Resource::RLIMIT_CORE, "RLIMIT_CORE"),
        T::RlimitRss => (Resource::RLIMIT_RSS, "RLIMIT_RSS"),
        T::RlimitNproc => (Resource::RLIMIT_NPROC, "RLIMIT_NPROC"),
        T::RlimitNofile => (Resource::RLIMIT_NOFILE, "RLIMIT_NOFILE"),
        T::RlimitMemlock => (Resource::RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK"),
        T::RlimitAs => (Resource::RLIMIT_AS, "RLIMIT_AS"),
        T::RlimitLocks => (Resource::RLIMIT_LOCKS, "RLIMIT_LOCKS"),
        T::RlimitSigpending => (Resource::RLIMIT_SIGPENDING, "RLIMIT_SIGPENDING"),
        T::RlimitMsgqueue => (Resource::RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE"),
        T::RlimitNice => (Resource::RLIMIT_NICE, "RLIMIT_NICE"),
        T::RlimitRtprio => (Resource::RLIMIT_RTPRIO, "RLIMIT_RTPRIO"),
        T::RlimitRttime => (Resource::RLIMIT_RTTIME, "RLIMIT_RTTIME"),
        #[allow(unreachable_patterns)]
        _ => return None,
    })
}

/// Converts and checks the config's limits (duplicates, soft > hard).
pub(crate) fn from_spec(limits: Option<&Vec<PosixRlimit>>) -> Result<Vec<Limit>> {
    let mut out: Vec<Limit> = Vec::new();
    for l in limits.into_iter().flatten() {
        let (resource, name) = resource(l.typ())
            .ok_or_else(|| RuntimeError::unsupported("process.rlimits", format!("unknown limit {:?}", l.typ())))?;
        if out.iter().any(|o| o.name == name) {
            return Err(RuntimeError::InvalidSpec(format!("process.rlimits: {name} given twice")));
        }
        if l.soft() > l.hard() {
            return Err(RuntimeError::InvalidSpec(format!(
                "process.rlimits: {name} soft limit is above its hard limit"
            )));
        }
        out.push(Limit { resource, name, soft: l.soft(), hard: l.hard() });
    }
    Ok(out)
}

/// Init still needs a few fds after the limits are set (the start socket,
/// a hook's pipes): the file-descriptor soft limit is applied last, by
/// [`apply_final`], and until then kept at least this high.
const INIT_FDS: u64 = 64;

/// Applies the limits to the calling process, while it still holds the
/// privilege to raise hard limits.
pub(crate) fn apply(limits: &[Limit]) -> Result<(), InitError> {
    for l in limits {
        let soft = if l.resource == Resource::RLIMIT_NOFILE { l.soft.max(INIT_FDS.min(l.hard)) } else { l.soft };
        setrlimit(l.resource, soft, l.hard).map_err(|e| {
            let err = set_error(l, e);
            if e == nix::errno::Errno::EPERM {
                err.hint("raising a hard limit needs CAP_SYS_RESOURCE")
            } else {
                err
            }
        })?;
    }
    Ok(())
}

fn set_error(l: &Limit, e: nix::errno::Errno) -> InitError {
    InitError::value("setrlimit", format_args!("{} soft={} hard={}", l.name, l.soft, l.hard), e)
        .field("process.rlimits")
}

/// Lowers the file-descriptor soft limit to what the config asks, just
/// before execve (lowering a soft limit needs no privilege); without an
/// RLIMIT_NOFILE in the config, back to the caller's (see [`raise_nofile`]).
pub(crate) fn apply_final(limits: &[Limit]) -> Result<(), InitError> {
    let own = limits.iter().find(|l| l.resource == Resource::RLIMIT_NOFILE).copied();
    let Some(l) = own.or_else(|| CALLER_NOFILE.get().map(|&(soft, hard)| Limit { soft, hard, ..NOFILE })) else {
        return Ok(());
    };
    setrlimit(l.resource, l.soft, l.hard).map_err(|e| set_error(&l, e))
}

const NOFILE: Limit = Limit { resource: Resource::RLIMIT_NOFILE, name: "RLIMIT_NOFILE", soft: 0, hard: 0 };

/// Puts the caller's file-descriptor soft limit back, before this process
/// re-executes itself (which raises it again, remembering the caller's).
pub(crate) fn restore_caller_nofile() {
    if let Some(&(soft, hard)) = CALLER_NOFILE.get() {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, soft, hard);
    }
}

/// The caller's RLIMIT_NOFILE, when [`raise_nofile`] changed ours.
static CALLER_NOFILE: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();

/// Raises this process's file-descriptor soft limit to its hard limit, as
/// every Go program (runc among them) does at start: a caller that leaves
/// only a handful of fds would otherwise see libraries fail, or abort,
/// half-way through a create. Containers and exec'd processes get the
/// caller's soft limit back just before execve unless their config sets one,
/// so nothing they see changes. Call it once, first thing.
pub fn raise_nofile() {
    let Ok((soft, hard)) = nix::sys::resource::getrlimit(Resource::RLIMIT_NOFILE) else { return };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        let _ = CALLER_NOFILE.set((soft, hard));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_above_hard_and_duplicates_are_refused() {
        let l: Vec<PosixRlimit> = serde_json::from_value(serde_json::json!([
            {"type": "RLIMIT_NOFILE", "soft": 2048, "hard": 1024}
        ]))
        .unwrap();
        assert!(from_spec(Some(&l)).unwrap_err().to_string().contains("RLIMIT_NOFILE"));
        let l: Vec<PosixRlimit> = serde_json::from_value(serde_json::json!([
            {"type": "RLIMIT_CORE", "soft": 0, "hard": 0}, {"type": "RLIMIT_CORE", "soft": 0, "hard": 0}
        ]))
        .unwrap();
        assert!(from_spec(Some(&l)).unwrap_err().to_string().contains("twice"));
    }
}
