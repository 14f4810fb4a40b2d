//! Bind mounts the runtime makes before it clones init, detached
//! (`open_tree(OPEN_TREE_CLONE)`), for init to attach where they go.
//!
//! Runs in the runtime process, with its credentials. Two kinds of bind are
//! made here rather than by init:
//!
//! * every bind of a container whose init enters a user namespace before
//!   it mounts: its root there is another host id, which may not be able
//!   to walk to the sources (containerd's pod directories are not open to
//!   others);
//! * every id-mapped bind (runtime-spec `mounts[].uidMappings`/
//!   `gidMappings`, options `idmap`/`ridmap`): `MOUNT_ATTR_IDMAP` needs a
//!   detached mount and a process privileged over the source's file
//!   system, which init in its user namespace is not.
//!
//! runc 1.2 passes mount fds to its init the same way. Init inherits the
//! fds through the clone, and attaches each with `move_mount` (see
//! `mounts::bind`).

use std::os::fd::{AsFd, OwnedFd};

use oci_spec::runtime::{LinuxIdMapping, LinuxNamespaceType, Mount, Spec};

use super::options::{parse_options, Idmap};
use crate::error::{Result, RuntimeError};
use crate::namespaces::Plan;

/// A detached bind for one config mount.
pub(crate) struct Source {
    /// The mount's index in `mounts`: two mounts may share a destination.
    pub index: usize,
    pub fd: OwnedFd,
}

/// Whether `m` is a bind mount (type `bind`, or option `bind`/`rbind`).
pub(crate) fn is_bind(m: &Mount) -> bool {
    m.typ().as_deref() == Some("bind")
        || m.options().as_deref().unwrap_or(&[]).iter().any(|o| o == "bind" || o == "rbind")
}

/// Whether `m` asks for an id-mapped mount: mappings of its own, or
/// `idmap`/`ridmap` (runc's rule: mappings alone make it one too).
pub(crate) fn is_idmapped(m: &Mount) -> bool {
    m.uid_mappings().is_some()
        || m.gid_mappings().is_some()
        || parse_options(m.options().as_deref().unwrap_or(&[])).idmap.is_some()
}

/// The detached binds of `spec` that init attaches instead of mounting.
/// `in_user_ns`: init enters a user namespace other than the runtime's
/// before it mounts, and the runtime can make detached mounts (it is root
/// of the initial user namespace; a rootless runtime's container root is
/// the caller itself, who reaches the sources anyway).
pub(crate) fn detached(spec: &Spec, bundle: &std::path::Path, plan: &Plan, in_user_ns: bool) -> Result<Vec<Source>> {
    let mut out = Vec::new();
    for (index, m) in spec.mounts().as_deref().unwrap_or_default().iter().enumerate() {
        let idmapped = is_idmapped(m);
        if !is_bind(m) || !(in_user_ns || idmapped) {
            continue;
        }
        let Some(src) = m.source().as_ref() else { continue };
        // A relative source is relative to the bundle, as runc reads it.
        let src = if src.is_absolute() { src.clone() } else { bundle.join(src) };
        let field = |what: &str| format!("mounts[{}]: {what} {}", m.destination().display(), src.display());
        let c = std::ffi::CString::new(src.as_os_str().as_encoded_bytes())
            .map_err(|_| RuntimeError::InvalidSpec(format!("{}: a NUL in the path", field("bind mount source"))))?;
        let opts = parse_options(m.options().as_deref().unwrap_or(&[]));
        let fd = crate::sys::open_tree(&c, opts.flags.contains(nix::mount::MsFlags::MS_REC))
            .map_err(|e| RuntimeError::InvalidSpec(format!("{}: {e}", field("bind mount source"))))?;
        if idmapped {
            let userns = mapping_namespace(spec, m, plan)?;
            let attrs = crate::sys::MountAttrs { set: libc::MOUNT_ATTR_IDMAP, clear: 0, userns: Some(userns.as_fd()) };
            crate::sys::mount_setattr_with(&fd, attrs, opts.idmap == Some(Idmap::Recursive)).map_err(|e| {
                let why = match e.errno {
                    nix::errno::Errno::EINVAL => " (the file system may not support id-mapped mounts)",
                    _ => "",
                };
                RuntimeError::InvalidSpec(format!("{}: {e}{why}", field("id-mapped mount of")))
            })?;
        }
        out.push(Source { index, fd });
    }
    Ok(out)
}

/// A user namespace that holds the maps mount `m` is id-mapped with: its
/// own `uidMappings`/`gidMappings`, or else (`idmap` alone) the
/// container's, those it is given or those of the user namespace it joins,
/// as runc takes them. Validation made sure one of them is there.
fn mapping_namespace(spec: &Spec, m: &Mount, plan: &Plan) -> Result<OwnedFd> {
    let shown = |f: &str| format!("mounts[{}].{f}", m.destination().display());
    let (uid, gid, field) = match (m.uid_mappings(), m.gid_mappings()) {
        (Some(u), Some(g)) => (u, g, shown("uidMappings")),
        _ => {
            if let Some(j) = plan.joins.iter().find(|j| j.typ == LinuxNamespaceType::User) {
                let fd = j.fd.try_clone().map_err(|e| RuntimeError::io("dup", "the joined user namespace", e))?;
                return Ok(fd);
            }
            let linux = spec.linux().as_ref();
            let none = || RuntimeError::unsupported(shown("options"), "idmap without mappings needs a user namespace");
            let uid = linux.and_then(|l| l.uid_mappings().as_ref()).ok_or_else(none)?;
            let gid = linux.and_then(|l| l.gid_mappings().as_ref()).ok_or_else(none)?;
            (uid, gid, "linux.uidMappings".to_string())
        }
    };
    crate::sys::userns_with_maps(&map_text(uid), &map_text(gid))
        .map_err(|e| RuntimeError::InvalidSpec(format!("{field}: a user namespace for the id-mapped mount: {e}")))
}

/// The text `/proc/<pid>/uid_map` takes for `maps`.
fn map_text(maps: &[LinuxIdMapping]) -> String {
    maps.iter().map(|m| format!("{} {} {}\n", m.container_id(), m.host_id(), m.size())).collect()
}
