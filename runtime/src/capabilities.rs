//! Capability sets from `process.capabilities`, applied by init.
//!
//! Order matters and follows the kernel's rules: the bounding set is cut
//! while init still holds CAP_SETPCAP, the ids are switched with
//! PR_SET_KEEPCAPS so permitted survives a non-zero uid, then effective,
//! permitted and inheritable are set, and ambient last (an ambient cap must
//! be both permitted and inheritable).

use std::str::FromStr;

use caps::{CapSet, Capability, CapsHashSet};
use oci_spec::runtime::LinuxCapabilities;

use crate::error::{InitError, Result, RuntimeError};

/// The five sets, converted and checked before cloning.
#[derive(Debug, Default, Clone)]
pub(crate) struct Sets {
    pub bounding: CapsHashSet,
    pub effective: CapsHashSet,
    pub permitted: CapsHashSet,
    pub inheritable: CapsHashSet,
    pub ambient: CapsHashSet,
}

fn convert(field: &str, set: &Option<oci_spec::runtime::Capabilities>) -> Result<CapsHashSet> {
    let mut out = CapsHashSet::new();
    for c in set.iter().flatten() {
        let name = format!("CAP_{c}");
        let cap = Capability::from_str(&name).map_err(|_| {
            RuntimeError::unsupported(format!("process.capabilities.{field}"), format!("unknown capability {name}"))
        })?;
        out.insert(cap);
    }
    Ok(out)
}

impl Sets {
    /// Converts the config's sets; a missing block means "no capabilities".
    pub(crate) fn from_spec(c: Option<&LinuxCapabilities>) -> Result<Sets> {
        let Some(c) = c else { return Ok(Sets::default()) };
        Ok(Sets {
            bounding: convert("bounding", c.bounding())?,
            effective: convert("effective", c.effective())?,
            permitted: convert("permitted", c.permitted())?,
            inheritable: convert("inheritable", c.inheritable())?,
            ambient: convert("ambient", c.ambient())?,
        })
    }

    /// Drops every capability not in the bounding set, then reads the set
    /// back: a capability that is still there fails the container rather
    /// than staying silently. Capabilities the running kernel doesn't know
    /// are skipped, as runc does (it can't hold them either).
    pub(crate) fn apply_bounding(&self) -> Result<(), InitError> {
        let field = "process.capabilities.bounding";
        for cap in caps::all().into_iter().filter(|c| !self.bounding.contains(c)) {
            // An error means the kernel does not know the capability.
            if caps::has_cap(None, CapSet::Bounding, cap).unwrap_or(false) {
                caps::drop(None, CapSet::Bounding, cap)
                    .map_err(|e| caps_error(format!("drop {cap} from the bounding set"), e).field(field))?;
            }
        }
        let left = caps::read(None, CapSet::Bounding).map_err(|e| caps_error("read the bounding set".into(), e))?;
        let extra: Vec<String> = left.difference(&self.bounding).map(|c| c.to_string()).collect();
        if !extra.is_empty() {
            let why = format!("it still holds {}", extra.join(", "));
            return Err(InitError::other("cut the bounding set", why).field(field));
        }
        Ok(())
    }

    /// Sets effective, permitted, inheritable, then raises ambient.
    pub(crate) fn apply_rest(&self) -> Result<(), InitError> {
        let set = |which: CapSet, caps: &CapsHashSet, field: &str| {
            caps::set(None, which, caps).map_err(|e| {
                caps_error(format!("set {field} capabilities"), e).field(format!("process.capabilities.{field}"))
            })
        };
        // Permitted can only shrink, and effective must stay within it, so
        // shrink effective first.
        set(CapSet::Effective, &self.effective.intersection(&self.permitted).copied().collect(), "effective")?;
        set(CapSet::Permitted, &self.permitted, "permitted")?;
        set(CapSet::Effective, &self.effective, "effective")?;
        set(CapSet::Inheritable, &self.inheritable, "inheritable")?;
        caps::clear(None, CapSet::Ambient).map_err(|e| caps_error("clear ambient capabilities".into(), e))?;
        for cap in &self.ambient {
            // Not an error when the cap isn't both permitted and
            // inheritable: runc only warns, and configs rely on that.
            let _ = caps::raise(None, CapSet::Ambient, *cap);
        }
        Ok(())
    }
}

/// The `caps` crate's error is only a message, ending with the io error's
/// `(os error N)`: the errno is read back from it.
fn caps_error(op: String, e: caps::errors::CapsError) -> InitError {
    let text = e.to_string();
    let errno = text
        .rsplit_once("(os error ")
        .and_then(|(_, n)| n.trim_end_matches(')').parse::<i32>().ok())
        .map(nix::errno::Errno::from_raw);
    match errno {
        Some(errno) => InitError::sys(op, errno),
        None => InitError::other(op, text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a forked child (the test process keeps its capabilities): the
    /// bounding set is cut to what the config lists, and read back.
    #[test]
    #[ignore = "requires root"]
    fn bounding_set_is_cut_and_checked() {
        let mut s = Sets::default();
        s.bounding.insert(Capability::CAP_KILL);
        match crate::sys::seccomp::fork_for_test().unwrap() {
            crate::sys::Forked::Child => {
                let ok = s.apply_bounding().is_ok()
                    && caps::read(None, CapSet::Bounding)
                        .is_ok_and(|b| b.len() == 1 && b.contains(&Capability::CAP_KILL));
                crate::sys::exit_child(if ok { 0 } else { 1 })
            }
            crate::sys::Forked::Parent(child) => {
                let st = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(st, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
    }

    #[test]
    fn the_errno_of_a_caps_failure_is_kept() {
        let e = caps_error(
            "set permitted capabilities".into(),
            "capset failure: Operation not permitted (os error 1)".into(),
        );
        assert_eq!(e.errno(), Some(nix::errno::Errno::EPERM));
        assert_eq!(e.to_string(), "set permitted capabilities: EPERM: Operation not permitted");
        assert_eq!(caps_error("x".into(), "overlarge capability index 99".into()).errno(), None);
    }

    #[test]
    fn converts_names_and_missing_block_means_none() {
        let c: LinuxCapabilities = serde_json::from_value(serde_json::json!({
            "bounding": ["CAP_KILL", "CAP_NET_BIND_SERVICE"], "effective": ["CAP_KILL"]
        }))
        .unwrap();
        let s = Sets::from_spec(Some(&c)).unwrap();
        assert_eq!(s.bounding.len(), 2);
        assert!(s.effective.contains(&Capability::CAP_KILL));
        assert!(s.permitted.is_empty());
        assert!(Sets::from_spec(None).unwrap().bounding.is_empty());
    }
}
