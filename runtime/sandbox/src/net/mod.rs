//! Guarded egress (`--network egress`): a veth pair from the box's network
//! namespace to the host's, NAT to the host's uplink, and an nftables table
//! of the box's own that refuses, from inside the box, the metadata range,
//! the private ranges and the host itself.
//!
//! Everything is enforced on the host side: the box has no CAP_NET_ADMIN in
//! the namespace it could change anything with, and its rules live in the
//! host's namespace where it can't see them. The rules are installed in one
//! nftables transaction before the link exists, and any failure keeps the
//! box from starting. All of it goes over synchronous netlink sockets
//! ([`netlink`]): links, addresses and routes ([`link`]), and the rules
//! ([`rules`], encoded by [`nft`]); no program is run.
//!
//! Per box, all derived from its id: host-side link `trb-<hash>`, table
//! `inet tinyrun-<hash>`, and a /30 of the link range recorded under
//! `<root>/sandbox-net/` so a crashed box's leftovers can be found again.
//! Shared by the boxes of every root: IPv4 forwarding, on only while they
//! need it and then only for them ([`forward`]).
//!
//! IPv6 is not forwarded: a box's IPv6 packets are dropped on the host.

use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::Flock;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Destinations a box never reaches, whatever else it is allowed: "this"
/// network, the private ranges, shared address space (carrier NAT),
/// loopback, link-local (cloud metadata lives at 169.254.169.254),
/// multicast and the reserved range up to the broadcast address. IPv6 is
/// refused whole (see [`ruleset`]), fc00::/7 and fe80::/10 with the rest.
pub const REFUSED: [(Ipv4Addr, u8); 9] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8),
    (Ipv4Addr::new(10, 0, 0, 0), 8),
    (Ipv4Addr::new(100, 64, 0, 0), 10),
    (Ipv4Addr::new(127, 0, 0, 0), 8),
    (Ipv4Addr::new(169, 254, 0, 0), 16),
    (Ipv4Addr::new(172, 16, 0, 0), 12),
    (Ipv4Addr::new(192, 168, 0, 0), 16),
    (Ipv4Addr::new(224, 0, 0, 0), 4),
    (Ipv4Addr::new(240, 0, 0, 0), 4),
];

/// The metadata address no link range may cover: a box's /30 there would
/// take the host's own route to it.
const METADATA: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// A block of IPv4 addresses, `ADDR/LEN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The first address.
    pub addr: Ipv4Addr,
    /// The prefix length.
    pub len: u8,
}

impl Cidr {
    fn mask(self) -> u32 {
        u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0)
    }

    /// Whether `ip` is in the block.
    pub fn contains(self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.addr) & self.mask()
    }

    fn size(self) -> u64 {
        1u64 << (32 - u32::from(self.len))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl std::str::FromStr for Cidr {
    type Err = Error;
    fn from_str(s: &str) -> Result<Cidr> {
        let bad = |why: &str| Error::InvalidArgument(format!("invalid --egress-range {s:?}: {why}"));
        let (a, l) = s.split_once('/').ok_or_else(|| bad("use ADDR/LEN, e.g. 169.254.64.0/18"))?;
        let addr: Ipv4Addr = a.parse().map_err(|_| bad("not an IPv4 address"))?;
        let len: u8 = l.parse().ok().filter(|l| (1..=30).contains(l)).ok_or_else(|| bad("LEN must be 1..30"))?;
        let c = Cidr { addr, len };
        if u32::from(addr) & !c.mask() != 0 {
            return Err(bad("ADDR has bits set past LEN"));
        }
        // Inside a refused range, the box can't reach its own gateway's
        // address nor any other box's.
        let inside = [(Ipv4Addr::new(169, 254, 0, 0), 16), (Ipv4Addr::new(100, 64, 0, 0), 10)]
            .map(|(addr, len)| Cidr { addr, len })
            .into_iter()
            .any(|r| r.len <= len && r.contains(addr));
        if !inside {
            return Err(bad("must lie inside 169.254.0.0/16 or 100.64.0.0/10, which boxes can't reach"));
        }
        if c.contains(METADATA) {
            return Err(bad("must not contain the metadata address 169.254.169.254"));
        }
        Ok(c)
    }
}

/// The link range boxes' /30s come from by default: link-local, clear of
/// the metadata and link-local service addresses clouds use (169.254.0.x,
/// 169.254.169.x, 169.254.170.x) and of node-local DNS (169.254.20.10).
pub const DEFAULT_RANGE: Cidr = Cidr { addr: Ipv4Addr::new(169, 254, 64, 0), len: 18 };

/// `--allow-host HOST[:PORT]`: a name or IPv4 address, and optionally the
/// one TCP/UDP port allowed there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowHost {
    /// A DNS name or an IPv4 address.
    pub host: String,
    /// The only port allowed; any when absent.
    pub port: Option<u16>,
}

impl std::str::FromStr for AllowHost {
    type Err = Error;
    fn from_str(s: &str) -> Result<AllowHost> {
        let bad = |why: &str| Error::InvalidArgument(format!("invalid --allow-host {s:?}: {why}"));
        if s.contains('[') || s.matches(':').count() > 1 {
            return Err(bad("IPv6 is not forwarded from a box; name an IPv4 address or a host name"));
        }
        let (host, port) = match s.split_once(':') {
            Some((h, p)) => {
                (h, Some(p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| bad("PORT must be 1..65535"))?))
            }
            None => (s, None),
        };
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_';
        if host.is_empty() || !host.chars().all(ok) {
            return Err(bad("use HOST[:PORT] with a host name or an IPv4 address"));
        }
        Ok(AllowHost { host: host.to_string(), port })
    }
}

/// What `--network egress` was asked for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Egress {
    /// `--allow-host`: when not empty, the only destinations allowed.
    pub allow: Vec<AllowHost>,
    /// `--dns`: the resolver the box's /etc/resolv.conf names; port 53 on
    /// it is allowed even where it is private or the host's own.
    pub dns: Option<Ipv4Addr>,
    /// `--egress-range`: where each box's /30 comes from.
    pub range: Cidr,
}

impl Default for Egress {
    fn default() -> Egress {
        Egress { allow: Vec::new(), dns: None, range: DEFAULT_RANGE }
    }
}

/// Checks `--dns IP`: an IPv4 address the box can send to (its own
/// loopback is its own, and the others can't be routed).
pub fn parse_dns(s: &str) -> Result<Ipv4Addr> {
    let ip: Ipv4Addr = s.trim().parse().map_err(|_| {
        Error::InvalidArgument(format!("invalid --dns {s:?}: an IPv4 address (IPv6 is not forwarded from a box)"))
    })?;
    if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
        return Err(Error::InvalidArgument(format!(
            "invalid --dns {ip}: the box can't reach it (its loopback is its own): name a resolver's address on the \
             host or beyond it"
        )));
    }
    Ok(ip)
}

/// The text of the box's /etc/resolv.conf.
pub(crate) fn resolv_conf(dns: Ipv4Addr) -> String {
    format!("nameserver {dns}\noptions edns0\n")
}

/// Makes `/etc/resolv.conf` in the box's root a regular file the
/// resolver's file can be mounted on. An image often has it as a symlink
/// (into /run, made at boot) that leads nowhere in a box: in an image's
/// overlay, which is the box's own, the link is replaced by an empty file
/// owned by the box's root (`host_id`); the image below is not touched. In
/// any other root nothing is changed here (a missing file is made with the
/// other mount points), and anything but a regular file there is an error
/// naming it. Resolved inside the root, as the runtime will.
pub(crate) fn resolv_conf_mountpoint(root: &Path, image: bool, host_id: u32) -> Result<()> {
    use nix::sys::stat::SFlag;
    use std::ffi::OsStr;
    let tree = tinyrun::tree::Tree::open_one_mount(root)?;
    let at = |e: nix::errno::Errno| Error::io("prepare /etc/resolv.conf in", root, e.into());
    let etc = match tree.dir(Path::new("/etc")).map_err(|e| e.errno) {
        Ok(etc) => etc,
        // Made with the other mount points, as for any root.
        Err(nix::errno::Errno::ENOENT) if !image => return Ok(()),
        Err(_) if image => {
            tree.mkdir_all_owned(Path::new("/etc"), 0o755, (host_id, host_id)).map_err(|e| at(e.errno))?
        }
        Err(e) => return Err(at(e)),
    };
    let name = OsStr::new("resolv.conf");
    match tinyrun::tree::lstat_at(&etc, name) {
        Ok(st) if tinyrun::tree::kind(&st) == SFlag::S_IFREG => return Ok(()),
        Err(nix::errno::Errno::ENOENT) if !image => return Ok(()),
        Ok(_) if !image => {
            return Err(Error::InvalidArgument(format!(
                "--dns: /etc/resolv.conf in the root filesystem {} is not a regular file: the resolver's file can \
                 only be mounted on one",
                root.display()
            )))
        }
        Ok(_) => tinyrun::tree::remove_at(&etc, name).map_err(at)?,
        Err(nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(at(e)),
    }
    let flags = nix::fcntl::OFlag::O_CREAT | nix::fcntl::OFlag::O_EXCL | nix::fcntl::OFlag::O_NOFOLLOW;
    let flags = flags | nix::fcntl::OFlag::O_WRONLY;
    tinyrun::tree::open_at(&etc, name, flags, 0o644).map_err(at)?;
    tinyrun::tree::chown_at(&etc, name, (host_id, host_id)).map_err(at)
}

/// The host-side link and table names of box `id`: short enough for a link
/// name (15 bytes), and the same each time, so clean-up finds them from the
/// id alone.
struct Names {
    host: String,
    table: String,
}

/// What every box's host-side link name starts with.
const LINK_PREFIX: &str = "trb-";

fn names(id: &str) -> Names {
    let sum = Sha256::digest(id.as_bytes());
    let h: String = sum.iter().take(5).map(|b| format!("{b:02x}")).collect();
    Names { host: format!("{LINK_PREFIX}{h}"), table: format!("tinyrun-{h}") }
}

/// The name of the box's end of the pair, in the box's namespace.
const BOX_LINK: &str = "eth0";

/// One box's /30: the host's side, the box's side.
#[derive(Debug, Clone, Copy)]
struct Link {
    gateway: Ipv4Addr,
    addr: Ipv4Addr,
}

fn link_of(net: u32) -> Link {
    Link { gateway: Ipv4Addr::from(net + 1), addr: Ipv4Addr::from(net + 2) }
}

/// An allowed destination, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Allowed {
    addr: Ipv4Addr,
    port: Option<u16>,
}

/// Resolves `--allow-host`s once, now, on the host: the box gets these
/// addresses, not the names (a name whose addresses change later is not
/// followed). An address in a refused range is an error, not a silent no.
fn resolve(allow: &[AllowHost]) -> Result<Vec<Allowed>> {
    let mut out = Vec::new();
    for a in allow {
        let addrs: Vec<Ipv4Addr> = (a.host.as_str(), a.port.unwrap_or(0))
            .to_socket_addrs()
            .map_err(|e| Error::InvalidArgument(format!("--allow-host {}: can't resolve it: {e}", a.host)))?
            .filter_map(|s| match s.ip() {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(_) => None,
            })
            .collect();
        if addrs.is_empty() {
            return Err(Error::InvalidArgument(format!("--allow-host {}: it has no IPv4 address", a.host)));
        }
        for addr in addrs {
            if let Some(r) = refused(addr) {
                return Err(Error::InvalidArgument(format!(
                    "--allow-host {}: {addr} is in {r}, which a box never reaches",
                    a.host
                )));
            }
            let new = Allowed { addr, port: a.port };
            if !out.contains(&new) {
                out.push(new);
            }
        }
    }
    Ok(out)
}

fn refused(ip: Ipv4Addr) -> Option<Cidr> {
    REFUSED.iter().map(|&(addr, len)| Cidr { addr, len }).find(|c| c.contains(ip))
}

mod forward;
mod link;
mod netlink;
mod nft;
pub(crate) mod pasta;
pub(crate) mod pod;
mod record;
mod records;
mod rules;

pub(crate) use record::{Destination, NetRefusals, NetWatch};

use forward::Host;
use link::{in_netns, Route};
use records::Records;
use rules::ruleset;

/// What comes before box `id`'s container is created (its bundle
/// written): an ordinary user's box gets its network namespace, its table
/// there and pasta now ([`pasta`]), and its init joins that namespace.
/// On error the caller removes the box, and with it all of this.
pub(crate) fn prepare(root: &Path, id: &str, egress: Option<&Egress>) -> Result<()> {
    match egress {
        Some(e) if crate::unprivileged::active() => pasta::setup(root, id, e),
        _ => Ok(()),
    }
}

/// The network namespace box `id`'s spec joins, where there is one made
/// for it ([`prepare`]); its bundle dir is `bundle`.
pub(crate) fn box_netns(bundle: &Path, egress: Option<&Egress>) -> Option<PathBuf> {
    (egress.is_some() && crate::unprivileged::active()).then(|| pasta::netns_path(bundle))
}

/// Gives box `id`, whose init is `pid` (created, not yet started), its
/// guarded egress on a veth (root's boxes; an ordinary user's got theirs
/// before, [`prepare`]). On error some of it may be in place: the caller removes
/// the box, and with it all of this ([`teardown`]).
pub(crate) fn setup(root: &Path, id: &str, pid: i32, egress: &Egress) -> Result<()> {
    if crate::unprivileged::active() {
        // Set up before the container was made ([`prepare`]).
        return Ok(());
    }
    let n = names(id);
    let allow = resolve(&egress.allow)?;
    let ns_path = PathBuf::from(format!("/proc/{pid}/ns/net"));
    let netns = File::open(&ns_path).map_err(|e| Error::io("open", &ns_path, e))?;
    let mut route = Route::open()?;
    let link = Records::new(root).allocate(egress.range, id, &route.addrs()?)?;
    // The rules come first: the link never exists without them.
    Host::lock()?.install(ruleset(&n, link, egress.dns, &allow))?;
    route.host_side(&n, link, &netns)?;
    in_netns(&netns, |mut boxside| boxside.box_side(link))
}

/// Removes what [`setup`] made for box `id`: its pasta and pasta's
/// record, or its table, its link (and with it the link's route; the box's
/// side goes with the pair), and its record; forwarding goes off with the
/// last box if tinyrun turned it on. A pasta'd box's table goes with its
/// namespace. Nothing there is fine; each part is tried even if one before
/// failed.
pub(crate) fn teardown(root: &Path, id: &str) -> Result<()> {
    let pasta = pasta::stop(root, id);
    let link = teardown_link(root, id);
    pasta.and(link)
}

fn teardown_link(root: &Path, id: &str) -> Result<()> {
    let records = Records::new(root);
    if !records.dir.exists() {
        return Ok(());
    }
    let _lock = records.lock()?;
    let mine: Vec<PathBuf> = records.all()?.into_iter().filter(|(_, o, _)| o == id).map(|(_, _, p)| p).collect();
    if mine.is_empty() {
        return Ok(());
    }
    let n = names(id);
    let mut host = Host::lock()?;
    // Adding an existing table is a no-op: so the delete never fails for
    // want of a table.
    let table = || (nft::Family::Inet, n.table.clone());
    let (add, del) = (nft::Cmd::AddTable(table().0, table().1), nft::Cmd::DelTable(table().0, table().1));
    let rules = host.apply("remove the box's egress rules", &[add, del]);
    let link = Route::open().and_then(|mut r| r.delete(&n.host));
    let rules = rules.and_then(|()| host.release_if_last());
    rules?;
    link?;
    for p in mine {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove egress record", p, e)),
        }
    }
    Ok(())
}

/// Tears down the egress of every recorded box for which `alive` is false
/// (a crashed run's, or one whose removal was cut short).
pub(crate) fn collect(root: &Path, alive: &dyn Fn(&str) -> bool) -> Result<()> {
    let records = Records::new(root);
    if !records.dir.exists() {
        return Ok(());
    }
    let dead: Vec<String> = {
        let _lock = records.lock()?;
        let mut owners: Vec<String> = records.all()?.into_iter().map(|(_, o, _)| o).collect();
        owners.extend(pasta::owners(&records));
        owners.sort_unstable();
        owners.dedup();
        owners.into_iter().filter(|o| !alive(o)).collect()
    };
    dead.iter().try_for_each(|id| teardown(root, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_stay_refused() {
        assert_eq!("169.254.64.0/18".parse::<Cidr>().unwrap(), DEFAULT_RANGE);
        assert!("100.64.8.0/24".parse::<Cidr>().is_ok());
        for bad in ["10.0.0.0/8", "169.254.64.1/18", "169.254.128.0/17", "169.254.0.0/31", "x/8", "169.254.0.0"] {
            let e = bad.parse::<Cidr>().unwrap_err().to_string();
            assert!(e.contains("--egress-range"), "{bad}: {e}");
        }
    }

    #[test]
    fn allow_host_syntax() {
        assert_eq!(
            "example.com:443".parse::<AllowHost>().unwrap(),
            AllowHost { host: "example.com".into(), port: Some(443) }
        );
        assert_eq!("1.2.3.4".parse::<AllowHost>().unwrap(), AllowHost { host: "1.2.3.4".into(), port: None });
        for bad in ["", "a:0", "a:70000", "[::1]:80", "::1", "a b", "a:"] {
            assert!(bad.parse::<AllowHost>().is_err(), "{bad}");
        }
    }

    #[test]
    fn refused_destinations() {
        for ip in ["169.254.169.254", "10.1.2.3", "172.31.0.1", "192.168.1.1", "100.64.0.1", "127.0.0.1", "0.0.0.0"] {
            assert!(refused(ip.parse().unwrap()).is_some(), "{ip}");
        }
        for ip in ["1.1.1.1", "172.32.0.1", "100.128.0.1", "198.51.100.10"] {
            assert!(refused(ip.parse().unwrap()).is_none(), "{ip}");
        }
        let e = resolve(&["10.0.0.1:80".parse().unwrap()]).unwrap_err().to_string();
        assert!(e.contains("10.0.0.0/8"), "{e}");
        assert_eq!(
            resolve(&["198.51.100.10:80".parse().unwrap()]).unwrap(),
            vec![Allowed { addr: Ipv4Addr::new(198, 51, 100, 10), port: Some(80) }]
        );
    }

    #[test]
    fn dns_must_be_reachable() {
        assert!(parse_dns("10.0.0.53").is_ok());
        for bad in ["127.0.0.53", "0.0.0.0", "::1", "resolver"] {
            assert!(parse_dns(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_fit_a_link_name_and_are_stable() {
        let a = names("run-0123456789ab");
        assert!(a.host.len() <= 15, "{}", a.host);
        assert_eq!(a.host, names("run-0123456789ab").host);
        assert_ne!(a.host, names("run-0123456789ac").host);
    }

    #[test]
    fn the_ruleset_refuses_before_it_allows() {
        let n = names("x");
        let link = link_of(u32::from(Ipv4Addr::new(169, 254, 64, 0)));
        let allow = [Allowed { addr: Ipv4Addr::new(198, 51, 100, 10), port: Some(80) }];
        let rs = ruleset(&n, link, Some(Ipv4Addr::new(10, 0, 0, 53)), &allow);
        // One line per rule, `chain: expr; expr; ...`.
        let lines: Vec<String> = rs
            .iter()
            .filter_map(|c| match c {
                nft::Cmd::AddRule { chain, exprs, .. } => {
                    Some(format!("{chain}: {}", exprs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")))
                }
                _ => None,
            })
            .collect();
        let text = lines.join("\n");
        let pos = |s: &str| text.find(s).unwrap_or_else(|| panic!("{s} not in {text}"));
        let (resolver, metadata, allowed) = (
            "egress: meta NfProto; == 02; payload Network+16/4; == 0a000035",
            "& ffff0000; == a9fe0000; Jump(\"refuse\")",
            "== c633640a",
        );
        assert!(pos(resolver) < pos(metadata), "the named resolver comes before the refused ranges");
        assert!(pos(metadata) < pos(allowed), "refused ranges come before the allowlist");
        let masquerade =
            "postrouting: meta NfProto; == 02; payload Network+12/4; == a9fe4002; meta OifName; != 7472622d";
        assert!(text.contains(masquerade), "the box's address, leaving by another link: {text}");
        assert!(lines.last().is_some_and(|l| l.ends_with("masquerade")), "{text}");
        let first_egress = lines.iter().find(|l| l.starts_with("egress:")).expect("egress rules");
        assert_eq!(first_egress, "egress: meta NfProto; != 02; Drop", "anything but IPv4 is dropped first");
    }
}
