//! [`Bundle`]: an OCI bundle written by `bundles/mkbundle` on the shared rootfs, and the
//! config-mutation helpers tests use to shape it.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use crate::{target_dir, workspace_root};

/// A bundle directory (`config.json`), made by `bundles/mkbundle`. Its root is the shared,
/// read-only rootfs unless [`Bundle::writable_rootfs`] is called.
pub struct Bundle {
    pub dir: PathBuf,
    pub id: String,
}

impl Bundle {
    /// The bundle directory as a `&str` for argv.
    pub fn path(&self) -> &str {
        self.dir.to_str().expect("utf-8 bundle path")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.json")
    }

    pub fn config(&self) -> Value {
        let text = fs::read_to_string(self.config_path()).expect("read config.json");
        serde_json::from_str(&text).expect("config.json is JSON")
    }

    /// Read-modify-write config.json (like runc's `update_config` with jq).
    pub fn config_mut(&self, f: impl FnOnce(&mut Value)) -> &Self {
        let mut c = self.config();
        f(&mut c);
        fs::write(self.config_path(), serde_json::to_string_pretty(&c).expect("serialize")).expect("write config");
        self
    }

    /// Set `process.args`.
    pub fn args(&self, args: &[&str]) -> &Self {
        self.config_mut(|c| c["process"]["args"] = args.iter().map(|a| Value::from(*a)).collect())
    }

    /// The rootfs directory on the host (root.path resolved against the bundle).
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join(self.config()["root"]["path"].as_str().expect("root.path"))
    }

    /// Give the bundle its own writable copy of the rootfs at `<bundle>/rootfs` (root.path
    /// becomes the relative "rootfs", readonly false). Returns its host path.
    pub fn writable_rootfs(&self) -> PathBuf {
        let dst = self.dir.join("rootfs");
        let st = Command::new("cp").arg("-a").arg(shared_rootfs()).arg(&dst).status().expect("cp");
        assert!(st.success(), "cp -a rootfs failed");
        self.config_mut(|c| c["root"] = serde_json::json!({"path": "rootfs", "readonly": false}));
        dst
    }

    /// Remove namespace `kind` from linux.namespaces.
    pub fn without_ns(&self, kind: &str) -> &Self {
        self.config_mut(|c| c["linux"]["namespaces"].as_array_mut().expect("namespaces").retain(|n| n["type"] != kind))
    }

    /// Append a mount to `mounts`.
    pub fn add_mount(&self, mount: Value) -> &Self {
        self.config_mut(|c| c["mounts"].as_array_mut().expect("mounts").push(mount))
    }
}

/// The shared rootfs, built once by `bundles/mkrootfs` under an exclusive file lock (several test
/// binaries may start at once; mkrootfs itself reuses an up-to-date directory).
pub fn shared_rootfs() -> &'static Path {
    static ROOTFS: OnceLock<PathBuf> = OnceLock::new();
    ROOTFS.get_or_init(|| {
        let target = target_dir();
        fs::create_dir_all(&target).expect("mkdir target");
        let dir = target.join("conformance-rootfs");
        let lock = File::create(target.join("conformance-rootfs.lock")).expect("lock file");
        let _locked =
            nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e).expect("flock");
        let st = Command::new(workspace_root().join("bundles/mkrootfs")).arg(&dir).status().expect("run mkrootfs");
        assert!(st.success(), "mkrootfs {} failed", dir.display());
        dir // the lock is released when `_locked` is dropped
    })
}
