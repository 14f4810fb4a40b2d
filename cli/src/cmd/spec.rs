use tinyrun::spec::default_spec;

use crate::args::SpecArgs;

/// Writes a default config.json, refusing to overwrite one (as runc does).
pub(crate) fn run(a: &SpecArgs) -> anyhow::Result<u8> {
    let dir = a.bundle.clone().unwrap_or_else(|| ".".into());
    let path = dir.join("config.json");
    if path.exists() {
        anyhow::bail!("File {} exists. Remove it first", path.display());
    }
    let spec = default_spec(a.rootless);
    let text = serde_json::to_string_pretty(&spec)?;
    std::fs::write(&path, text).map_err(|e| anyhow::anyhow!("write {}: {e}", path.display()))?;
    Ok(0)
}
