//! `--policy FILE`: what clients may ask for. A request is checked against
//! it before any box is made, and anything looser (a loosening flag, a host
//! path, a limit above a cap, an image or network not listed) is refused
//! with 403 and the field's name. Without a file, clients get the sandbox's
//! defaults and nothing more. Runs in the server.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use tinyrun_sandbox::SandboxOptions;

use crate::error::{ApiError, ApiResult, Code};
use crate::options::{size, span, Options, Size, Span};

/// The policy file, as written: every field optional, absent meaning the
/// default's value.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    presets: Option<Vec<String>>,
    max_memory: Option<Size>,
    max_cpus: Option<f64>,
    max_pids: Option<i64>,
    max_timeout: Option<Span>,
    max_tmpfs_size: Option<Size>,
    max_lifetime: Option<Span>,
    max_copy_limit: Option<Size>,
    max_pool_size: Option<usize>,
    max_boxes: Option<usize>,
    images: Option<Vec<String>>,
    networks: Option<Vec<String>>,
    allow_hosts: Option<Vec<String>>,
    allow_no_seccomp: Option<bool>,
    allow_writable_root: Option<bool>,
    allow_host_paths: Option<bool>,
    allow_cgroup_parent: Option<bool>,
    allow_id_range: Option<bool>,
    allow_best_effort_limits: Option<bool>,
}

/// What clients may ask for.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub presets: Vec<String>,
    pub max_memory: u64,
    pub max_cpus: f64,
    pub max_pids: i64,
    pub max_timeout: Duration,
    pub max_tmpfs_size: u64,
    pub max_lifetime: Duration,
    pub max_copy_limit: u64,
    pub max_pool_size: usize,
    /// Live boxes per client.
    pub max_boxes: usize,
    /// Image paths: exact, or a prefix ending in `*`.
    pub images: Vec<String>,
    pub networks: Vec<String>,
    /// `--allow-host` values: exact, or `*.` followed by a domain.
    pub allow_hosts: Vec<String>,
    pub allow_no_seccomp: bool,
    pub allow_writable_root: bool,
    pub allow_host_paths: bool,
    pub allow_cgroup_parent: bool,
    pub allow_id_range: bool,
    /// `limits: best-effort` (rlimits only, where an ordinary user's
    /// server has no delegated cgroup).
    pub allow_best_effort_limits: bool,
}

impl Default for Policy {
    /// The sandbox's defaults and nothing looser.
    fn default() -> Policy {
        let d = SandboxOptions::default();
        Policy {
            presets: vec!["nano".into(), "micro".into()],
            max_memory: d.memory,
            max_cpus: d.cpus,
            max_pids: d.pids,
            max_timeout: d.timeout,
            max_tmpfs_size: d.tmpfs_size,
            max_lifetime: tinyrun_sandbox::DEFAULT_LIFETIME,
            max_copy_limit: tinyrun_sandbox::DEFAULT_COPY_LIMIT,
            max_pool_size: 4,
            max_boxes: 16,
            images: Vec::new(),
            networks: vec!["loopback".into(), "none".into()],
            allow_hosts: Vec::new(),
            allow_no_seccomp: false,
            allow_writable_root: false,
            allow_host_paths: false,
            allow_cgroup_parent: false,
            allow_id_range: false,
            allow_best_effort_limits: false,
        }
    }
}

fn forbid(field: &str, why: String) -> ApiError {
    ApiError::field(Code::Forbidden, field, format!("{field}: {why}, which the server's policy does not allow"))
}

impl Policy {
    /// Reads a policy file; a field it leaves out keeps the default's value.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Policy> {
        let text = std::fs::read(path).map_err(|e| anyhow::anyhow!("read policy {}: {e}", path.display()))?;
        let f: File = serde_json::from_slice(&text).map_err(|e| anyhow::anyhow!("policy {}: {e}", path.display()))?;
        let d = Policy::default();
        let or = |v: Option<Size>, field: &str, d: u64| v.map(|s| size(field, &s)).transpose().map(|v| v.unwrap_or(d));
        let or_span =
            |v: Option<Span>, field: &str, d: Duration| v.map(|s| span(field, &s)).transpose().map(|v| v.unwrap_or(d));
        let p = (|| -> ApiResult<Policy> {
            Ok(Policy {
                presets: f.presets.unwrap_or(d.presets),
                max_memory: or(f.max_memory, "max_memory", d.max_memory)?,
                max_cpus: f.max_cpus.unwrap_or(d.max_cpus),
                max_pids: f.max_pids.unwrap_or(d.max_pids),
                max_timeout: or_span(f.max_timeout, "max_timeout", d.max_timeout)?,
                max_tmpfs_size: or(f.max_tmpfs_size, "max_tmpfs_size", d.max_tmpfs_size)?,
                max_lifetime: or_span(f.max_lifetime, "max_lifetime", d.max_lifetime)?,
                max_copy_limit: or(f.max_copy_limit, "max_copy_limit", d.max_copy_limit)?,
                max_pool_size: f.max_pool_size.unwrap_or(d.max_pool_size),
                max_boxes: f.max_boxes.unwrap_or(d.max_boxes),
                images: f.images.unwrap_or(d.images),
                networks: f.networks.unwrap_or(d.networks),
                allow_hosts: f.allow_hosts.unwrap_or(d.allow_hosts),
                allow_no_seccomp: f.allow_no_seccomp.unwrap_or(false),
                allow_writable_root: f.allow_writable_root.unwrap_or(false),
                allow_host_paths: f.allow_host_paths.unwrap_or(false),
                allow_cgroup_parent: f.allow_cgroup_parent.unwrap_or(false),
                allow_id_range: f.allow_id_range.unwrap_or(false),
                allow_best_effort_limits: f.allow_best_effort_limits.unwrap_or(false),
            })
        })();
        p.map_err(|e| anyhow::anyhow!("policy {}: {e}", path.display()))
    }

    /// Refuses options looser than the policy, naming the field; returns
    /// the library's options otherwise.
    pub(crate) fn check(&self, o: &Options) -> ApiResult<SandboxOptions> {
        self.loosenings(o)?;
        if let Some(p) = &o.preset {
            if !self.presets.contains(p) {
                return Err(forbid("type", format!("the preset {p:?} is not one of {:?}", self.presets)));
            }
        }
        let s = o.to_sandbox()?;
        // A preset's sizes count as asked for: a listed preset may still
        // be above a cap the policy sets lower.
        let over =
            |field: &str, asked: String, cap: String| forbid(field, format!("{asked} is more than the cap of {cap}"));
        if s.memory > self.max_memory {
            return Err(over("memory", format!("{} MiB", s.memory >> 20), format!("{} MiB", self.max_memory >> 20)));
        }
        if s.cpus > self.max_cpus {
            return Err(over("cpus", s.cpus.to_string(), self.max_cpus.to_string()));
        }
        if s.pids > self.max_pids {
            return Err(over("pids", s.pids.to_string(), self.max_pids.to_string()));
        }
        if s.timeout > self.max_timeout {
            return Err(over("timeout", fmt(s.timeout), fmt(self.max_timeout)));
        }
        if s.tmpfs_size > self.max_tmpfs_size {
            return Err(over("tmpfs_size", s.tmpfs_size.to_string(), self.max_tmpfs_size.to_string()));
        }
        if s.copy_limit > self.max_copy_limit {
            return Err(over("copy_limit", s.copy_limit.to_string(), self.max_copy_limit.to_string()));
        }
        self.network(o)?;
        Ok(s)
    }

    /// The explicit loosenings and host paths.
    fn loosenings(&self, o: &Options) -> ApiResult<()> {
        let flags = [
            (o.no_seccomp && !self.allow_no_seccomp, "no_seccomp", "running without the seccomp allowlist"),
            (o.writable_root && !self.allow_writable_root, "writable_root", "a writable root"),
            (
                o.cgroup_parent.is_some() && !self.allow_cgroup_parent,
                "cgroup_parent",
                "a cgroup parent of the client's",
            ),
            (o.id_range.is_some() && !self.allow_id_range, "id_range", "a host id range of the client's"),
            (
                o.limits.as_deref() == Some("best-effort") && !self.allow_best_effort_limits,
                "limits",
                "limits from rlimits only (best-effort)",
            ),
            (
                o.image_cache_size.is_some() && !self.allow_host_paths,
                "image_cache_size",
                "sizing the host's image cache",
            ),
        ];
        if let Some((_, field, what)) = flags.iter().find(|(bad, _, _)| *bad) {
            return Err(forbid(field, format!("the request asks for {what}")));
        }
        let host_paths =
            [("rootfs", o.rootfs.is_some()), ("bundle", o.bundle.is_some()), ("copy_in", !o.copy_in.is_empty())];
        if let Some((field, _)) = host_paths.iter().find(|(_, set)| *set).filter(|_| !self.allow_host_paths) {
            return Err(forbid(field, "the request names a host path".into()));
        }
        if let Some(image) = &o.image {
            if !self.images.iter().any(|p| matches(p, image)) {
                return Err(forbid("image", format!("the image {image:?} is not one the policy lists")));
            }
        }
        Ok(())
    }

    fn network(&self, o: &Options) -> ApiResult<()> {
        let network = o.network.as_deref().unwrap_or("loopback");
        if !self.networks.iter().any(|n| n == network) {
            return Err(forbid("network", format!("network {network:?} is not one of {:?}", self.networks)));
        }
        if let Some(h) = o.allow_host.iter().find(|h| !self.allow_hosts.iter().any(|p| matches(p, h))) {
            return Err(forbid("allow_host", format!("the destination {h:?} is not one the policy lists")));
        }
        if network == "egress" && o.allow_host.is_empty() && !self.allow_hosts.iter().any(|p| p == "*") {
            return Err(forbid("allow_host", "egress to anywhere (no allow_host)".into()));
        }
        if o.dns.is_some() && !self.allow_hosts.iter().any(|p| p == "*") {
            return Err(forbid("dns", "a resolver of the client's choosing".into()));
        }
        Ok(())
    }

    /// A box lifetime (or a pool box's idle lifetime) within the cap.
    pub(crate) fn lifetime(&self, field: &str, d: Duration) -> ApiResult<()> {
        if d > self.max_lifetime {
            return Err(forbid(field, format!("{} is more than the cap of {}", fmt(d), fmt(self.max_lifetime))));
        }
        Ok(())
    }
}

fn fmt(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// `pattern` is the value itself, a prefix ending in `*`, or `*.DOMAIN`
/// (any name under DOMAIN, with any port).
fn matches(pattern: &str, value: &str) -> bool {
    if let Some(domain) = pattern.strip_prefix("*.") {
        let host = value.split(':').next().unwrap_or(value);
        return host.ends_with(&format!(".{domain}"));
    }
    match pattern.strip_suffix('*') {
        Some(prefix) => value.starts_with(prefix) && !value.contains(".."),
        None => pattern == value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(json: &str) -> Options {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_default_policy_allows_the_defaults_only() {
        let p = Policy::default();
        assert!(p.check(&opts("{}")).is_ok());
        assert!(p.check(&opts(r#"{"type":"nano"}"#)).is_ok());
        for (json, field) in [
            (r#"{"no_seccomp":true}"#, "no_seccomp"),
            (r#"{"writable_root":true}"#, "writable_root"),
            (r#"{"cgroup_parent":"/x"}"#, "cgroup_parent"),
            (r#"{"rootfs":"/"}"#, "rootfs"),
            (r#"{"copy_in":["/etc/shadow:/work/s"]}"#, "copy_in"),
            (r#"{"memory":"1G"}"#, "memory"),
            (r#"{"type":"large"}"#, "type"),
            (r#"{"timeout":"1h"}"#, "timeout"),
            (r#"{"image":"/srv/img"}"#, "image"),
            (r#"{"network":"egress","allow_host":["example.com"]}"#, "network"),
        ] {
            let e = p.check(&opts(json)).unwrap_err();
            assert_eq!((e.code, e.field.as_deref()), (Code::Forbidden, Some(field)), "{json}: {e}");
        }
        assert!(p.lifetime("lifetime", Duration::from_secs(3600)).is_err());
    }

    #[test]
    fn patterns_match_what_they_say() {
        assert!(matches("*.pypi.org", "files.pypi.org:443") && !matches("*.pypi.org", "pypi.org.evil.com"));
        assert!(matches("/srv/images/*", "/srv/images/py") && !matches("/srv/images/*", "/srv/images/../etc"));
        assert!(matches("1.2.3.4:443", "1.2.3.4:443") && !matches("1.2.3.4:443", "1.2.3.4:80"));
    }
}
