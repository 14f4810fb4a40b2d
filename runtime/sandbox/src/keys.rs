//! What `pool fill` asked for each key: `<root>/sandbox-pool/<key>/`, a
//! directory (0700) holding `record.json` (0600): how many idle boxes to
//! keep, how long each may wait, and the options they are made with, so
//! that anyone can make more (a run's refill, the reaper replacing expired
//! boxes) and `pool list` can show them. The options can hold secrets
//! (`--env`): only root reads the record.
//!
//! The directory's `flock` is the key's lock: whoever makes boxes for the
//! key (a fill, a refill) holds it while it counts the idle ones and makes
//! the rest, so two refills never both make the same missing box; `pool
//! drain` holds it while it removes the record and the boxes, so no refill
//! makes a box after the drain has looked. The record is replaced by
//! rename inside the directory, never the directory itself, which goes
//! only with the key's last box.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::options::SandboxOptions;

const DIR: &str = "sandbox-pool";

/// How long a pooled box waits unused before it is purged, unless `pool
/// fill --idle-lifetime` says otherwise.
pub const DEFAULT_IDLE_LIFETIME: Duration = Duration::from_secs(600);
const RECORD: &str = "record.json";

/// The options pool boxes of a key are made with, as `pool fill` was
/// given them (and `pool list` shows them, `env` by name only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolOptions {
    /// Memory limit in bytes.
    pub memory: u64,
    /// CPU limit in cores.
    pub cpus: f64,
    /// Most processes at once.
    pub pids: i64,
    /// Size of each tmpfs, in bytes.
    pub tmpfs_size: u64,
    /// `--rootfs`.
    pub rootfs: Option<PathBuf>,
    /// `--bundle`.
    pub bundle: Option<PathBuf>,
    /// `--image`.
    pub image: Option<PathBuf>,
    /// `loopback`, `none` or `egress`.
    pub network: String,
    /// With egress: `--allow-host`s, as given.
    pub allow_hosts: Vec<String>,
    /// With egress: `--dns`.
    pub dns: Option<String>,
    /// With egress: `--egress-range`.
    pub egress_range: Option<String>,
    /// `--env NAME=VALUE`s (`pool list`: the names only).
    pub env: Vec<String>,
    /// `--writable-root`.
    pub writable_root: bool,
    /// `--no-seccomp`.
    pub no_seccomp: bool,
    /// `--cgroup-parent`.
    pub cgroup_parent: String,
    /// `--id-range`, as FIRST:COUNT.
    pub id_range: String,
    /// `--idle-lifetime`, in seconds.
    pub idle_lifetime_s: f64,
    /// `--limits best-effort` (an ordinary user's boxes without a
    /// delegated cgroup); absent in records written before it.
    #[serde(default)]
    pub best_effort: bool,
}

impl PoolOptions {
    /// What makes boxes of `o` (whose lifetime is the idle lifetime).
    pub(crate) fn of(o: &SandboxOptions) -> PoolOptions {
        let egress = o.egress.as_ref();
        PoolOptions {
            memory: o.memory,
            cpus: o.cpus,
            pids: o.pids,
            tmpfs_size: o.tmpfs_size,
            rootfs: o.rootfs.clone(),
            bundle: o.bundle.clone(),
            image: o.image.clone(),
            network: match (o.loopback, egress) {
                (_, Some(_)) => "egress",
                (true, None) => "loopback",
                (false, None) => "none",
            }
            .to_string(),
            allow_hosts: egress
                .map(|e| e.allow.iter().map(|a| a.port.map_or(a.host.clone(), |p| format!("{}:{p}", a.host))).collect())
                .unwrap_or_default(),
            dns: egress.and_then(|e| e.dns).map(|d| d.to_string()),
            egress_range: egress.map(|e| e.range.to_string()),
            env: o.env.clone(),
            writable_root: o.writable_root,
            no_seccomp: o.no_seccomp,
            cgroup_parent: o.cgroup_parent.clone(),
            id_range: o.host_ids.to_string(),
            idle_lifetime_s: o.lifetime.unwrap_or(DEFAULT_IDLE_LIFETIME).as_secs_f64(),
            best_effort: o.limits == crate::options::LimitsMode::BestEffort,
        }
    }

    /// The options to make another box with.
    pub(crate) fn options(&self) -> Result<SandboxOptions> {
        let egress = match self.network.as_str() {
            "egress" => Some(crate::net::Egress {
                allow: self.allow_hosts.iter().map(|h| h.parse()).collect::<Result<_>>()?,
                dns: self.dns.as_deref().map(crate::net::parse_dns).transpose()?,
                range: match &self.egress_range {
                    Some(r) => r.parse()?,
                    None => crate::net::Egress::default().range,
                },
            }),
            _ => None,
        };
        Ok(SandboxOptions {
            memory: self.memory,
            cpus: self.cpus,
            pids: self.pids,
            tmpfs_size: self.tmpfs_size,
            rootfs: self.rootfs.clone(),
            bundle: self.bundle.clone(),
            image: self.image.clone(),
            loopback: self.network != "none",
            egress,
            env: self.env.clone(),
            writable_root: self.writable_root,
            no_seccomp: self.no_seccomp,
            cgroup_parent: self.cgroup_parent.clone(),
            host_ids: self.id_range.parse()?,
            lifetime: Some(Duration::try_from_secs_f64(self.idle_lifetime_s).unwrap_or(DEFAULT_IDLE_LIFETIME)),
            limits: if self.best_effort {
                crate::options::LimitsMode::BestEffort
            } else {
                crate::options::LimitsMode::Enforced
            },
            ..SandboxOptions::default()
        })
    }

    /// These options as `pool list` shows them: every variable's name,
    /// none of their values.
    pub(crate) fn shown(&self) -> PoolOptions {
        let env = self.env.iter().map(|e| e.split_once('=').map_or(e.as_str(), |(n, _)| n).to_string()).collect();
        PoolOptions { env, ..self.clone() }
    }

    /// One line for `pool list`'s table: the sizes, and what differs from
    /// a default box.
    pub fn summary(&self) -> String {
        let mib = |b: u64| format!("{}M", b >> 20);
        let mut s = format!(
            "memory={} cpus={} pids={} tmpfs={} network={} idle={}s",
            mib(self.memory),
            self.cpus,
            self.pids,
            mib(self.tmpfs_size),
            self.network,
            self.idle_lifetime_s
        );
        for (name, path) in [("image", &self.image), ("rootfs", &self.rootfs), ("bundle", &self.bundle)] {
            if let Some(p) = path {
                s.push_str(&format!(" {name}={}", p.display()));
            }
        }
        if !self.env.is_empty() {
            s.push_str(&format!(" env={}", self.shown().env.join(",")));
        }
        for (set, flag) in [(self.writable_root, " writable-root"), (self.no_seccomp, " no-seccomp")] {
            if set {
                s.push_str(flag);
            }
        }
        s
    }
}

/// A key's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    /// How many idle boxes to keep.
    pub count: usize,
    /// What they are made with.
    pub options: PoolOptions,
}

fn key_dir(root: &Path, key: &str) -> PathBuf {
    root.join(DIR).join(key)
}

/// The record of `key`, read without its lock (it is replaced whole).
pub(crate) fn read(root: &Path, key: &str) -> Option<Record> {
    let text = std::fs::read(key_dir(root, key).join(RECORD)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// The keys with a record (or the remains of one).
pub(crate) fn keys(root: &Path) -> Vec<String> {
    std::fs::read_dir(root.join(DIR))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| !n.starts_with('.')).collect())
        .unwrap_or_default()
}

/// A key's lock, held until dropped.
pub(crate) struct KeyLock {
    dir: PathBuf,
    _lock: Flock<File>,
}

/// How to take a key's lock.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// Make the key's directory if needed, and wait for the lock (a fill).
    Make,
    /// Only if the key has a directory; wait for the lock (a refill, a
    /// drain).
    Wait,
    /// Only if the key has a directory and nobody holds the lock (the
    /// reaper, which looks again soon).
    IfFree,
}

/// Takes `key`'s lock; `None` if the key has no directory (or, with
/// [`Take::IfFree`], someone holds it).
pub(crate) fn lock(root: &Path, key: &str, how: Take) -> Result<Option<KeyLock>> {
    tinyrun::check_id(key)?;
    let dir = key_dir(root, key);
    loop {
        if how == Take::Make {
            remove_old_layout(root, key)?;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| Error::io("create", &dir, e))?;
        }
        let f = match File::open(&dir) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && how != Take::Make => return Ok(None),
            Err(e) => return Err(Error::io("open", &dir, e)),
        };
        let arg = if how == Take::IfFree { FlockArg::LockExclusiveNonblock } else { FlockArg::LockExclusive };
        let lock = match Flock::lock(f, arg) {
            Ok(l) => l,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
            Err((_, e)) => return Err(Error::io("lock", &dir, e.into())),
        };
        // A drain removed the directory while we waited: the key we
        // locked is gone (and a fill may have made it again: look again).
        let held = lock.metadata().map_err(|e| Error::io("stat", &dir, e))?;
        match std::fs::symlink_metadata(&dir) {
            // A file of the old layout (never one a fill locks: it removes
            // those first) has no record.
            Ok(now) if (now.dev(), now.ino()) == (held.dev(), held.ino()) => {
                return Ok(now.is_dir().then_some(KeyLock { dir, _lock: lock }))
            }
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && how == Take::Make => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("stat", &dir, e)),
        }
    }
}

impl KeyLock {
    /// Replaces the key's record in one rename, so a reader sees the old
    /// one or the new one, never a partial write.
    pub(crate) fn write(&self, r: &Record) -> Result<()> {
        let text = serde_json::to_vec(r).map_err(|e| Error::InvalidSpec(format!("pool record: {e}")))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(|e| Error::io("create", &self.dir, e))?;
        tmp.write_all(&text).map_err(|e| Error::io("write", tmp.path().to_path_buf(), e))?;
        let path = self.dir.join(RECORD);
        tmp.persist(&path).map_err(|e| Error::io("rename", path, e.error))?;
        Ok(())
    }

    /// The key's record, read under its lock.
    pub(crate) fn read(&self) -> Option<Record> {
        serde_json::from_slice(&std::fs::read(self.dir.join(RECORD)).ok()?).ok()
    }

    /// Removes the key's record and directory: nothing refills it, and
    /// whoever waits for the lock finds the key gone.
    pub(crate) fn remove(self) -> Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", &self.dir, e)),
            _ => Ok(()),
        }
    }
}

/// A record of the layout before these directories (a file `<key>`
/// holding a count): it names no options to refill with. Removed.
pub(crate) fn remove_old_layout(root: &Path, key: &str) -> Result<bool> {
    let path = key_dir(root, key);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if !m.is_dir() => std::fs::remove_file(&path).map(|()| true).map_err(|e| Error::io("remove", path, e)),
        _ => Ok(false),
    }
}

/// Removes what a fill killed before it wrote its key's record left: the
/// key's directory (no box of a key is made before its record is written).
pub(crate) fn collect(root: &Path) {
    for key in keys(root) {
        if read(root, &key).is_some() {
            continue;
        }
        if let Ok(Some(lock)) = lock(root, &key, Take::IfFree) {
            if lock.read().is_none() {
                let _ = lock.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_without_a_record_is_collected() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let held = lock(root, "poolaa", Take::Make).unwrap().unwrap();
        held.write(&Record { count: 1, options: PoolOptions::of(&SandboxOptions::default()) }).unwrap();
        drop(held);
        drop(lock(root, "poolbb", Take::Make).unwrap());
        collect(root);
        assert_eq!(keys(root), ["poolaa"]);
        assert_eq!(read(root, "poolaa").map(|r| r.count), Some(1));
    }
}
