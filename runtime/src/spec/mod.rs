//! Reading config.json and refusing, before anything is made, what tinyrun
//! can't do or what makes no sense.
//!
//! Runs in the runtime process only. After [`load`] succeeds, the rest of the
//! runtime can rely on: `process` present with non-empty args and an absolute
//! cwd, `root.path` absolute and an existing directory, every namespace type
//! at most once, user mappings present exactly when a new user namespace is
//! asked for, and no field set that tinyrun would otherwise ignore.

mod compat;
mod default;
mod validate;

use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;

use crate::error::{Result, RuntimeError};

pub(crate) use compat::{parse as parse_compat, PROCESS_FLAGS};
pub use default::default_spec;
pub(crate) use validate::validate;

/// A parsed and checked config, with the rootfs made absolute.
pub struct Bundle {
    /// Absolute bundle directory.
    pub dir: PathBuf,
    /// The parsed config.json.
    pub spec: Spec,
    /// Absolute, canonical rootfs path.
    pub rootfs: PathBuf,
}

/// serde's message, prefixed with the path of the field it is about
/// (`process.args: invalid type: ...`), as runc names the field. The
/// config is parsed a second time, tracking the path, only on this error.
fn with_field(bytes: &[u8], e: serde_json::Error) -> String {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize::<_, Spec>(&mut de) {
        Err(err) if !err.path().to_string().is_empty() && err.path().to_string() != "." => {
            format!("{}: {}", err.path(), err.inner())
        }
        _ => e.to_string(),
    }
}

/// Drops what runc accepts and ignores, warning about each, so that the
/// saved config holds only what is applied.
fn ignore_deprecated(spec: &mut Spec) {
    // A Windows field (the spec says so), which runc ignores on Linux.
    if let Some(mut p) = spec.process().clone().filter(|p| p.command_line().is_some()) {
        crate::warn::warn("process.commandLine is ignored: it is a Windows field; process.args is run");
        p.set_command_line(None);
        spec.set_process(Some(p));
    }
    let Some(mut linux) = spec.linux().clone() else { return };
    let Some(mut r) = linux.resources().clone() else { return };
    let warnings = crate::cgroups::drop_ignored(&mut r);
    if warnings.is_empty() {
        return;
    }
    warnings.iter().for_each(|w| crate::warn::warn(w));
    linux.set_resources(Some(r));
    spec.set_linux(Some(linux));
}

/// Loads `<bundle>/config.json`, resolves the rootfs and validates everything.
pub fn load(bundle: &Path) -> Result<Bundle> {
    let dir = std::fs::canonicalize(bundle).map_err(|e| RuntimeError::io("open bundle", bundle, e))?;
    let config = dir.join("config.json");
    let bytes = std::fs::read(&config).map_err(|e| RuntimeError::io("read", &config, e))?;
    let mut spec: Spec = compat::parse(&bytes, compat::CONFIG_FLAGS).map_err(|(e, parsed)| {
        let why = crate::seccomp::diagnose(&parsed).unwrap_or_else(|| with_field(&parsed, e));
        RuntimeError::InvalidSpec(format!("parse {}: {why}", config.display()))
    })?;
    let root = spec
        .root()
        .as_ref()
        .ok_or_else(|| RuntimeError::InvalidSpec(format!("{}: root.path is not set", config.display())))?;
    let rootfs = dir.join(root.path());
    let rootfs = std::fs::canonicalize(&rootfs).map_err(|e| RuntimeError::io("open rootfs", &rootfs, e))?;
    if !rootfs.is_dir() {
        return Err(RuntimeError::InvalidSpec(format!("root.path {} is not a directory", rootfs.display())));
    }
    ignore_deprecated(&mut spec);
    validate(&spec).map_err(|e| match e {
        RuntimeError::InvalidSpec(m) => RuntimeError::InvalidSpec(format!("{}: {m}", config.display())),
        other => other,
    })?;
    Ok(Bundle { dir, spec, rootfs })
}
