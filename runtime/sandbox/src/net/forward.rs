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

use super::nft::{self, Cmd, Expr, Family, Hook, Meta, Verdict};
use super::*;

/// The guard's table, family `ip`: IPv6 forwarding is the host's affair
/// (tinyrun never turns it on), so the guard leaves it alone.
pub(super) const GUARD: &str = "tinyrun";

/// Taken around every change of the boxes' tables and of forwarding, by
/// every state root: `ip_forward` and the tables are the host's, not a
/// root's.
const LOCK: &str = "/run/tinyrun-egress.lock";

const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// The host-wide lock, held while it lives, and a netfilter socket.
pub(super) struct Host {
    _lock: Flock<File>,
    nft: nft::Nft,
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
        let nft = nft::Nft::open().map_err(|e| Error::Network(format!("netfilter socket: {e}")))?;
        Ok(Host { _lock: lock, nft })
    }

    /// Applies one transaction; `what` names it in the error.
    pub(super) fn apply(&mut self, what: &str, cmds: &[Cmd]) -> Result<()> {
        self.nft.apply(cmds).map_err(|e| Error::Network(format!("{what}: nftables: {e}")))
    }

    fn guarded(&mut self) -> Result<(bool, bool)> {
        let tables = self.nft.tables().map_err(|e| Error::Network(format!("list nftables tables: {e}")))?;
        let guarded = tables.iter().any(|(family, name)| *family == Family::Ip as u8 && name == GUARD);
        let boxes = tables.iter().any(|(family, name)| *family == Family::Inet as u8 && is_box_table(name));
        Ok((guarded, boxes))
    }

    /// Installs a box's table (`rules`, one nftables transaction) and
    /// makes sure its packets are forwarded: if forwarding is off, the
    /// guard goes into the same transaction (replacing a leftover of it)
    /// and forwarding is turned on after it, so the host never forwards
    /// without the guard.
    pub(super) fn install(&mut self, mut rules: Vec<Cmd>) -> Result<()> {
        let off = !forwarding()?;
        if off {
            if self.guarded()?.0 {
                rules.push(Cmd::DelTable(Family::Ip, GUARD.into()));
            }
            rules.extend(guard());
        }
        self.apply("install the box's egress rules", &rules)?;
        if off {
            set_forwarding(true)?;
        }
        Ok(())
    }

    /// After a box's table is removed: if tinyrun turned forwarding on (the
    /// guard is there) and no box's table is left, turns it off, then
    /// removes the guard (in that order: a crash between the two leaves a
    /// host that forwards nothing).
    pub(super) fn release_if_last(&mut self) -> Result<()> {
        let (guarded, boxes) = self.guarded()?;
        if !guarded || boxes {
            return Ok(());
        }
        set_forwarding(false)?;
        self.apply("remove the forward guard", &[Cmd::DelTable(Family::Ip, GUARD.into())])
    }
}

/// Whether `name` is a box's table: `tinyrun-` and the hash of [`names`].
fn is_box_table(name: &str) -> bool {
    name.strip_prefix("tinyrun-").is_some_and(|h| h.len() == 10 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The guard, as nftables commands: a forward chain whose policy is drop, passing what comes from or goes to
/// a box's link. What passes is still the boxes' own tables' to judge.
fn guard() -> Vec<Cmd> {
    let (family, table) = (Family::Ip, GUARD.to_string());
    let hook = Hook { kind: "filter", hook: nft::NF_INET_FORWARD, prio: 0, policy: Verdict::Drop };
    let pass = |key| {
        let mut exprs = rules::ifname_prefix(key, LINK_PREFIX);
        exprs.push(Expr::Verdict(Verdict::Accept));
        Cmd::AddRule { family, table: table.clone(), chain: "forward", exprs }
    };
    vec![
        Cmd::NewTable(family, table.clone()),
        Cmd::AddChain { family, table: table.clone(), name: "forward", hook: Some(hook) },
        pass(Meta::IifName),
        pass(Meta::OifName),
    ]
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
        let g = guard();
        let hook = g.iter().find_map(|c| match c {
            Cmd::AddChain { hook: Some(h), .. } => Some(*h),
            _ => None,
        });
        let hook = hook.expect("a base chain");
        assert_eq!((hook.hook, hook.policy), (nft::NF_INET_FORWARD, Verdict::Drop));
        let rules: Vec<&Vec<Expr>> = g
            .iter()
            .filter_map(|c| match c {
                Cmd::AddRule { exprs, .. } => Some(exprs),
                _ => None,
            })
            .collect();
        let prefix = Expr::Eq(b"trb-".to_vec());
        for (rule, key) in rules.iter().zip([Meta::IifName, Meta::OifName]) {
            assert_eq!(**rule, vec![Expr::Meta(key), prefix.clone(), Expr::Verdict(Verdict::Accept)]);
        }
        assert_eq!(rules.len(), 2);
        assert!(names("x").host.starts_with(LINK_PREFIX));
    }
}
