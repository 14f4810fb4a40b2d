//! IPv4 forwarding in the host's namespace: on only while egress boxes need
//! it, and then for their traffic only.
//!
//! A box's packets are routed, so `net.ipv4.ip_forward` must be on. When it
//! is off, tinyrun turns it on, and first installs the guard, the table
//! `ip tinyrun` (in the same nftables transaction as the box's own table):
//! its forward chain drops what neither comes from nor goes to a box's link
//! (`trb-*`), so the host routes for its boxes and for nothing else. The
//! guard is also the record that tinyrun turned forwarding on: once the last
//! box's table is gone, forwarding is turned off and the guard removed. A
//! host that forwarded already gets no guard, and its forwarding is left
//! as it is: it is a router on purpose.
//!
//! Boxes are counted by their tables (`inet tinyrun-<hash>`), which live in
//! the network namespace they are about, whatever state root made them: a
//! crashed box counts until its root's garbage collection removes its
//! table, and that removal turns forwarding off as a terminate does. One
//! host-wide lock orders these decisions between sandbox commands.

use super::*;

/// The guard's table, family `ip`: IPv6 forwarding is the host's affair
/// (tinyrun never turns it on), so the guard leaves it alone.
pub(super) const GUARD: &str = "tinyrun";

/// Taken around every change of the boxes' tables and of forwarding, by
/// every state root: `ip_forward` and the tables are the host's, not a
/// root's.
const LOCK: &str = "/run/tinyrun-egress.lock";

const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// The host-wide lock, held while it lives.
pub(super) struct Host {
    _lock: Flock<File>,
}

impl Host {
    /// Takes the lock, waiting for any holder.
    pub(super) fn lock() -> Result<Host> {
        let path = Path::new(LOCK);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        let lock =
            Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| Error::io("lock", path, e.into()))?;
        Ok(Host { _lock: lock })
    }

    /// Installs a box's table (`rules`, an nftables transaction) and makes
    /// sure its packets are forwarded: if forwarding is off, the guard goes
    /// into the same transaction and forwarding is turned on after it, so
    /// the host never forwards without the guard.
    pub(super) fn install(&self, rules: Value) -> Result<()> {
        let off = !forwarding()?;
        let mut rules = rules;
        if off {
            if let Some(cmds) = rules["nftables"].as_array_mut() {
                cmds.extend(guard());
            }
        }
        nft("install the box's egress rules", &rules)?;
        if off {
            set_forwarding(true)?;
        }
        Ok(())
    }

    /// After a box's table is removed: if tinyrun turned forwarding on (the
    /// guard is there) and no box's table is left, turns it off, then
    /// removes the guard (in that order: a crash between the two leaves a
    /// host that forwards nothing).
    pub(super) fn release_if_last(&self) -> Result<()> {
        let tables = tables()?;
        let guarded = tables.iter().any(|(family, name)| family == "ip" && name == GUARD);
        let boxes = tables.iter().any(|(family, name)| family == "inet" && is_box_table(name));
        if !guarded || boxes {
            return Ok(());
        }
        set_forwarding(false)?;
        let table = json!({"family": "ip", "name": GUARD});
        nft("remove the forward guard", &json!({"nftables": [{"delete": {"table": table}}]}))
    }
}

/// Whether `name` is a box's table: `tinyrun-` and the hash of [`names`].
fn is_box_table(name: &str) -> bool {
    name.strip_prefix("tinyrun-").is_some_and(|h| h.len() == 10 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The guard, as nftables commands that replace any leftover of it: a
/// forward chain whose policy is drop, passing what comes from or goes to
/// a box's link. What passes is still the boxes' own tables' to judge.
fn guard() -> Vec<Value> {
    let table = json!({"family": "ip", "name": GUARD});
    let chain = json!({"family": "ip", "table": GUARD, "name": "forward", "type": "filter", "hook": "forward",
        "prio": 0, "policy": "drop"});
    // nft reads a trailing `*` as "any name with this prefix".
    let link = format!("{}*", LINK_PREFIX);
    let pass = |key: &str| {
        json!({"add": {"rule": {"family": "ip", "table": GUARD, "chain": "forward",
            "expr": [rules::is(rules::meta(key), json!(link)), {"accept": null}]}}})
    };
    vec![
        json!({"add": {"table": table}}),
        json!({"delete": {"table": table}}),
        json!({"add": {"table": table}}),
        json!({"add": {"chain": chain}}),
        pass("iifname"),
        pass("oifname"),
    ]
}

/// Every nftables table in the host's namespace: (family, name).
fn tables() -> Result<Vec<(String, String)>> {
    let bin = rules::nft_bin()?;
    let out = Command::new(bin)
        .args(["-j", "list", "tables"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::io("run", bin, e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Network(format!("list nftables tables: nft failed ({}): {}", out.status, err.trim())));
    }
    let all: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::Network(format!("list nftables tables: nft's output: {e}")))?;
    let items = all["nftables"].as_array().map(Vec::as_slice).unwrap_or_default();
    Ok(items
        .iter()
        .filter_map(|i| Some((i["table"]["family"].as_str()?.to_string(), i["table"]["name"].as_str()?.to_string())))
        .collect())
}

fn forwarding() -> Result<bool> {
    let now = std::fs::read_to_string(IP_FORWARD).map_err(|e| Error::io("read", IP_FORWARD, e))?;
    Ok(now.trim() != "0")
}

fn set_forwarding(on: bool) -> Result<()> {
    std::fs::write(IP_FORWARD, if on { "1" } else { "0" }).map_err(|e| Error::io("write", IP_FORWARD, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_tables_are_told_from_the_guard_and_others() {
        assert!(is_box_table(&names("run-0123456789ab").table));
        for other in [GUARD, "tinyrun-guard", "tinyrun-0123", "filter", "tinyrun-0123456789abc"] {
            assert!(!is_box_table(other), "{other}");
        }
    }

    #[test]
    fn the_guard_passes_box_links_only_and_drops_the_rest() {
        let text = Value::Array(guard()).to_string();
        assert!(text.contains("\"policy\":\"drop\"") && text.contains("\"hook\":\"forward\""), "{text}");
        assert!(text.contains("\"trb-*\"") && text.contains("iifname") && text.contains("oifname"), "{text}");
        assert!(names("x").host.starts_with(LINK_PREFIX));
    }
}
