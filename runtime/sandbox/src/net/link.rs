//! Links, addresses and routes, over netlink.

use super::*;

pub(super) fn netlink_err(what: &'static str) -> impl Fn(rtnetlink::Error) -> Error {
    move |e| Error::Network(format!("{what}: {e}"))
}

/// Runs `f` with a netlink handle in the calling thread's network namespace.
/// A current-thread runtime starts no thread, and it is gone when this
/// returns: the process is single-threaded again for the runtime's clones
/// and forks that follow (see also [`in_netns`], whose thread is joined).
pub(super) fn with_netlink<T>(f: impl AsyncFnOnce(Handle) -> Result<T>) -> Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| Error::Network(format!("netlink: {e}")))?;
    rt.block_on(async move {
        let (conn, handle, _) =
            rtnetlink::new_connection().map_err(|e| Error::Network(format!("netlink socket: {e}")))?;
        let task = tokio::spawn(conn);
        let r = f(handle).await;
        task.abort();
        r
    })
}

pub(super) async fn index_of(h: &Handle, name: &str) -> Result<Option<u32>> {
    let mut links = h.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(Some(l)) => Ok(Some(l.header.index)),
        Ok(None) => Ok(None),
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENODEV => Ok(None),
        Err(e) => Err(netlink_err("find link")(e)),
    }
}

/// Every IPv4 address configured on the host.
pub(super) async fn host_addrs(h: &Handle) -> Result<Vec<(Ipv4Addr, u8)>> {
    use rtnetlink::packet_route::address::AddressAttribute;
    let mut out = Vec::new();
    let mut all = h.address().get().execute();
    while let Some(m) = all.try_next().await.map_err(netlink_err("list addresses"))? {
        for a in &m.attributes {
            if let AddressAttribute::Address(IpAddr::V4(v4)) = a {
                out.push((*v4, m.header.prefix_len));
            }
        }
    }
    Ok(out)
}

/// The host side: the pair, made with its peer already in the box's
/// namespace under its final name (moving or renaming a link afterwards
/// costs the kernel more), and the host's end addressed and up.
pub(super) async fn host_side(h: Handle, n: &Names, link: Link, netns: &File) -> Result<()> {
    use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVeth};
    let peer = LinkUnspec::new_with_name(BOX_LINK).setns_by_fd(netns.as_raw_fd()).build();
    let pair = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
        .name(n.host.clone())
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
        .build();
    h.link().add(pair).execute().await.map_err(netlink_err("create veth"))?;
    let host = index_of(&h, &n.host).await?.ok_or_else(|| Error::Network("veth vanished".into()))?;
    h.address()
        .add(host, IpAddr::V4(link.gateway), 30)
        .execute()
        .await
        .map_err(netlink_err("address the host's veth"))?;
    h.link().set(LinkUnspec::new_with_index(host).up().build()).execute().await.map_err(netlink_err("veth up"))?;
    Ok(())
}

/// The box's side, run from a thread inside the box's namespace.
pub(super) async fn box_side(h: Handle, link: Link) -> Result<()> {
    let peer = index_of(&h, BOX_LINK).await?.ok_or_else(|| Error::Network("veth peer not in the box".into()))?;
    h.address().add(peer, IpAddr::V4(link.addr), 30).execute().await.map_err(netlink_err("address the box"))?;
    h.link().set(LinkUnspec::new_with_index(peer).up().build()).execute().await.map_err(netlink_err("box veth up"))?;
    let route = RouteMessageBuilder::<Ipv4Addr>::new().gateway(link.gateway).output_interface(peer).build();
    h.route().add(route).execute().await.map_err(netlink_err("the box's default route"))?;
    Ok(())
}

/// Runs `f` in a new thread that has joined `netns`: a namespace switch
/// must not outlive the call, and a thread that ends takes it with it.
pub(super) fn in_netns<T: Send>(netns: &File, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(netns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| Error::Network(format!("join the box's network namespace: {e}")))?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(Error::Network("the box's network set-up panicked".into())))
    })
}
