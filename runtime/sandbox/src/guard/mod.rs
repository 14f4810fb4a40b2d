//! The guarded runtime class: every container the runtime creates under
//! the name `tinyrun-guarded` gets a sandbox box's defenses, whatever its
//! config asks. Meant for a containerd runtime handler whose Kubernetes
//! pods run untrusted code (README: Kubernetes).
//!
//! `create` refuses what can't be made safe ([`harden::check`]: privileged,
//! the host's namespaces, host paths and capabilities outside the policy),
//! rewrites the rest ([`harden::harden`]: no_new_privs, capabilities,
//! masked paths, limits, the seccomp intersection), puts the container in
//! its pod's user namespace ([`pod`]) with its volumes usable by the pod's
//! ids ([`volumes`]), and for a pod's sandbox container
//! loads the egress guard into the pod's network namespace
//! ([`crate::net::pod`]) before the container exists. `exec` gets the same
//! process rules. Then the runtime creates the container from the
//! rewritten config like any other; the bundle's config.json is not
//! changed. Runs in the runtime process.

mod agent;
mod harden;
mod pod;
mod policy;
mod seccomp;
mod volumes;

#[cfg(test)]
pub(crate) mod tests;

use serde_json::Value;
use tinyrun::oci_spec::runtime::{Process, Spec};
use tinyrun::spec::Bundle;
use tinyrun::{CreateOptions, Runtime};

use crate::error::{Error, Result};
pub use agent::{serve as serve_agent, AgentOptions};
pub use pod::HOST_ID;
pub use policy::{Policy, POLICY_FILE};

/// The program name that selects the guarded class: a link to tinyrun by
/// this name is the handler's `BinaryName`.
pub const GUARDED_NAME: &str = "tinyrun-guarded";

/// Whether `argv0` is the guarded class's name.
pub fn selected(argv0: &str) -> bool {
    std::path::Path::new(argv0).file_name().is_some_and(|n| n == GUARDED_NAME)
}

fn encode<T: serde::Serialize>(what: &str, v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::InvalidSpec(format!("guard: encode {what}: {e}")))
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::InvalidSpec(format!("guard: the hardened {what}: {e}")))
}

/// `create`, guarded: the bundle's config checked and hardened, the
/// container in its pod's user namespace, the pod's egress guard loaded.
pub fn create(rt: &Runtime, id: &str, opts: &CreateOptions) -> Result<()> {
    let policy = Policy::load(rt.root())?;
    // Checked as written, before the runtime's own validation, so what the
    // guard refuses is refused by its name.
    let path = opts.bundle.join("config.json");
    let raw = std::fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
    harden::check(&serde_json::from_slice(&raw).unwrap_or(Value::Null), &policy)?;
    let bundle = tinyrun::spec::load(&opts.bundle)?;
    let mut spec = encode("config.json", &bundle.spec)?;
    harden::check(&spec, &policy)?;
    let pod = pod::of(&spec);
    harden::harden(&mut spec, &policy)?;
    // Held until the container exists: its state records the range.
    let _lock = pod::enter(rt, &mut spec, &pod, policy.id_range)?;
    let first = spec["annotations"][HOST_ID].as_str().and_then(|f| f.parse().ok()).unwrap_or(0);
    volumes::make_usable(&mut spec, first)?;
    open_bundle(&bundle.dir)?;
    crate::spec::reachable(&bundle.rootfs, first)?;
    // Made as the host's root, as for a box: the pod's root can't create
    // them in a root filesystem the host's root owns.
    crate::spec::mountpoints(&bundle.rootfs, spec["mounts"].as_array().map(Vec::as_slice).unwrap_or_default())?;
    if pod == pod::Pod::Own {
        if let Some(netns) = netns_path(&spec) {
            crate::net::pod::guard(std::path::Path::new(&netns), &policy.dns, &policy.allow)?;
        }
    }
    let annotations = spec["annotations"].clone();
    let spec: Spec = decode("config", spec)?;
    // Every guarded container compiles the same few profiles: keep them.
    let cache = rt.root().parent().map(|d| d.join("guard-seccomp"));
    let record_refusals = policy.refusal_agent.is_some();
    let how = tinyrun::Supervised { seccomp_cache: cache, record_refusals, ..Default::default() };
    let mut container = rt.create_bundle(id, &Bundle { spec, ..bundle }, opts, &how)?;
    if let (Some(socket), Some(listener)) = (&policy.refusal_agent, container.refusals()) {
        // Nobody else would answer its refused calls: no agent, no container.
        if let Err(e) = agent::hand_over(socket, rt, id, &annotations, listener) {
            drop(container);
            let _ = rt.delete(id, true);
            return Err(e);
        }
    }
    Ok(())
}

/// The pod's root, an unprivileged host id, must walk through the bundle
/// dir to the root filesystem: containerd makes it 0700 (its later
/// versions make it 0711 for a pod with a user namespace, as here). Others
/// get search permission only, and the config (which holds the
/// environment) is made unreadable to them first.
fn open_bundle(dir: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(dir).map_err(|e| Error::io("stat", dir, e))?;
    if meta.mode() & 0o001 != 0 || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Ok(());
    }
    let config = dir.join("config.json");
    let cmeta = std::fs::metadata(&config).map_err(|e| Error::io("stat", &config, e))?;
    let private = std::fs::Permissions::from_mode(cmeta.mode() & 0o7770);
    std::fs::set_permissions(&config, private).map_err(|e| Error::io("chmod", &config, e))?;
    let searchable = std::fs::Permissions::from_mode((meta.mode() & 0o7777) | 0o001);
    std::fs::set_permissions(dir, searchable).map_err(|e| Error::io("chmod", dir, e))
}

/// The network namespace the config joins (containerd's for the pod).
fn netns_path(spec: &Value) -> Option<String> {
    let nss = spec["linux"]["namespaces"].as_array()?;
    nss.iter().find(|n| n["type"] == "network")?["path"].as_str().map(str::to_string)
}

/// An `exec`'d process of a guarded container: no_new_privs, and only the
/// capabilities the policy allows (containerd builds it from the config as
/// it wrote it, before the guard's rewrite).
pub fn exec_process(rt: &Runtime, process: Process) -> Result<Process> {
    let policy = Policy::load(rt.root())?;
    let mut p = encode("process", &process)?;
    harden::process(&mut p, &policy);
    decode("process", p)
}
