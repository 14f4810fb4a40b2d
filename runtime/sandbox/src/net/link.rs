//! Links, addresses and routes, over a synchronous `NETLINK_ROUTE` socket
//! ([`Netlink`]); the messages are `netlink-packet-route`'s.

use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage as Msg};

use super::netlink::{Netlink, NETLINK_ROUTE, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST};
use super::*;

const CREATE: u16 = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;

/// A route socket of the calling thread's network namespace.
pub(super) struct Route(Netlink);

fn err(what: &'static str) -> impl Fn(nix::errno::Errno) -> Error {
    move |e| Error::Network(format!("{what}: {e}"))
}

fn encode(msg: Msg, flags: u16) -> Vec<u8> {
    let mut m = NetlinkMessage::from(msg);
    m.header.flags = flags;
    m.finalize();
    let mut buf = vec![0; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

impl Route {
    pub(super) fn open() -> Result<Route> {
        Netlink::open(NETLINK_ROUTE).map(Route).map_err(err("netlink socket"))
    }

    /// One change, acknowledged.
    fn change(&mut self, what: &'static str, msg: Msg, flags: u16) -> Result<()> {
        self.0.request(&encode(msg, flags), 1).map_err(err(what))
    }

    /// A get or a dump: the kernel's messages.
    fn fetch(&mut self, msg: Msg, flags: u16) -> nix::Result<Vec<Msg>> {
        let replies = self.0.fetch(&encode(msg, flags))?;
        let parsed =
            replies.iter().map(|r| NetlinkMessage::<Msg>::deserialize(r).map_err(|_| nix::errno::Errno::EBADMSG));
        parsed
            .filter_map(|m| match m.map(|m| m.payload) {
                Ok(NetlinkPayload::InnerMessage(m)) => Some(Ok(m)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect()
    }

    /// The index of link `name`, if there is one.
    pub(super) fn index_of(&mut self, name: &str) -> Result<Option<u32>> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.to_string()));
        match self.fetch(Msg::GetLink(m), NLM_F_REQUEST) {
            Ok(replies) => Ok(replies.into_iter().find_map(|r| match r {
                Msg::NewLink(l) => Some(l.header.index),
                _ => None,
            })),
            Err(nix::errno::Errno::ENODEV) => Ok(None),
            Err(e) => Err(err("find link")(e)),
        }
    }

    /// Every IPv4 address configured, with its prefix length.
    pub(super) fn addrs(&mut self) -> Result<Vec<(Ipv4Addr, u8)>> {
        let all = self.fetch(Msg::GetAddress(AddressMessage::default()), NLM_F_REQUEST | NLM_F_DUMP);
        let mut out = Vec::new();
        for m in all.map_err(err("list addresses"))? {
            let Msg::NewAddress(m) = m else { continue };
            for a in &m.attributes {
                if let AddressAttribute::Address(IpAddr::V4(v4)) = a {
                    out.push((*v4, m.header.prefix_len));
                }
            }
        }
        Ok(out)
    }

    /// The gateways of the IPv4 routes of the main table (the default
    /// route's and any other's).
    pub(super) fn gateways(&mut self) -> Result<Vec<Ipv4Addr>> {
        let mut m = RouteMessage::default();
        m.header.address_family = AddressFamily::Inet;
        let all = self.fetch(Msg::GetRoute(m), NLM_F_REQUEST | NLM_F_DUMP);
        let mut out = Vec::new();
        for m in all.map_err(err("list routes"))? {
            let Msg::NewRoute(m) = m else { continue };
            if m.header.table != netlink_packet_route::route::RouteHeader::RT_TABLE_MAIN {
                continue;
            }
            for a in &m.attributes {
                if let RouteAttribute::Gateway(RouteAddress::Inet(g)) = a {
                    out.push(*g);
                }
            }
        }
        Ok(out)
    }

    /// `ip link set lo up` (its index is always 1).
    pub(super) fn loopback_up(&mut self) -> Result<()> {
        self.up("loopback up", 1)
    }

    /// `ip link set INDEX up`.
    fn up(&mut self, what: &'static str, index: u32) -> Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
        self.change(what, Msg::SetLink(m), NLM_F_REQUEST | NLM_F_ACK)
    }

    /// `ip addr add ADDR/30 dev INDEX`.
    fn address(&mut self, what: &'static str, index: u32, addr: Ipv4Addr) -> Result<()> {
        let mut m = AddressMessage::default();
        m.header.family = AddressFamily::Inet;
        m.header.prefix_len = 30;
        m.header.index = index;
        let broadcast = Ipv4Addr::from(u32::from(addr) | 3);
        m.attributes.extend([
            AddressAttribute::Local(IpAddr::V4(addr)),
            AddressAttribute::Address(IpAddr::V4(addr)),
            AddressAttribute::Broadcast(broadcast),
        ]);
        self.change(what, Msg::NewAddress(m), CREATE)
    }

    /// The host side: the pair, made with its peer already in the box's
    /// namespace under its final name (moving or renaming a link afterwards
    /// costs the kernel more), and the host's end addressed and up.
    pub(super) fn host_side(&mut self, n: &Names, link: Link, netns: &File) -> Result<()> {
        let mut peer = LinkMessage::default();
        peer.attributes = vec![LinkAttribute::IfName(BOX_LINK.into()), LinkAttribute::NetNsFd(netns.as_raw_fd())];
        let mut pair = LinkMessage::default();
        pair.attributes = vec![
            LinkAttribute::IfName(n.host.clone()),
            LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Veth),
                LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
            ]),
        ];
        self.change("create veth", Msg::NewLink(pair), CREATE)?;
        let host = self.index_of(&n.host)?.ok_or_else(|| Error::Network("veth vanished".into()))?;
        self.address("address the host's veth", host, link.gateway)?;
        self.up("veth up", host)
    }

    /// The box's side; the socket must be one of the box's namespace.
    pub(super) fn box_side(&mut self, link: Link) -> Result<()> {
        let peer = self.index_of(BOX_LINK)?.ok_or_else(|| Error::Network("veth peer not in the box".into()))?;
        self.address("address the box", peer, link.addr)?;
        self.up("box veth up", peer)?;
        let mut route = RouteMessage::default();
        route.header.address_family = AddressFamily::Inet;
        route.header.table = netlink_packet_route::route::RouteHeader::RT_TABLE_MAIN;
        route.header.protocol = RouteProtocol::Static;
        route.header.scope = RouteScope::Universe;
        route.header.kind = RouteType::Unicast;
        route.attributes = vec![RouteAttribute::Gateway(RouteAddress::Inet(link.gateway)), RouteAttribute::Oif(peer)];
        self.change("the box's default route", Msg::NewRoute(route), CREATE)
    }

    /// Removes link `name`; none there is fine.
    pub(super) fn delete(&mut self, name: &str) -> Result<()> {
        let Some(index) = self.index_of(name)? else { return Ok(()) };
        let mut m = LinkMessage::default();
        m.header.index = index;
        match self.0.request(&encode(Msg::DelLink(m), NLM_F_REQUEST | NLM_F_ACK), 1) {
            Ok(()) | Err(nix::errno::Errno::ENODEV) => Ok(()),
            Err(e) => Err(err("remove the box's veth")(e)),
        }
    }
}

/// Runs `f` with a route socket of the box's network namespace `netns`.
pub(super) fn in_netns<T>(netns: &File, f: impl FnOnce(Route) -> Result<T>) -> Result<T> {
    f(open_in(netns, Route::open)?)
}

/// What `open` makes (a socket) in network namespace `netns`. It is made by
/// a thread that joins the namespace and ends: a namespace switch must not
/// outlive the call, and a socket stays in the namespace it was made in,
/// whichever thread then uses it.
pub(super) fn open_in<T: Send>(netns: &File, open: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(netns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| Error::Network(format!("join the box's network namespace: {e}")))?;
            open()
        })
        .join()
        .unwrap_or_else(|_| Err(Error::Network("the box's network set-up panicked".into())))
    })
}
