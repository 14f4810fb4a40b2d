//! Fuzz target: config.json parsing and validation, through the public
//! `tinyrun::spec::load(bundle_dir)` (what `create` and `run` call first).
//!
//! Each input is written as `<bundle>/config.json` next to an empty `rootfs/`
//! directory, so a config whose `root.path` is "rootfs" gets past the rootfs
//! check and into validation. Every input must give `Ok` or a clean `Err`
//! with a non-empty, one-line message; a panic is a crash.
//!
//! Cost of going through the file system (there is no public
//! parse-from-bytes entry): one write and two canonicalize calls per input,
//! about 20-40 us, a few times the parse itself.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// `$TMPDIR/tinyrun-fuzz-config-<pid>/` with `rootfs/` in it. libFuzzer exits
/// without running destructors, so the `conformance/fuzz` script points
/// TMPDIR at a directory it removes afterwards.
fn bundle() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tinyrun-fuzz-config-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("rootfs")).expect("make fuzz bundle");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = bundle();
    std::fs::write(dir.join("config.json"), data).expect("write config.json");
    if let Err(e) = tinyrun::spec::load(dir) {
        let msg = e.to_string();
        assert!(!msg.trim().is_empty(), "empty error message");
        assert!(!msg.contains('\n'), "multi-line error message: {msg:?}");
    }
});
