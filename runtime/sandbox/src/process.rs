//! The box's process, made from the options and the image's config as an
//! engine makes it. Runs in the runtime process.
//!
//! - User: `--user`, else the image's `User`, else the sandbox's own user
//!   (1000:1000; an image that names no user does not run as root, as it
//!   would under docker: `--user root` asks for that). `USER[:GROUP]`,
//!   each a name or an id; names are looked up in the box root's
//!   /etc/passwd and /etc/group (module `passwd`), and a named user gets
//!   its supplementary groups from /etc/group. A numeric user not in
//!   /etc/passwd gets group 0, as docker gives it. `root` is uid 0 even in
//!   an image without /etc/passwd. Ids must fit the box's range (65536 ids,
//!   4096 for an ordinary user's box, 1 without subordinate ids); uid 0 is
//!   the root of the box's own user namespace, without capabilities.
//! - Working directory: the image's `WorkingDir`, else /work.
//! - Command: the image's `Entrypoint` followed by the given command, or
//!   by the image's `Cmd` when none is given (`docker run`'s rule).
//! - Environment, later entries replacing earlier ones of the same name:
//!   ours (PATH, HOME, TMPDIR=/tmp, LANG), the image's `Env` (less HOME
//!   and TMPDIR), then the caller's `-e`. HOME is /work, except in an
//!   image box: there it is the image's HOME if the box runs as the
//!   image's own `User`, else the home directory /etc/passwd gives the
//!   box's user if the image has that directory and it is the user's own
//!   (a home the user can't write is no home), else /work. The caller's
//!   `-e HOME=...` wins over all of them.

use std::path::Path;

use nix::fcntl::OFlag;
use tinyrun::tree::Tree;

use crate::error::{Error, Result};
use crate::ids::SANDBOX_UID;
use crate::image::Config;
use crate::passwd;

/// Who the box's process runs as, inside the box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) groups: Vec<u32>,
    /// The user's home in the box root's /etc/passwd, if that directory
    /// exists there and is the user's.
    pub(crate) home: Option<String>,
    /// The user is the one the image's config names.
    pub(crate) from_image: bool,
}

/// A box's root as the host sees it: a file of the box's id `n` shows as
/// host id `ids.host(n)`.
#[derive(Clone, Copy)]
pub(crate) struct BoxRoot<'a> {
    pub(crate) tree: &'a Tree,
    pub(crate) ids: crate::ids::BoxIds,
}

/// The user the box runs as (see the module doc), its names looked up in
/// `root`. Without a root (the pool key, which has no root to read) names
/// are left unresolved: ids 0 stand for them.
pub(crate) fn user(requested: Option<&str>, config: Option<&Config>, root: Option<BoxRoot<'_>>) -> Result<User> {
    let image_user = config.and_then(|c| c.user.as_deref());
    let Some(spec) = requested.or(image_user) else {
        // A box that maps one id (an ordinary user without subordinate
        // ids) has no other user to run as.
        if root.is_some_and(|r| r.ids.size == 1) {
            return Ok(User { uid: 0, gid: 0, groups: Vec::new(), home: None, from_image: false });
        }
        let home = match root {
            Some(r) => {
                let entry = passwd::users(r.tree)?.into_iter().find(|u| u.uid == SANDBOX_UID);
                entry.and_then(|u| own_dir(r, &u.home, SANDBOX_UID))
            }
            None => None,
        };
        return Ok(User { uid: SANDBOX_UID, gid: SANDBOX_UID, groups: Vec::new(), home, from_image: false });
    };
    let from_image = requested.is_none();
    let bad = |why: String| {
        let flag = if from_image { "the image's User".to_string() } else { "--user".to_string() };
        Error::InvalidArgument(format!("{flag} {spec:?}: {why}"))
    };
    let (name, group) = spec.split_once(':').map_or((spec, None), |(u, g)| (u, Some(g)));
    let Some(root) = root else {
        return Ok(User { uid: 0, gid: 0, groups: Vec::new(), home: None, from_image });
    };
    let users = passwd::users(root.tree)?;
    let entry = match name.parse::<u32>() {
        Ok(uid) => users.into_iter().find(|u| u.uid == uid).map_or(Ok((uid, None)), |u| Ok((uid, Some(u)))),
        Err(_) if name == "root" => Ok((0, users.into_iter().find(|u| u.uid == 0))),
        Err(_) => users
            .into_iter()
            .find(|u| u.name == name)
            .map(|u| (u.uid, Some(u)))
            .ok_or_else(|| bad(format!("no user {name:?} in {}", root.tree.describe(Path::new("/etc/passwd"))))),
    };
    let (uid, entry) = entry?;
    let groups = passwd::groups(root.tree)?;
    let gid = match group {
        None => entry.as_ref().map_or(0, |u| u.gid),
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => groups
                .iter()
                .find(|x| x.name == g)
                .map(|x| x.gid)
                .ok_or_else(|| bad(format!("no group {g:?} in {}", root.tree.describe(Path::new("/etc/group")))))?,
        },
    };
    let extra: Vec<u32> = match &entry {
        Some(u) => groups.iter().filter(|g| g.gid != gid && g.members.contains(&u.name)).map(|g| g.gid).collect(),
        None => Vec::new(),
    };
    let size = root.ids.size;
    if let Some(id) = [uid, gid].iter().chain(&extra).find(|id| **id >= size) {
        let why = if size == 1 { " (only the caller's own id: no range in /etc/subuid, /etc/subgid)" } else { "" };
        return Err(bad(format!("id {id} is outside the box's ids 0 to {}{why}", size - 1)));
    }
    let home = entry.and_then(|u| own_dir(root, &u.home, uid));
    Ok(User { uid, gid, groups: extra, home, from_image })
}

/// `dir` if it is an absolute path to a directory of `root` that box user
/// `uid` owns.
fn own_dir(root: BoxRoot<'_>, dir: &str, uid: u32) -> Option<String> {
    let p = Path::new(dir);
    let fd = root.tree.open_in(p, OFlag::O_PATH | OFlag::O_DIRECTORY).ok().filter(|_| p.is_absolute())?;
    let st = nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd)).ok()?;
    (st.st_uid == root.ids.host(uid)).then(|| dir.to_string())
}

/// The command the box runs: the image's `Entrypoint` followed by `given`,
/// or by its `Cmd` when nothing is given.
pub(crate) fn command(config: Option<&Config>, given: &[String]) -> Result<Vec<String>> {
    let (entry, cmd) = config.map_or((&[][..], &[][..]), |c| (&c.entrypoint[..], &c.cmd[..]));
    let rest = if given.is_empty() { cmd } else { given };
    let args: Vec<String> = entry.iter().chain(rest).cloned().collect();
    if args.is_empty() {
        let why = if config.is_some() { " (the image has no Entrypoint or Cmd)" } else { "" };
        return Err(Error::InvalidArgument(format!("no command to run: give one after --{why}")));
    }
    Ok(args)
}

/// Where the box's process starts.
pub(crate) fn cwd(config: Option<&Config>) -> Result<String> {
    match config.and_then(|c| c.working_dir.as_deref()) {
        None => Ok("/work".to_string()),
        Some(d) if Path::new(d).is_absolute() => Ok(d.to_string()),
        Some(d) => Err(Error::InvalidArgument(format!("the image's WorkingDir {d:?} is not an absolute path"))),
    }
}

/// The box's environment (see the module doc); `image` says whether the
/// box has an image root (`config` is its config, if it is a layout).
pub(crate) fn env(config: Option<&Config>, image: bool, user: &User, caller: &[String]) -> Vec<String> {
    let image_env = config.map_or(&[][..], |c| &c.env[..]);
    let image_home = image_env.iter().rev().find_map(|v| v.strip_prefix("HOME="));
    let home = match (image, image_home) {
        (false, _) => "/work",
        (true, Some(h)) if user.from_image => h,
        (true, _) => user.home.as_deref().unwrap_or("/work"),
    };
    // $HOME/.local/bin first: what `pip install` puts there runs by name.
    // PIP_BREAK_SYSTEM_PACKAGES: a host's or image's Python may be
    // "externally managed" (PEP 668), which makes pip refuse even a user
    // install; in the box the system's packages are a read-only mount (or
    // the box's own overlay) that nothing of the host's depends on, and pip
    // installs into the box's own user site (or a venv).
    let defaults = [
        format!("PATH={home}/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        format!("HOME={home}"),
        "TMPDIR=/tmp".to_string(),
        "LANG=C.UTF-8".to_string(),
        "PIP_BREAK_SYSTEM_PACKAGES=1".to_string(),
    ];
    merge_env(&defaults, image_env, caller)
}

/// Our defaults, then the image's (but HOME and TMPDIR stay ours: [`env`]
/// chose HOME), then the caller's; a later NAME replaces an earlier one in
/// place.
fn merge_env(defaults: &[String], image: &[String], caller: &[String]) -> Vec<String> {
    let mut env: Vec<String> = defaults.to_vec();
    let ours = |v: &&String| !(v.starts_with("HOME=") || v.starts_with("TMPDIR="));
    for v in image.iter().filter(ours).chain(caller) {
        let name = v.split_once('=').map_or(v.as_str(), |(n, _)| n);
        match env.iter_mut().find(|e| e.split_once('=').map_or(e.as_str(), |(n, _)| n) == name) {
            Some(e) => e.clone_from(v),
            None => env.push(v.clone()),
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// A root whose files show with their own ids (base 0); `dirs` are made
    /// and given to 1001.
    fn root_with(passwd: &str, group: &str, dirs: &[&str]) -> (tempfile::TempDir, Tree) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("etc")).unwrap();
        std::fs::write(t.path().join("etc/passwd"), passwd).unwrap();
        std::fs::write(t.path().join("etc/group"), group).unwrap();
        for d in dirs {
            let p = t.path().join(d.trim_start_matches('/'));
            std::fs::create_dir_all(&p).unwrap();
            if nix::unistd::geteuid().is_root() {
                std::os::unix::fs::chown(&p, Some(1001), Some(1001)).unwrap();
            }
        }
        let tree = Tree::open(t.path()).unwrap();
        (t, tree)
    }

    #[test]
    fn users_resolve_as_an_engine_resolves_them() {
        let (_t, r) = root_with(
            "root:x:0:0:root:/root:/bin/sh\napp:x:1001:1002::/home/app:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n",
            "root:x:0:\nstaff:x:50:app\napp:x:1002:\nwheel:x:10:root,app\n",
            &["/home/app"],
        );
        let u = user(Some("app"), None, Some(BoxRoot { tree: &r, ids: crate::ids::BoxIds::block(0) })).unwrap();
        let home = nix::unistd::geteuid().is_root().then_some("/home/app");
        assert_eq!((u.uid, u.gid, u.groups.clone(), u.home.as_deref()), (1001, 1002, vec![50, 10], home));
        assert!(!u.from_image);
        let img = Config { user: Some("app:staff".into()), ..Config::default() };
        let u = user(None, Some(&img), Some(BoxRoot { tree: &r, ids: crate::ids::BoxIds::block(0) })).unwrap();
        assert_eq!((u.uid, u.gid, u.from_image), (1001, 50, true));
        assert_eq!(
            user(Some("root"), Some(&img), Some(BoxRoot { tree: &r, ids: crate::ids::BoxIds::block(0) })).unwrap().uid,
            0,
            "--user wins over the image's"
        );
        let u = user(Some("4242"), None, Some(BoxRoot { tree: &r, ids: crate::ids::BoxIds::block(0) })).unwrap();
        assert_eq!((u.uid, u.gid, u.home), (4242, 0, None), "an unknown numeric user gets group 0, as in docker");
        let d = user(None, None, Some(BoxRoot { tree: &r, ids: crate::ids::BoxIds::block(0) })).unwrap();
        assert_eq!((d.uid, d.gid, d.home), (1000, 1000, None), "the default user; /home/user does not exist");
        for (bad, says) in [("nobody-here", "no user"), ("app:nogroup", "no group"), ("70000", "outside")] {
            let e = user(Some(bad), None, Some(BoxRoot { tree: &r, ids: crate::ids::BoxIds::block(0) }))
                .unwrap_err()
                .to_string();
            assert!(e.contains("--user") && e.contains(says), "{bad}: {e}");
        }
        let (_t, empty) = root_with("", "", &[]);
        assert_eq!(
            user(Some("root"), None, Some(BoxRoot { tree: &empty, ids: crate::ids::BoxIds::block(0) })).unwrap().uid,
            0,
            "root needs no /etc/passwd"
        );
    }

    #[test]
    fn commands_follow_entrypoint_and_cmd() {
        let c = Config { entrypoint: s(&["/bin/app", "-v"]), cmd: s(&["serve"]), ..Config::default() };
        assert_eq!(command(Some(&c), &[]).unwrap(), s(&["/bin/app", "-v", "serve"]));
        assert_eq!(command(Some(&c), &s(&["check"])).unwrap(), s(&["/bin/app", "-v", "check"]));
        let only_cmd = Config { cmd: s(&["sh"]), ..Config::default() };
        assert_eq!(command(Some(&only_cmd), &s(&["ls"])).unwrap(), s(&["ls"]));
        assert!(command(Some(&Config::default()), &[]).unwrap_err().to_string().contains("no Entrypoint or Cmd"));
        assert!(command(None, &[]).unwrap_err().to_string().contains("give one after --"));
    }

    #[test]
    fn home_and_env_rules() {
        let img = Config { env: s(&["PATH=/img", "HOME=/root", "TMPDIR=/x", "A=1"]), ..Config::default() };
        let default_user = User { uid: 1000, gid: 1000, groups: vec![], home: None, from_image: false };
        let e = env(Some(&img), true, &default_user, &s(&["A=2"]));
        assert_eq!(
            e,
            s(&["PATH=/img", "HOME=/work", "TMPDIR=/tmp", "LANG=C.UTF-8", "PIP_BREAK_SYSTEM_PACKAGES=1", "A=2"])
        );
        let image_user = User { from_image: true, ..default_user.clone() };
        assert!(env(Some(&img), true, &image_user, &[]).contains(&"HOME=/root".to_string()));
        let homed = User { home: Some("/home/user".into()), ..default_user.clone() };
        assert!(env(None, true, &homed, &[]).contains(&"HOME=/home/user".to_string()));
        assert!(env(None, false, &homed, &[]).contains(&"HOME=/work".to_string()), "no image: always /work");
        assert!(env(None, true, &homed, &s(&["HOME=/mine"])).contains(&"HOME=/mine".to_string()));
    }
}
