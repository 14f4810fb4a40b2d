//! Reading an OCI image layout directory (`oci-layout`, `index.json`,
//! `blobs/<alg>/<hex>`): the index, the manifest for this machine's
//! platform and its config, each blob checked against its descriptor's
//! size and sha256 before it is parsed. Runs in the runtime process.

use std::io::Read;
use std::path::{Path, PathBuf};

use oci_spec::image::{Descriptor, ImageConfiguration, ImageIndex, ImageManifest, MediaType};
use sha2::{Digest, Sha256};

use super::Config;

/// Most bytes of an index, manifest or config: real ones are a few KiB.
const MAX_JSON: u64 = 4 << 20;
/// Indexes nested deeper than this are refused (real ones nest once).
const MAX_DEPTH: usize = 4;

/// One layer: its blob and how to check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layer {
    /// The blob's sha256, 64 lowercase hex digits.
    pub(crate) digest: String,
    /// The blob's size in bytes.
    pub(crate) size: u64,
    /// The sha256 of the uncompressed tar (hex), from the config's
    /// `diff_ids`.
    pub(crate) diff_id: String,
}

/// What the sandbox takes from an image.
#[derive(Debug, Clone)]
pub(crate) struct Image {
    /// The manifest's digest: the image's identity.
    pub(crate) manifest: String,
    /// Bottom layer first.
    pub(crate) layers: Vec<Layer>,
    /// The config's `config` fields a box's process is made from.
    pub(crate) config: Config,
}

/// The annotation of an index entry that names it (its tag).
const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// `sha256:<64 hex>` → the hex; anything else (another algorithm, a path
/// in disguise such as `sha256:../../etc`) is refused.
pub(crate) fn sha256_hex(digest: &str) -> Result<String, String> {
    let hex = digest.strip_prefix("sha256:").ok_or_else(|| format!("digest {digest:?} is not sha256"))?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(format!("digest {digest:?} is not 64 lowercase hex digits"));
    }
    Ok(hex.to_string())
}

/// The file of blob `hex`.
pub(crate) fn blob_path(layout: &Path, hex: &str) -> PathBuf {
    layout.join("blobs").join("sha256").join(hex)
}

/// Opens a blob of the layout, refusing a symlink at its last component.
pub(crate) fn open_blob(layout: &Path, hex: &str) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let p = blob_path(layout, hex);
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&p)
        .map_err(|e| format!("open {}: {e}", p.display()))
}

/// Reads a small blob whole and checks it against its descriptor.
fn read_blob(layout: &Path, d: &Descriptor) -> Result<Vec<u8>, String> {
    let hex = sha256_hex(d.digest().as_ref())?;
    if d.size() > MAX_JSON {
        return Err(format!("blob sha256:{hex} is {} bytes, more than the {MAX_JSON} allowed", d.size()));
    }
    let mut bytes = Vec::new();
    open_blob(layout, &hex)?
        .take(MAX_JSON + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("read blob sha256:{hex}: {e}"))?;
    check(&bytes, &hex, d.size())?;
    Ok(bytes)
}

fn check(bytes: &[u8], hex: &str, size: u64) -> Result<(), String> {
    if bytes.len() as u64 != size {
        return Err(format!("blob sha256:{hex} has {} bytes, its descriptor says {size}", bytes.len()));
    }
    let got: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    if got != hex {
        return Err(format!("blob sha256:{hex} does not match its digest (its content hashes to sha256:{got})"));
    }
    Ok(())
}

/// This machine's platform in OCI's words.
fn this_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Whether an index entry is for linux on this machine's architecture (or
/// names no platform).
fn fits(d: &&Descriptor) -> bool {
    match d.platform() {
        Some(p) => p.os().to_string() == "linux" && p.architecture().to_string() == this_arch(),
        None => true,
    }
}

fn ref_name(d: &Descriptor) -> Option<&str> {
    d.annotations().as_ref()?.get(REF_NAME).map(String::as_str)
}

/// The tags of the index's entries, for messages: `a, b (and 1 untagged)`.
fn tags(manifests: &[Descriptor]) -> String {
    let mut names: Vec<&str> = manifests.iter().filter_map(ref_name).collect();
    names.sort_unstable();
    names.dedup();
    let untagged = manifests.iter().filter(|d| ref_name(d).is_none()).count();
    let mut out = if names.is_empty() { "none".to_string() } else { names.join(", ") };
    if untagged > 0 {
        out.push_str(&format!(" (and {untagged} untagged)"));
    }
    out
}

/// The top index's entry for this machine: the one tagged `tag`, or with
/// no tag the only one there is. Several that fit and no tag to choose is
/// an error listing the tags, never "the first".
fn pick_top<'a>(manifests: &'a [Descriptor], tag: Option<&str>) -> Result<&'a Descriptor, String> {
    let named: Vec<&Descriptor> = manifests.iter().filter(|d| tag.is_none_or(|t| ref_name(d) == Some(t))).collect();
    if let (Some(t), true) = (tag, named.is_empty()) {
        return Err(format!("no image is tagged {t:?} in its index.json (tags: {})", tags(manifests)));
    }
    let fit: Vec<&Descriptor> = named.into_iter().filter(fits).collect();
    match fit.as_slice() {
        [] => Err(format!("the image index has no linux/{} image", this_arch())),
        [one] => Ok(one),
        many => Err(format!(
            "its index.json lists {} images{}: pick one with --image LAYOUT:TAG (tags: {})",
            many.len(),
            tag.map(|t| format!(" tagged {t:?}")).unwrap_or_default(),
            tags(manifests)
        )),
    }
}

/// Reads the image the layout at `layout` holds, or with `tag` the one of
/// its images tagged so.
pub(crate) fn read(layout: &Path, tag: Option<&str>) -> Result<Image, String> {
    let index_path = layout.join("index.json");
    let meta = std::fs::symlink_metadata(&index_path).map_err(|e| format!("{}: {e}", index_path.display()))?;
    if !meta.is_file() || meta.len() > MAX_JSON {
        return Err(format!("{} is not a file of at most {MAX_JSON} bytes", index_path.display()));
    }
    let text = std::fs::read(&index_path).map_err(|e| format!("read {}: {e}", index_path.display()))?;
    let index = ImageIndex::from_reader(text.as_slice()).map_err(|e| format!("index.json: {e}"))?;
    let mut d = pick_top(index.manifests(), tag)?.clone();
    for _ in 0..MAX_DEPTH {
        if d.media_type() != &MediaType::ImageIndex {
            return manifest(layout, &d);
        }
        // A nested index holds one image per platform: this machine's.
        let bytes = read_blob(layout, &d)?;
        let nested = ImageIndex::from_reader(bytes.as_slice()).map_err(|e| format!("nested index: {e}"))?;
        d = nested
            .manifests()
            .iter()
            .find(fits)
            .ok_or_else(|| format!("the image index has no linux/{} image", this_arch()))?
            .clone();
    }
    Err(format!("image indexes nested more than {MAX_DEPTH} deep"))
}

fn manifest(layout: &Path, d: &Descriptor) -> Result<Image, String> {
    let bytes = read_blob(layout, d)?;
    let m = ImageManifest::from_reader(bytes.as_slice()).map_err(|e| format!("manifest: {e}"))?;
    let config_bytes = read_blob(layout, m.config())?;
    let config = ImageConfiguration::from_reader(config_bytes.as_slice()).map_err(|e| format!("image config: {e}"))?;
    let diff_ids = config.rootfs().diff_ids();
    if diff_ids.len() != m.layers().len() {
        return Err(format!(
            "the manifest lists {} layers but the config's rootfs.diff_ids {}",
            m.layers().len(),
            diff_ids.len()
        ));
    }
    let mut layers = Vec::new();
    for (l, diff) in m.layers().iter().zip(diff_ids) {
        let media = l.media_type().to_string();
        if !(media.contains("layer") || media.contains("rootfs.diff")) {
            return Err(format!("layer sha256 {} has media type {media:?}, not a layer", l.digest()));
        }
        layers.push(Layer { digest: sha256_hex(l.digest().as_ref())?, size: l.size(), diff_id: sha256_hex(diff)? });
    }
    Ok(Image { manifest: sha256_hex(d.digest().as_ref())?, layers, config: process_config(&config) })
}

/// The fields of the config's `config` the box's process is made from;
/// empty strings count as unset, as engines read them.
fn process_config(c: &ImageConfiguration) -> Config {
    let Some(c) = c.config() else { return Config::default() };
    let set = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    Config {
        env: c.env().clone().unwrap_or_default(),
        user: set(c.user()),
        working_dir: set(c.working_dir()),
        entrypoint: c.entrypoint().clone().unwrap_or_default(),
        cmd: c.cmd().clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_hex_only() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert_eq!(sha256_hex(&good).unwrap(), "a".repeat(64));
        for bad in [
            "sha512:abc".to_string(),
            format!("sha256:{}", "A".repeat(64)),
            "sha256:../../../etc/shadow".to_string(),
            format!("sha256:{}/x", "a".repeat(62)),
            "aaaa".to_string(),
        ] {
            assert!(sha256_hex(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn blobs_are_checked_against_their_descriptor() {
        let data = b"{}";
        let hex: String = Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect();
        assert!(check(data, &hex, 2).is_ok());
        assert!(check(data, &hex, 3).unwrap_err().contains("descriptor says 3"));
        assert!(check(b"{ }", &hex, 3).unwrap_err().contains("does not match"));
    }
}
