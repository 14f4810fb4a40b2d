//! `process.user`: groups, gid, uid and umask, switched by init with the
//! capability steps around it (see [`crate::capabilities`]).

use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};

use crate::capabilities::Sets;
use crate::error::InitError;

/// The ids init switches to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ids {
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
}

/// Bounding set, then ids (keeping permitted across a non-zero uid), then
/// the remaining capability sets.
pub(crate) fn switch(ids: &Ids, caps: &Sets, may_setgroups: bool) -> Result<(), InitError> {
    caps.apply_bounding()?;
    nix::sys::prctl::set_keepcaps(true).map_err(|e| InitError::value("prctl", "PR_SET_KEEPCAPS 1", e))?;
    if may_setgroups {
        let groups: Vec<Gid> = ids.additional_gids.iter().map(|g| Gid::from_raw(*g)).collect();
        setgroups(&groups).map_err(|e| {
            InitError::value("setgroups", format_args!("{:?}", ids.additional_gids), e)
                .field("process.user.additionalGids")
        })?;
    } else if !ids.additional_gids.is_empty() {
        return Err(InitError::other("setgroups", "setgroups is denied in this user namespace")
            .field("process.user.additionalGids"));
    }
    let gid = Gid::from_raw(ids.gid);
    setresgid(gid, gid, gid).map_err(|e| InitError::value("setresgid", ids.gid, e).field("process.user.gid"))?;
    let uid = Uid::from_raw(ids.uid);
    setresuid(uid, uid, uid).map_err(|e| InitError::value("setresuid", ids.uid, e).field("process.user.uid"))?;
    nix::sys::prctl::set_keepcaps(false).map_err(|e| InitError::value("prctl", "PR_SET_KEEPCAPS 0", e))?;
    caps.apply_rest()
}

/// Whether `setgroups(2)` is allowed here (a user namespace may deny it).
pub(crate) fn setgroups_allowed() -> bool {
    std::fs::read_to_string("/proc/self/setgroups").map(|s| s.trim() != "deny").unwrap_or(true)
}

/// `$HOME` for `uid`, from the container's /etc/passwd, as runc fills it in
/// when the config doesn't.
pub(crate) fn home_of(uid: u32) -> String {
    // The image's: read with care (see rootfs::image); 4 MiB is far more
    // than any passwd file, and a bigger one is ignored like a missing one.
    let passwd = crate::rootfs::image::read_small(std::path::Path::new("/etc/passwd"), 4 << 20)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 6 && f[2].parse::<u32>().ok() == Some(uid))
        .map(|f| f[5].to_string())
        .unwrap_or_else(|| "/".into())
}
