//! The guarded class's policy: `guard.json` in the containerd handler's
//! `Root` (the parent of the `--root` the shim passes, which appends the
//! containerd namespace). Read by the runtime process at every `create`
//! and `exec`; a missing file is the strictest policy, never no guard.

use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::ids::IdRange;
use crate::net::Cidr;
use crate::options::{Preset, SandboxOptions};

/// The file's name, in the handler's `Root`.
pub const POLICY_FILE: &str = "guard.json";

/// What an operator may loosen, each empty by default.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Host directories a pod may bind-mount (each with everything below
    /// it): containerd's own and kubelet's pod directories, where volumes
    /// live. Nothing else of the host.
    pub host_paths: Vec<PathBuf>,
    /// Capabilities a container may hold beyond [`super::harden::BASE_CAPS`].
    pub capabilities: Vec<String>,
    /// The cluster's resolvers: port 53 on them is always allowed.
    pub dns: Vec<Ipv4Addr>,
    /// Pod and service ranges (and any other) a pod may reach, though
    /// private.
    pub allow: Vec<Cidr>,
    /// Where each pod's 65536 host ids come from.
    pub id_range: IdRange,
    /// The memory and pids limits of a pod that sets none.
    pub memory: u64,
    /// See `memory`.
    pub pids: i64,
    /// The socket of the refusal agent (`tinyrun sandbox guard-agent`):
    /// when set, each container's refused calls are handed to it to answer
    /// and report, and a container it can't be handed to is not created.
    pub refusal_agent: Option<PathBuf>,
}

/// The default pool of pods' host ids: `0x60000000` up to `0x70000000`,
/// below the sandbox's boxes' pool, above Debian's subordinate ids.
const DEFAULT_ID_RANGE: IdRange = IdRange { first: 0x6000_0000, count: 0x1000_0000 };

impl Default for Policy {
    fn default() -> Policy {
        let preset = SandboxOptions::preset(Preset::Medium);
        Policy {
            host_paths: Vec::new(),
            capabilities: Vec::new(),
            dns: Vec::new(),
            allow: Vec::new(),
            id_range: DEFAULT_ID_RANGE,
            memory: preset.memory,
            pids: preset.pids,
            refusal_agent: None,
        }
    }
}

/// The file as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    #[serde(default)]
    host_paths: Vec<PathBuf>,
    #[serde(default)]
    capabilities: Vec<String>,
    #[serde(default)]
    dns: Vec<Ipv4Addr>,
    #[serde(default)]
    allow: Vec<String>,
    id_range: Option<String>,
    /// A sandbox size (`nano` .. `large`) for the default limits.
    preset: Option<String>,
    refusal_agent: Option<PathBuf>,
}

impl Policy {
    /// The policy of the handler whose state root is `root`. The file must
    /// be a regular file of the caller's, not writable by others, as must
    /// its directory: anyone who could write it could loosen the guard.
    pub fn load(root: &Path) -> Result<Policy> {
        let dir = root.parent().unwrap_or(root);
        let path = dir.join(POLICY_FILE);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Policy::default()),
            Err(e) => return Err(Error::io("read guard policy", &path, e)),
        };
        for (p, m) in [(path.as_path(), meta.clone()), (dir, dir.metadata().map_err(|e| Error::io("stat", dir, e))?)] {
            if m.uid() != nix::unistd::geteuid().as_raw() || m.mode() & 0o022 != 0 {
                return Err(Error::InvalidState(format!(
                    "guard policy {}: {} must be the runtime user's and writable by no one else",
                    path.display(),
                    p.display()
                )));
            }
        }
        if !meta.is_file() {
            return Err(Error::InvalidState(format!("guard policy {} is not a regular file", path.display())));
        }
        let text = std::fs::read(&path).map_err(|e| Error::io("read guard policy", &path, e))?;
        let f: File = serde_json::from_slice(&text)
            .map_err(|e| Error::InvalidArgument(format!("guard policy {}: {e}", path.display())))?;
        Policy::from_file(f).map_err(|e| Error::InvalidArgument(format!("guard policy {}: {e}", path.display())))
    }

    fn from_file(f: File) -> std::result::Result<Policy, String> {
        let mut p = Policy::default();
        for h in &f.host_paths {
            if !h.is_absolute() || h.components().any(|c| c == std::path::Component::ParentDir) {
                return Err(format!("hostPaths: {} must be an absolute path without ..", h.display()));
            }
        }
        p.host_paths = f.host_paths;
        p.capabilities = f.capabilities.iter().map(|c| cap_name(c)).collect();
        p.dns = f.dns;
        p.allow = f.allow.iter().map(|a| parse_cidr(a)).collect::<std::result::Result<_, _>>()?;
        if let Some(r) = f.id_range {
            p.id_range = r.parse().map_err(|e: Error| format!("idRange: {e}"))?;
        }
        if let Some(name) = f.preset {
            let preset = SandboxOptions::preset(name.parse().map_err(|e: Error| format!("preset: {e}"))?);
            (p.memory, p.pids) = (preset.memory, preset.pids);
        }
        if let Some(a) = f.refusal_agent {
            if !a.is_absolute() {
                return Err(format!("refusalAgent: {} must be an absolute path", a.display()));
            }
            p.refusal_agent = Some(a);
        }
        Ok(p)
    }

    /// Whether `path` (canonical) is one of the host paths a pod may bind.
    pub(crate) fn host_path_allowed(&self, path: &Path) -> bool {
        self.host_paths.iter().any(|allowed| path.starts_with(allowed))
    }
}

/// `A.B.C.D/LEN`.
fn parse_cidr(s: &str) -> std::result::Result<Cidr, String> {
    let bad = || format!("allow: {s:?} is not an IPv4 range ADDR/LEN");
    let (a, l) = s.split_once('/').ok_or_else(bad)?;
    let addr: Ipv4Addr = a.parse().map_err(|_| bad())?;
    let len: u8 = l.parse().ok().filter(|l| *l <= 32).ok_or_else(bad)?;
    let c = Cidr { addr, len };
    if !c.contains(addr) || (len < 32 && u32::from(addr) & (u32::MAX >> len) != 0) {
        return Err(format!("allow: {s:?} has address bits set past its length"));
    }
    if c.contains(Ipv4Addr::new(169, 254, 169, 254)) {
        return Err(format!("allow: {s:?} holds the metadata address 169.254.169.254, which a pod never reaches"));
    }
    Ok(c)
}

/// `sys_admin` or `CAP_SYS_ADMIN` -> `CAP_SYS_ADMIN`.
fn cap_name(c: &str) -> String {
    let up = c.trim().to_ascii_uppercase();
    if up.starts_with("CAP_") {
        up
    } else {
        format!("CAP_{up}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(json: &str) -> std::result::Result<Policy, String> {
        Policy::from_file(serde_json::from_str(json).map_err(|e| e.to_string())?)
    }

    #[test]
    fn an_empty_file_is_the_default() {
        assert_eq!(from("{}").unwrap(), Policy::default());
        assert!(Policy::default().host_paths.is_empty() && Policy::default().capabilities.is_empty());
    }

    #[test]
    fn fields_parse_and_bad_ones_are_named() {
        let p = from(
            r#"{"hostPaths": ["/var/lib/kubelet/pods"], "capabilities": ["net_admin"], "dns": ["10.96.0.10"],
                "allow": ["10.244.0.0/16", "10.96.0.0/12"], "idRange": "0x50000000:0x100000", "preset": "small"}"#,
        )
        .unwrap();
        assert_eq!(p.capabilities, vec!["CAP_NET_ADMIN"]);
        assert_eq!(p.allow[1], Cidr { addr: Ipv4Addr::new(10, 96, 0, 0), len: 12 });
        assert_eq!((p.id_range.first, p.memory, p.pids), (0x5000_0000, 512 << 20, 512));
        assert!(p.host_path_allowed(Path::new("/var/lib/kubelet/pods/x/volumes")));
        assert!(!p.host_path_allowed(Path::new("/var/lib/kubelet")));
        for (bad, word) in [
            (r#"{"hostPaths": ["relative"]}"#, "hostPaths"),
            (r#"{"hostPaths": ["/a/../etc"]}"#, "hostPaths"),
            (r#"{"allow": ["10.0.0.1/8"]}"#, "allow"),
            (r#"{"allow": ["169.254.0.0/16"]}"#, "metadata"),
            (r#"{"idRange": "1:2"}"#, "idRange"),
            (r#"{"preset": "huge"}"#, "preset"),
            (r#"{"refusalAgent": "agent.sock"}"#, "refusalAgent"),
            (r#"{"unknown": 1}"#, "unknown"),
        ] {
            let e = from(bad).unwrap_err();
            assert!(e.contains(word), "{bad}: {e}");
        }
    }

    #[test]
    fn a_missing_file_is_the_strictest_policy_and_a_loose_one_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("k8s.io");
        assert_eq!(Policy::load(&root).unwrap(), Policy::default());
        let file = t.path().join(POLICY_FILE);
        std::fs::write(&file, r#"{"capabilities": ["NET_ADMIN"]}"#).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(Policy::load(&root).unwrap().capabilities, vec!["CAP_NET_ADMIN"]);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = Policy::load(&root).unwrap_err().to_string();
        assert!(e.contains("writable by no one else"), "{e}");
    }
}
