//! Fuzz target: the state file loader, through the public
//! `tinyrun::Runtime::load(id)` on `<root>/x/state.json`, then the read-only
//! uses of what was loaded (`status`, `state`, `list`).
//!
//! Only read-only calls: a crafted record can name any pid or cgroup path,
//! and `kill`/`delete` would act on them. Every input must load or fail
//! with a clean error; a panic is a crash.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// `$TMPDIR/tinyrun-fuzz-state-<pid>/x/`, the state directory of container `x`.
fn root() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tinyrun-fuzz-state-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("x")).expect("make fuzz state root");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let root = root();
    std::fs::write(root.join("x/state.json"), data).expect("write state.json");
    let rt = tinyrun::Runtime::new(root.clone());
    match rt.load("x") {
        Ok(c) => {
            let st = c.state();
            if st.status == tinyrun::Status::Stopped {
                assert_eq!(st.pid, 0, "a stopped container reports pid 0");
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.trim().is_empty(), "empty error message");
        }
    }
    let _ = rt.list();
});
