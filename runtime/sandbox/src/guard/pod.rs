//! A user namespace per pod. The pod's sandbox (pause) container makes it,
//! mapped to 65536 host ids of the pod's own; every other container of the
//! pod joins it. containerd names the pod in two annotations; a container
//! without them is a pod of its own.
//!
//! Runs in the runtime process. The ranges in use are read from the state
//! root itself: each guarded container's state keeps its pod's first host
//! id as an annotation ([`HOST_ID`]), so a range is free again once the
//! last container that used it is deleted, and a crash leaves no record
//! behind. Allocation holds an `flock` on the state root directory until
//! the sandbox container exists.

use std::fs::File;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};
use serde_json::{json, Value};
use tinyrun::Runtime;

use crate::error::{Error, Result};
use crate::ids::{overlaps, subordinate_ranges, BLOCK};

/// The annotation that records a guarded container's pod's first host id.
pub const HOST_ID: &str = "org.tinyrun.guard.host-id";
const SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";
const CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";

/// Which pod a container belongs to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pod {
    /// The pod's sandbox container, or a container with no pod: makes the
    /// user namespace.
    Own,
    /// A container of the pod whose sandbox container has this id.
    Of(String),
}

pub(crate) fn of(spec: &Value) -> Pod {
    let a = &spec["annotations"];
    match (a[CONTAINER_TYPE].as_str(), a[SANDBOX_ID].as_str()) {
        (Some("container"), Some(sandbox)) => Pod::Of(sandbox.to_string()),
        _ => Pod::Own,
    }
}

/// Puts container `id`'s spec in its pod's user namespace. For a pod's
/// first container, the returned lock must be held until it is created.
pub(crate) fn enter(
    rt: &Runtime,
    spec: &mut Value,
    pod: &Pod,
    pool: crate::ids::IdRange,
) -> Result<Option<Flock<File>>> {
    let (first, lock, ns) = match pod {
        Pod::Own => {
            let lock = lock_root(rt.root())?;
            let first = allocate(rt, pool)?;
            (first, Some(lock), json!({"type": "user"}))
        }
        Pod::Of(sandbox) => {
            let (first, path) = sandbox_userns(rt, sandbox)?;
            (first, None, json!({"type": "user", "path": path}))
        }
    };
    if let Some(nss) = spec["linux"]["namespaces"].as_array_mut() {
        nss.push(ns);
    }
    if lock.is_some() {
        let map = json!([{"containerID": 0, "hostID": first, "size": BLOCK}]);
        spec["linux"]["uidMappings"] = map.clone();
        spec["linux"]["gidMappings"] = map;
    }
    if !spec["annotations"].is_object() {
        spec["annotations"] = json!({});
    }
    spec["annotations"][HOST_ID] = json!(first.to_string());
    Ok(lock)
}

fn lock_root(root: &Path) -> Result<Flock<File>> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o711).create(root).map_err(|e| Error::io("create", root, e))?;
    let dir = File::open(root).map_err(|e| Error::io("open", root, e))?;
    Flock::lock(dir, FlockArg::LockExclusive).map_err(|(_, e)| Error::io("lock", root, e.into()))
}

/// The first free block of `pool`: in use by no guarded container of this
/// root, and clear of `/etc/subuid` and `/etc/subgid`.
fn allocate(rt: &Runtime, pool: crate::ids::IdRange) -> Result<u32> {
    let mut taken: Vec<(u64, u64)> = rt
        .list()?
        .iter()
        .filter_map(|c| c.annotations.get(HOST_ID)?.parse::<u64>().ok())
        .map(|f| (f, u64::from(BLOCK)))
        .collect();
    for file in ["/etc/subuid", "/etc/subgid"] {
        taken.extend(subordinate_ranges(Path::new(file))?);
    }
    let end = u64::from(pool.first) + u64::from(pool.count);
    (u64::from(pool.first)..end)
        .step_by(BLOCK as usize)
        .find(|f| !taken.iter().any(|t| overlaps((*f, u64::from(BLOCK)), *t)))
        .and_then(|f| u32::try_from(f).ok())
        .ok_or_else(|| {
            Error::InvalidState(format!(
                "no free host id range for a guarded pod: every block of 65536 ids in {pool} is in use (raise the \
                 policy's idRange)"
            ))
        })
}

/// The pod's first host id and its user namespace, from its sandbox
/// container: which must be a guarded one of this root, alive, in a user
/// namespace that maps exactly its recorded range.
fn sandbox_userns(rt: &Runtime, sandbox: &str) -> Result<(u32, String)> {
    let not_guarded = |why: String| Error::Refused(format!("annotations[{SANDBOX_ID}]: pod sandbox {sandbox} {why}"));
    let c = rt.load(sandbox).map_err(|e| not_guarded(format!("can't be loaded: {e}")))?;
    let st = c.state();
    let first: u32 = st
        .annotations
        .get(HOST_ID)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| not_guarded("is not a guarded one".into()))?;
    if st.pid <= 0 {
        return Err(not_guarded("is not running".into()));
    }
    let map_path = format!("/proc/{}/uid_map", st.pid);
    let map = std::fs::read_to_string(&map_path).map_err(|e| Error::io("read", &map_path, e))?;
    let fields: Vec<&str> = map.split_whitespace().collect();
    if fields != ["0", &first.to_string(), &BLOCK.to_string()] {
        return Err(not_guarded(format!("is not in the user namespace of its range {first} (uid_map {map:?})")));
    }
    Ok((first, format!("/proc/{}/ns/user", st.pid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_comes_from_containerds_annotations() {
        let ann = |t: &str| json!({"annotations": {CONTAINER_TYPE: t, SANDBOX_ID: "pod1"}});
        assert_eq!(of(&ann("sandbox")), Pod::Own);
        assert_eq!(of(&ann("container")), Pod::Of("pod1".into()));
        assert_eq!(of(&json!({})), Pod::Own, "no annotations: a pod of its own");
    }

    #[test]
    fn pods_get_disjoint_ranges_from_the_state_root() {
        let t = tempfile::tempdir().unwrap();
        let rt = Runtime::new(t.path());
        let pool = crate::ids::IdRange { first: 0x6000_0000, count: 4 * BLOCK };
        let mut spec = json!({"linux": {"namespaces": []}});
        let _lock = enter(&rt, &mut spec, &Pod::Own, pool).unwrap();
        let first = spec["annotations"][HOST_ID].as_str().unwrap().parse::<u32>().unwrap();
        assert!((0x6000_0000..0x6000_0000 + 4 * BLOCK).contains(&first));
        assert_eq!(spec["linux"]["uidMappings"][0]["hostID"], json!(first));
        assert_eq!(spec["linux"]["namespaces"], json!([{"type": "user"}]));
    }
}
