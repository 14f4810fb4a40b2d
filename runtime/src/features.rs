//! The `features` document (runtime-spec `features.md`, `features-linux.md`):
//! what this build of tinyrun recognises and implements.
//!
//! Runs in the runtime process (`tinyrun features`). Every list comes from
//! the code that uses it, not from a copy: mount options are the ones
//! `rootfs::options::parse_options` takes as flags, flags and archs are
//! checked against the linked libseccomp and the kernel (as runc does for
//! `supportedFlags`), and fields tinyrun refuses are reported as not
//! supported. Per the spec, `apparmor`, `selinux` and `cgroup` describe the
//! runtime, not the host.

use std::collections::BTreeMap;

use serde::Serialize;

/// The document, in the field order runc prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Features {
    /// Oldest config.json version accepted.
    pub oci_version_min: String,
    /// Newest config.json version accepted.
    pub oci_version_max: String,
    /// Hook names run.
    pub hooks: Vec<String>,
    /// Mount options recognised as flags (anything else is passed to the
    /// file system as data).
    pub mount_options: Vec<String>,
    /// Linux specifics.
    pub linux: Linux,
    /// Build details.
    pub annotations: BTreeMap<String, String>,
    /// Annotations that change how a container is set up.
    pub potentially_unsafe_config_annotations: Vec<String>,
}

/// `linux` in the features document.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Linux {
    pub namespaces: Vec<String>,
    pub capabilities: Vec<String>,
    pub cgroup: Cgroup,
    pub seccomp: Seccomp,
    pub apparmor: Enabled,
    pub selinux: Enabled,
    pub intel_rdt: Enabled,
    pub mount_extensions: MountExtensions,
    pub net_devices: Enabled,
    pub memory_policy: MemoryPolicy,
}

/// `memoryPolicy`: the `linux.memoryPolicy` modes and flags applied.
#[derive(Debug, Serialize)]
pub struct MemoryPolicy {
    pub modes: Vec<String>,
    pub flags: Vec<String>,
}

/// Which cgroup drivers the runtime implements.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cgroup {
    pub v1: bool,
    pub v2: bool,
    pub systemd: bool,
    pub systemd_user: bool,
    pub rdma: bool,
}

/// The seccomp implementation.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Seccomp {
    pub enabled: bool,
    pub actions: Vec<String>,
    pub operators: Vec<String>,
    pub archs: Vec<String>,
    pub known_flags: Vec<String>,
    pub supported_flags: Vec<String>,
}

/// `{"enabled": bool}`.
#[derive(Debug, Serialize)]
pub struct Enabled {
    pub enabled: bool,
}

/// `mountExtensions`.
#[derive(Debug, Serialize)]
pub struct MountExtensions {
    pub idmap: Enabled,
}

/// runc's `KnownMountOptions` plus `idmap`/`ridmap`: the candidates; only
/// those tinyrun takes as flags are reported.
const MOUNT_OPTION_CANDIDATES: &[&str] = &[
    "async",
    "atime",
    "bind",
    "defaults",
    "dev",
    "diratime",
    "dirsync",
    "exec",
    "idmap",
    "iversion",
    "lazytime",
    "loud",
    "mand",
    "noatime",
    "nodev",
    "nodiratime",
    "noexec",
    "noiversion",
    "nolazytime",
    "nomand",
    "norelatime",
    "nostrictatime",
    "nosuid",
    "nosymfollow",
    "private",
    "ratime",
    "rbind",
    "rdev",
    "rdiratime",
    "relatime",
    "remount",
    "rexec",
    "ridmap",
    "rnoatime",
    "rnodev",
    "rnodiratime",
    "rnoexec",
    "rnorelatime",
    "rnostrictatime",
    "rnosuid",
    "rnosymfollow",
    "ro",
    "rprivate",
    "rrelatime",
    "rro",
    "rrw",
    "rshared",
    "rslave",
    "rstrictatime",
    "rsuid",
    "rsymfollow",
    "runbindable",
    "rw",
    "shared",
    "silent",
    "slave",
    "strictatime",
    "suid",
    "symfollow",
    "sync",
    "tmpcopyup",
    "unbindable",
];

const HOOKS: &[&str] = &["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"];

const NAMESPACES: &[&str] = &["cgroup", "ipc", "mount", "network", "pid", "time", "user", "uts"];

/// What tinyrun implements. Seccomp flags and architectures are probed
/// against the kernel and libseccomp in use; everything else is fixed at
/// build time.
pub fn features() -> Features {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut annotations = BTreeMap::new();
    if let Some(v) = crate::seccomp::libseccomp_version() {
        annotations.insert("io.github.seccomp.libseccomp.version".to_string(), v);
    }
    annotations.insert("org.opencontainers.tinyrun.version".to_string(), env!("CARGO_PKG_VERSION").to_string());
    Features {
        oci_version_min: "1.0.0".into(),
        oci_version_max: crate::SPEC_VERSION.into(),
        hooks: strings(HOOKS),
        mount_options: mount_options(),
        linux: Linux {
            namespaces: strings(NAMESPACES),
            capabilities: capabilities(),
            // The systemd driver (v2 hosts; a rootless caller's own
            // user manager too); rdma is refused by `cgroups::check`.
            cgroup: Cgroup { v1: true, v2: true, systemd: true, systemd_user: true, rdma: false },
            seccomp: Seccomp {
                enabled: true,
                actions: strings(crate::seccomp::ACTIONS),
                operators: strings(crate::seccomp::OPERATORS),
                archs: strings(&crate::seccomp::archs()),
                known_flags: strings(crate::seccomp::KNOWN_FLAGS),
                supported_flags: strings(&crate::seccomp::supported_flags()),
            },
            apparmor: Enabled { enabled: true },
            // Process labels are written, but mount labels are not
            // implemented: not full SELinux support.
            selinux: Enabled { enabled: false },
            intel_rdt: Enabled { enabled: false },
            // `idmap`/`ridmap` and mounts[].uidMappings (rootfs::sources);
            // whether a file system takes them is the kernel's answer.
            mount_extensions: MountExtensions { idmap: Enabled { enabled: true } },
            net_devices: Enabled { enabled: false },
            memory_policy: MemoryPolicy {
                modes: strings(crate::mempolicy::MODE_NAMES),
                flags: strings(crate::mempolicy::FLAG_NAMES),
            },
        },
        annotations,
        // No annotation changes how tinyrun sets a container up.
        potentially_unsafe_config_annotations: Vec::new(),
    }
}

impl Features {
    /// Pretty JSON with a 4-space indent and a final newline, as runc prints it.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        // Plain data with string keys: serialising it can't fail.
        let _ = self.serialize(&mut ser);
        out.push(b'\n');
        String::from_utf8(out).unwrap_or_default()
    }
}

fn mount_options() -> Vec<String> {
    MOUNT_OPTION_CANDIDATES
        .iter()
        .filter(|o| crate::rootfs::options::parse_options(&[o.to_string()]).data.is_empty())
        .map(|o| o.to_string())
        .collect()
}

fn capabilities() -> Vec<String> {
    let mut caps: Vec<caps::Capability> = caps::all().into_iter().collect();
    caps.sort_by_key(|c| c.index());
    caps.iter().map(|c| c.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_is_truthful_about_what_is_refused() {
        let f = features();
        assert_eq!(f.oci_version_min, "1.0.0");
        assert!(f.mount_options.contains(&"rbind".to_string()) && f.mount_options.contains(&"rslave".to_string()));
        // containerd's CRI turns on recursive read-only mounts only if "rro" is listed.
        assert!(f.mount_options.contains(&"rro".to_string()) && f.mount_options.contains(&"rnosymfollow".to_string()));
        // Data options and unimplemented flags are not claimed.
        assert!(f.mount_options.contains(&"idmap".to_string()) && f.mount_options.contains(&"ridmap".to_string()));
        for o in ["nosymfollow", "tmpcopyup", "idmap"] {
            let claimed = f.mount_options.iter().any(|m| m == o);
            let taken = crate::rootfs::options::parse_options(&[o.to_string()]).data.is_empty();
            assert_eq!(claimed, taken, "{o}");
        }
        assert!(f.linux.capabilities.contains(&"CAP_SYS_ADMIN".to_string()));
        assert!(f.linux.capabilities.iter().all(|c| c.starts_with("CAP_")));
        assert_eq!(f.linux.namespaces.len(), 8);
        assert!(f.linux.seccomp.actions.contains(&"SCMP_ACT_NOTIFY".to_string()));
        assert!(f.annotations.contains_key("io.github.seccomp.libseccomp.version"));
    }

    #[test]
    fn json_has_runc_field_names() {
        let v = serde_json::to_value(features()).unwrap();
        for k in ["ociVersionMin", "ociVersionMax", "hooks", "mountOptions", "linux", "annotations"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert!(v["linux"]["seccomp"]["knownFlags"].is_array());
        assert_eq!(v["linux"]["mountExtensions"]["idmap"]["enabled"], true);
        assert_eq!(
            (v["linux"]["cgroup"]["systemd"].as_bool(), v["linux"]["cgroup"]["systemdUser"].as_bool()),
            (Some(true), Some(true))
        );
        let text = features().to_json();
        assert!(text.starts_with("{\n    \"ociVersionMin\": \"1.0.0\",\n") && text.ends_with("}\n"), "{text}");
    }
}
