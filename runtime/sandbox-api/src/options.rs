//! A request's box options, as JSON: the flags of `tinyrun sandbox
//! run/launch/pool fill` with `-` written `_`, read into the library's
//! [`SandboxOptions`] the way the command line reads them. Runs in the
//! server (to check them against the policy) and in the worker (to use
//! them): the same text gives the same options in both.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tinyrun_sandbox::{
    self as sandbox, parse_duration, parse_size, CopyIn, Egress, IdRange, LimitsMode, Preset, SandboxOptions,
};

use crate::error::{ApiError, ApiResult};

/// A size: bytes, or text as on the command line ("256M").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Size {
    Bytes(u64),
    Text(String),
}

/// A duration: seconds, or text as on the command line ("10s").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Span {
    Secs(f64),
    Text(String),
}

pub(crate) fn size(field: &str, s: &Size) -> ApiResult<u64> {
    match s {
        Size::Bytes(0) => {
            Err(ApiError::field(crate::error::Code::BadRequest, field, format!("{field}: must be above 0")))
        }
        Size::Bytes(n) => Ok(*n),
        Size::Text(t) => parse_size(t).map_err(|e| bad_field(field, &e)),
    }
}

pub(crate) fn span(field: &str, s: &Span) -> ApiResult<Duration> {
    match s {
        Span::Secs(n) if n.is_finite() && *n > 0.0 && *n < 1e10 => Ok(Duration::from_secs_f64(*n)),
        Span::Secs(n) => Err(bad_field(field, &format!("{n} seconds is not a duration"))),
        Span::Text(t) => parse_duration(t).map_err(|e| bad_field(field, &e)),
    }
}

fn bad_field(field: &str, e: &dyn std::fmt::Display) -> ApiError {
    ApiError::field(crate::error::Code::BadRequest, field, format!("invalid {field}: {e}"))
}

/// The options a box is made with.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Options {
    #[serde(rename = "type")]
    pub preset: Option<String>,
    pub memory: Option<Size>,
    pub cpus: Option<f64>,
    pub pids: Option<i64>,
    pub timeout: Option<Span>,
    pub tmpfs_size: Option<Size>,
    pub image: Option<String>,
    pub rootfs: Option<String>,
    pub bundle: Option<String>,
    pub image_cache_size: Option<Size>,
    pub user: Option<String>,
    #[serde(default)]
    pub env: Vec<String>,
    pub network: Option<String>,
    #[serde(default)]
    pub allow_host: Vec<String>,
    pub dns: Option<String>,
    pub egress_range: Option<String>,
    #[serde(default)]
    pub writable_root: bool,
    #[serde(default)]
    pub no_seccomp: bool,
    pub cgroup_parent: Option<String>,
    pub id_range: Option<String>,
    #[serde(default)]
    pub copy_in: Vec<String>,
    pub copy_limit: Option<Size>,
    /// `enforced` (the default) or `best-effort`: as `--limits`, for an
    /// ordinary user's server on a host that delegates it no cgroup.
    pub limits: Option<String>,
}

impl Options {
    /// The library's options, as the command line would make them from
    /// the same flags (a preset fitted to the host).
    pub(crate) fn to_sandbox(&self) -> ApiResult<SandboxOptions> {
        let lib = |field: &'static str| move |e: sandbox::Error| bad_field(field, &e);
        let mut o = match &self.preset {
            Some(p) => SandboxOptions::preset(p.parse::<Preset>().map_err(lib("type"))?),
            None => SandboxOptions::default(),
        };
        o.fit_to_host();
        if let Some(m) = &self.memory {
            o.memory = size("memory", m)?;
        }
        if let Some(c) = self.cpus {
            o.cpus = c;
        }
        if let Some(p) = self.pids {
            o.pids = p;
        }
        if let Some(t) = &self.timeout {
            o.timeout = span("timeout", t)?;
        }
        if let Some(t) = &self.tmpfs_size {
            o.tmpfs_size = size("tmpfs_size", t)?;
        }
        o.image = self.image.as_deref().map(PathBuf::from);
        o.rootfs = self.rootfs.as_deref().map(PathBuf::from);
        o.bundle = self.bundle.as_deref().map(PathBuf::from);
        o.image_cache_size = self.image_cache_size.as_ref().map(|s| size("image_cache_size", s)).transpose()?;
        o.user.clone_from(&self.user);
        o.env.clone_from(&self.env);
        let network = self.network.as_deref().unwrap_or("loopback");
        o.loopback = match network {
            "loopback" | "egress" => true,
            "none" => false,
            n => return Err(bad_field("network", &format!("{n:?}: loopback, none or egress"))),
        };
        o.egress = self.egress(network)?;
        o.writable_root = self.writable_root;
        o.no_seccomp = self.no_seccomp;
        o.limits = match self.limits.as_deref() {
            None | Some("enforced") => LimitsMode::Enforced,
            Some("best-effort") => LimitsMode::BestEffort,
            Some(l) => return Err(bad_field("limits", &format!("{l:?}: enforced or best-effort"))),
        };
        if let Some(p) = &self.cgroup_parent {
            o.cgroup_parent.clone_from(p);
        }
        if let Some(r) = &self.id_range {
            o.host_ids = r.parse::<IdRange>().map_err(lib("id_range"))?;
        }
        o.copy_in =
            self.copy_in.iter().map(|c| c.parse::<CopyIn>()).collect::<Result<_, _>>().map_err(lib("copy_in"))?;
        if let Some(l) = &self.copy_limit {
            o.copy_limit = size("copy_limit", l)?;
        }
        o.validate().map_err(lib("options"))?;
        Ok(o)
    }

    fn egress(&self, network: &str) -> ApiResult<Option<Egress>> {
        if network != "egress" {
            if !self.allow_host.is_empty() || self.dns.is_some() {
                return Err(bad_field("network", &"allow_host and dns need network egress"));
            }
            return Ok(None);
        }
        let lib = |field: &'static str| move |e: sandbox::Error| bad_field(field, &e);
        let mut eg = Egress {
            allow: self.allow_host.iter().map(|h| h.parse()).collect::<Result<_, _>>().map_err(lib("allow_host"))?,
            dns: self.dns.as_deref().map(sandbox::parse_dns).transpose().map_err(lib("dns"))?,
            ..Default::default()
        };
        if let Some(r) = &self.egress_range {
            eg.range = r.parse().map_err(lib("egress_range"))?;
        }
        Ok(Some(eg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_reads_as_the_flags_do() {
        let o: Options = serde_json::from_str(r#"{"type":"nano","memory":"64M","timeout":2.5,"env":["A=1"]}"#).unwrap();
        let s = o.to_sandbox().unwrap();
        assert_eq!((s.memory, s.timeout, s.env.clone()), (64 << 20, Duration::from_millis(2500), vec!["A=1".into()]));
        assert_eq!(s.pids, SandboxOptions::preset(Preset::Nano).pids);
        let e = serde_json::from_str::<Options>(r#"{"memroy":"1G"}"#).unwrap_err();
        assert!(e.to_string().contains("memroy"), "{e}");
        let bad: Options = serde_json::from_str(r#"{"network":"wifi"}"#).unwrap();
        assert_eq!(bad.to_sandbox().unwrap_err().field.as_deref(), Some("network"));
    }
}
