//! Who made each box: `<root>/sandbox-api/owners/<id>` holds the client's
//! identity (`uid:N` from SO_PEERCRED on the socket, `token:HASH` on TCP).
//! A client sees and touches only the boxes recorded as its own; uid 0 on
//! the socket sees every box of the root. The record is written by the
//! worker that made the box, before the box is answered, so a server
//! killed at any point leaves either a box with its owner or a box without
//! one, which the next server terminates. Runs in the server and the worker.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::Digest;

/// A client, as the server tells them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Client {
    /// On the unix socket: the peer's uid.
    Uid(u32),
    /// On TCP: the bearer token's hash (the token itself is never stored).
    Token(String),
}

impl Client {
    pub(crate) fn token(token: &str) -> Client {
        let hash = sha2::Sha256::digest(token.as_bytes());
        Client::Token(hash.iter().take(8).map(|b| format!("{b:02x}")).collect())
    }

    pub(crate) fn is_root(&self) -> bool {
        *self == Client::Uid(0)
    }

    pub(crate) fn name(&self) -> String {
        match self {
            Client::Uid(u) => format!("uid:{u}"),
            Client::Token(h) => format!("token:{h}"),
        }
    }
}

/// The server's own directory under the root.
pub(crate) fn dir(root: &Path) -> PathBuf {
    root.join("sandbox-api")
}

fn owners(root: &Path) -> PathBuf {
    dir(root).join("owners")
}

/// The private directories the server keeps under the root (mode 0700).
pub(crate) fn make_dirs(root: &Path) -> std::io::Result<()> {
    for d in [dir(root), owners(root), dir(root).join("tmp")] {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&d)?;
    }
    Ok(())
}

/// Records `client` as the owner of box `id` (tmp + rename, so a record
/// is never seen half written).
pub(crate) fn record(root: &Path, id: &str, client: &str) -> std::io::Result<()> {
    let path = owners(root).join(id);
    let tmp = owners(root).join(format!(".{id}.tmp"));
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(client.as_bytes())?;
    std::fs::rename(&tmp, path)
}

/// The owner recorded for box `id`.
pub(crate) fn owner(root: &Path, id: &str) -> Option<String> {
    if tinyrun::check_id(id).is_err() {
        return None;
    }
    std::fs::read_to_string(owners(root).join(id)).ok()
}

/// Forgets box `id`'s owner: from then on no client but root sees it.
pub(crate) fn forget(root: &Path, id: &str) {
    if tinyrun::check_id(id).is_ok() {
        let _ = std::fs::remove_file(owners(root).join(id));
    }
}

/// Every box with an owner record.
pub(crate) fn all(root: &Path) -> Vec<(String, String)> {
    let Ok(rd) = std::fs::read_dir(owners(root)) else { return Vec::new() };
    rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .filter_map(|id| owner(root, &id).map(|o| (id, o)))
        .collect()
}

/// Whether `client` may see and touch box `id`.
pub(crate) fn may(root: &Path, client: &Client, id: &str) -> bool {
    client.is_root() || owner(root, id).is_some_and(|o| o == client.name())
}

/// Boxes being made, per client: counted with the recorded ones, so that
/// two creates at once can't both pass a client's limit (the record is
/// written only once its box runs). Server side.
#[derive(Default)]
pub(crate) struct Pending(Arc<Mutex<HashMap<String, usize>>>);

/// One box being made for a client; released when dropped.
pub(crate) struct Reserved {
    pending: Arc<Mutex<HashMap<String, usize>>>,
    client: String,
}

impl Pending {
    fn map(m: &Mutex<HashMap<String, usize>>) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // Counts left by a panic are still counts.
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reserves a box for `client` if its recorded and pending boxes are
    /// fewer than `max`; otherwise `Err` with how many it has.
    pub(crate) fn reserve(&self, root: &Path, client: &str, max: usize) -> Result<Reserved, usize> {
        let mut pending = Self::map(&self.0);
        let made = all(root).iter().filter(|(_, o)| o == client).count();
        let mine = made + pending.get(client).copied().unwrap_or(0);
        if mine >= max {
            return Err(mine);
        }
        *pending.entry(client.to_string()).or_insert(0) += 1;
        Ok(Reserved { pending: self.0.clone(), client: client.to_string() })
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        let mut pending = Pending::map(&self.pending);
        if let Some(n) = pending.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                pending.remove(&self.client);
            }
        }
    }
}

/// Whether `given` is the secret `known`, compared in constant time (a
/// token's bytes do not leak through how long a refusal takes).
pub(crate) fn same_secret(known: &str, given: &str) -> bool {
    known.len() == given.len() && known.bytes().zip(given.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_sees_only_its_own() {
        let t = tempfile::tempdir().unwrap();
        make_dirs(t.path()).unwrap();
        record(t.path(), "api-1", "uid:1000").unwrap();
        assert!(may(t.path(), &Client::Uid(1000), "api-1"));
        assert!(!may(t.path(), &Client::Uid(1001), "api-1"));
        assert!(!may(t.path(), &Client::token("x"), "api-1"));
        assert!(may(t.path(), &Client::Uid(0), "api-1"));
        assert!(!may(t.path(), &Client::Uid(1000), "../owners/api-1"));
        forget(t.path(), "api-1");
        assert!(!may(t.path(), &Client::Uid(1000), "api-1") && all(t.path()).is_empty());
    }

    #[test]
    fn reservations_count_until_released() {
        let t = tempfile::tempdir().unwrap();
        make_dirs(t.path()).unwrap();
        record(t.path(), "api-1", "uid:1000").unwrap();
        let p = Pending::default();
        let second = p.reserve(t.path(), "uid:1000", 3).unwrap();
        let third = p.reserve(t.path(), "uid:1000", 3).unwrap();
        assert_eq!(p.reserve(t.path(), "uid:1000", 3).err(), Some(3));
        let other = p.reserve(t.path(), "uid:1001", 1);
        assert!(other.is_ok(), "another client's reservations are its own");
        drop(third);
        let again = p.reserve(t.path(), "uid:1000", 3);
        assert!(again.is_ok(), "a released reservation frees its place");
        drop((second, again, other));
        assert!(p.0.lock().unwrap().is_empty());
    }
}
