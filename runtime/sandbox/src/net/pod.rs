//! The guarded class's egress guard: one nftables table in a pod's network
//! namespace ([`super::rules::pod_ruleset`]), loaded by the runtime before
//! the pod's sandbox container exists, so before any of the pod's
//! processes runs. The namespace is containerd's, owned by the host's user
//! namespace, where the pod's processes hold no capability.

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;

use nix::sched::{setns, CloneFlags};

use super::link::Route;
use super::nft::Nft;
use super::rules::pod_ruleset;
use super::Cidr;
use crate::error::{Error, Result};

/// The table's name in every pod's namespace.
const TABLE: &str = "tinyrun-guard";

/// Loads the pod's table into the network namespace at `netns`. `dns` and
/// `allow` come from the policy; the node's addresses are read now from the
/// caller's (the host's) namespace.
pub(crate) fn guard(netns: &Path, dns: &[Ipv4Addr], allow: &[Cidr]) -> Result<()> {
    let node: Vec<Ipv4Addr> = Route::open()?.addrs()?.into_iter().map(|(a, _)| a).collect();
    let cmds = pod_ruleset(TABLE, dns, &node, allow);
    let target = File::open(netns).map_err(|e| Error::io("open the pod's network namespace", netns, e))?;
    let own = File::open("/proc/self/ns/net").map_err(|e| Error::io("open", "/proc/self/ns/net", e))?;
    // A socket stays in the namespace it was made in. The process is
    // single-threaded here (it clones the container next): switch, make
    // the socket, switch back; a failure to come back fails the create.
    let made = setns(&target, CloneFlags::CLONE_NEWNET).and_then(|()| Nft::open());
    setns(&own, CloneFlags::CLONE_NEWNET)
        .map_err(|e| Error::Network(format!("return to the host's network namespace: {e}")))?;
    let mut nft = made.map_err(|e| Error::Network(format!("open nftables in {}: {e}", netns.display())))?;
    nft.apply(&cmds).map_err(|e| Error::Network(format!("load the pod's egress guard in {}: {e}", netns.display())))
}
