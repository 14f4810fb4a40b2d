//! `linux.memoryPolicy`: the NUMA memory policy of every container process
//! (set_mempolicy(2)), checked and turned into a node mask by the runtime
//! before cloning, set by the process itself before its program (init and
//! `exec` alike, as runc does), with nothing left to allocate then.

use oci_spec::runtime::{MemoryPolicyFlagType, MemoryPolicyModeType, Spec};

use crate::error::{InitError, Result, RuntimeError};

/// Nodes a mask may name: the kernel's largest MAX_NUMNODES.
const MAX_NODES: usize = 1 << 10;

// <linux/mempolicy.h>
const MPOL_DEFAULT: i32 = 0;
const MPOL_PREFERRED: i32 = 1;
const MPOL_BIND: i32 = 2;
const MPOL_INTERLEAVE: i32 = 3;
const MPOL_LOCAL: i32 = 4;
const MPOL_PREFERRED_MANY: i32 = 5;
const MPOL_WEIGHTED_INTERLEAVE: i32 = 6;
const MPOL_F_NUMA_BALANCING: i32 = 1 << 13;
const MPOL_F_RELATIVE_NODES: i32 = 1 << 14;
const MPOL_F_STATIC_NODES: i32 = 1 << 15;

/// The modes and flags `from_spec` takes, by their config.json names: the
/// `features` document lists them.
pub(crate) const MODE_NAMES: &[&str] = &[
    "MPOL_DEFAULT",
    "MPOL_BIND",
    "MPOL_INTERLEAVE",
    "MPOL_WEIGHTED_INTERLEAVE",
    "MPOL_PREFERRED",
    "MPOL_PREFERRED_MANY",
    "MPOL_LOCAL",
];
pub(crate) const FLAG_NAMES: &[&str] = &["MPOL_F_NUMA_BALANCING", "MPOL_F_RELATIVE_NODES", "MPOL_F_STATIC_NODES"];

/// A policy ready for set_mempolicy(2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemPolicy {
    /// The mode with its flags or'ed in.
    mode: i32,
    /// One bit per node, as the kernel reads it.
    mask: Vec<libc::c_ulong>,
}

fn bad(why: impl Into<String>) -> RuntimeError {
    RuntimeError::InvalidSpec(format!("linux.memoryPolicy: {}", why.into()))
}

/// The config's policy, checked as runc checks it: MPOL_DEFAULT and
/// MPOL_LOCAL take no nodes; BIND, INTERLEAVE, WEIGHTED_INTERLEAVE and
/// PREFERRED_MANY at least one; PREFERRED either.
pub(crate) fn from_spec(spec: &Spec) -> Result<Option<MemPolicy>> {
    let Some(p) = spec.linux().as_ref().and_then(|l| l.memory_policy().as_ref()) else { return Ok(None) };
    let mode = match p.mode() {
        MemoryPolicyModeType::MpolDefault => MPOL_DEFAULT,
        MemoryPolicyModeType::MpolPreferred => MPOL_PREFERRED,
        MemoryPolicyModeType::MpolBind => MPOL_BIND,
        MemoryPolicyModeType::MpolInterleave => MPOL_INTERLEAVE,
        MemoryPolicyModeType::MpolLocal => MPOL_LOCAL,
        MemoryPolicyModeType::MpolPreferredMany => MPOL_PREFERRED_MANY,
        MemoryPolicyModeType::MpolWeightedInterleave => MPOL_WEIGHTED_INTERLEAVE,
    };
    let mut flags = 0;
    for f in p.flags().as_deref().unwrap_or(&[]) {
        flags |= match f {
            MemoryPolicyFlagType::MpolFNumaBalancing => MPOL_F_NUMA_BALANCING,
            MemoryPolicyFlagType::MpolFRelativeNodes => MPOL_F_RELATIVE_NODES,
            MemoryPolicyFlagType::MpolFStaticNodes => MPOL_F_STATIC_NODES,
        };
    }
    let mask = parse_nodes(p.nodes().as_deref().unwrap_or(""))?;
    let count: u32 = mask.iter().map(|w| w.count_ones()).sum();
    match mode {
        MPOL_DEFAULT | MPOL_LOCAL if count != 0 => {
            return Err(bad(format!("mode {} takes no nodes, got {count}", p.mode())))
        }
        MPOL_BIND | MPOL_INTERLEAVE | MPOL_WEIGHTED_INTERLEAVE | MPOL_PREFERRED_MANY if count == 0 => {
            return Err(bad(format!("mode {} needs at least one node", p.mode())))
        }
        _ => {}
    }
    Ok(Some(MemPolicy { mode: mode | flags, mask }))
}

/// "0-3,7" to a node mask, as short as its highest node allows.
fn parse_nodes(s: &str) -> Result<Vec<libc::c_ulong>> {
    let word = libc::c_ulong::BITS as usize;
    let mut mask: Vec<libc::c_ulong> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let node = |n: &str| -> Result<usize> {
            let v: usize = n.trim().parse().map_err(|_| bad(format!("nodes: {part:?} is not a node or a range")))?;
            if v >= MAX_NODES {
                return Err(bad(format!("nodes: node {v} is beyond {}", MAX_NODES - 1)));
            }
            Ok(v)
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (node(a)?, node(b)?),
            None => (node(part)?, node(part)?),
        };
        if lo > hi {
            return Err(bad(format!("nodes: range {part:?} goes backwards")));
        }
        if mask.len() < hi / word + 1 {
            mask.resize(hi / word + 1, 0);
        }
        for n in lo..=hi {
            mask[n / word] |= 1 << (n % word);
        }
    }
    Ok(mask)
}

impl MemPolicy {
    /// Sets the policy on the calling process. Runs between clone and
    /// execve: a system call on data made beforehand, nothing more.
    pub(crate) fn apply(&self) -> std::result::Result<(), InitError> {
        crate::sys::set_mempolicy(self.mode, &self.mask)
            .map_err(|e| InitError::value("set_mempolicy", format_args!("mode {:#x}", self.mode), e))
            .map_err(|e| e.field("linux.memoryPolicy"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(policy: serde_json::Value) -> Spec {
        let mut s = Spec::default();
        let mut l = s.linux().clone().unwrap_or_default();
        l.set_memory_policy(Some(serde_json::from_value(policy).unwrap()));
        s.set_linux(Some(l));
        s
    }

    #[test]
    fn the_listed_names_are_the_modes_and_flags_taken() {
        let mut seen = std::collections::BTreeSet::new();
        for m in MODE_NAMES {
            let nodes = if matches!(*m, "MPOL_DEFAULT" | "MPOL_LOCAL") { "" } else { "0" };
            let p = from_spec(&spec(serde_json::json!({"mode": m, "nodes": nodes}))).unwrap().unwrap();
            assert!(seen.insert(p.mode), "{m} maps to a mode of its own");
        }
        assert_eq!(seen.len(), 7, "every mode the spec names is listed");
        for f in FLAG_NAMES {
            let p = from_spec(&spec(serde_json::json!({"mode": "MPOL_BIND", "nodes": "0", "flags": [f]})));
            assert_ne!(p.unwrap().unwrap().mode & !MPOL_BIND, 0, "{f} sets a flag");
        }
    }

    #[test]
    fn nodes_become_a_mask() {
        assert_eq!(parse_nodes("").unwrap(), Vec::<libc::c_ulong>::new());
        assert_eq!(parse_nodes("0").unwrap(), [1]);
        assert_eq!(parse_nodes("0-2,5").unwrap(), [0b100111]);
        assert_eq!(parse_nodes("64").unwrap(), [0, 1]);
        for bad in ["x", "3-1", "1024", "-1", "1-"] {
            assert!(parse_nodes(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn modes_flags_and_node_counts_are_checked_like_runc() {
        let p =
            from_spec(&spec(serde_json::json!({"mode": "MPOL_BIND", "nodes": "0", "flags": ["MPOL_F_STATIC_NODES"]})))
                .unwrap()
                .unwrap();
        assert_eq!(p, MemPolicy { mode: MPOL_BIND | MPOL_F_STATIC_NODES, mask: vec![1] });
        let p = from_spec(&spec(serde_json::json!({"mode": "MPOL_PREFERRED"}))).unwrap().unwrap();
        assert_eq!(p, MemPolicy { mode: MPOL_PREFERRED, mask: vec![] });
        assert!(from_spec(&spec(serde_json::json!({"mode": "MPOL_BIND"}))).is_err());
        assert!(from_spec(&spec(serde_json::json!({"mode": "MPOL_LOCAL", "nodes": "0"}))).is_err());
        assert!(from_spec(&Spec::default()).unwrap().is_none());
    }
}
