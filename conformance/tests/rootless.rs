//! Rootless containers: an unprivileged user runs the runtime (`TINYRUN_BIN`, or runc as the
//! reference), as runc's rootless mode is used.
//!
//! Each test makes a throw-away user with `useradd` (which gives it a range in `/etc/subuid` and
//! `/etc/subgid`), a work dir the user owns holding a copy of the runtime binary (0755: the
//! user cannot read root's build tree), a copy of the shared rootfs owned by the user and its
//! `XDG_RUNTIME_DIR`; every runtime call runs as that user through `setpriv`, with a clean
//! environment. The guard kills every process of the user's ids, removes the cgroups, the work
//! dir and the user (`userdel`), even when the test panics.
//!
//! * `spec --rootless`, then `run -d`, `state`, `exec`, `ps`, `kill`, `delete` on that bundle;
//!   state under `$XDG_RUNTIME_DIR/<runtime>`.
//! * The caller's id plus its subordinate ranges, mapped through `newuidmap`/`newgidmap`: a
//!   file chowned inside lands on the host as the mapped id.
//! * A mapping of host ids the user does not own is refused, and nothing is left behind; so
//!   is an id-mapped bind (`idmap`), which needs a privileged runtime.
//! * Limits where the user may not make a cgroup (cgroup v1, and v2 not delegated): refused
//!   with runc's message (v1: `cannot set pids limit: container could not join or create
//!   cgroup`; v2: `rootless needs no limits + no cgrouppath ...`); none, and the container
//!   runs in the caller's cgroups.
//! * cgroup v2 with a subtree delegated to the user (a cgroup it owns, as systemd's
//!   `Delegate=yes` gives): the container gets a cgroup there with its limits (runs only on a
//!   v2 host: `conformance/run-v2-tests` runs this file in the v2 guest too).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tinyrun_conformance::{require_root, runtime_bin, shared_rootfs, skip};

/// A throw-away user with its work dir; everything is removed on drop.
struct User {
    name: String,
    uid: u32,
    gid: u32,
    /// (start, count) from /etc/subuid and /etc/subgid.
    subuid: (u32, u32),
    subgid: (u32, u32),
    work: PathBuf,
    bin: PathBuf,
    xdg: PathBuf,
    /// The runtime's name ("tinyrun" or "runc"): its state dir under XDG_RUNTIME_DIR.
    rt_name: String,
    ids: Vec<String>,
    cgroups: Vec<PathBuf>,
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ok={} stdout={:?} stderr={:?}", self.ok, self.stdout, self.stderr)
    }
}

fn subid(file: &str, name: &str) -> (u32, u32) {
    let text = fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() != 3 || f[0] != name {
                return None;
            }
            Some((f[1].parse().ok()?, f[2].parse().ok()?))
        })
        .next()
        .unwrap_or((0, 0))
}

fn cmd_ok(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

impl User {
    /// A new user `trl<pid><tag>` and its copy of the runtime and rootfs; None (after printing
    /// SKIP) when the host can't run rootless containers.
    fn new(tag: &str) -> Option<User> {
        for tool in ["useradd", "userdel", "newuidmap", "newgidmap", "setpriv"] {
            let found = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"].iter().any(|d| Path::new(d).join(tool).exists());
            assert!(found, "{tool} not found: conformance/install-deps installs uidmap (newuidmap, newgidmap)");
        }
        let name = format!("trl{}{tag}", std::process::id());
        // Parallel tests may contend for /etc/passwd's lock: retry.
        let mut made = false;
        for _ in 0..50 {
            if cmd_ok(Command::new("useradd").args([
                "--no-create-home",
                "--shell",
                "/bin/false",
                "--user-group",
                &name,
            ])) {
                made = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(made, "useradd {name} failed");
        let pw = nix::unistd::User::from_name(&name).ok().flatten().expect("the new user");
        let mut u = User {
            name: name.clone(),
            uid: pw.uid.as_raw(),
            gid: pw.gid.as_raw(),
            subuid: subid("/etc/subuid", &name),
            subgid: subid("/etc/subgid", &name),
            work: PathBuf::new(),
            bin: PathBuf::new(),
            xdg: PathBuf::new(),
            rt_name: String::new(),
            ids: Vec::new(),
            cgroups: Vec::new(),
        };
        assert!(u.subuid.1 >= 65536 && u.subgid.1 >= 65536, "useradd gave {name} no subordinate ids");
        let work = tempfile::Builder::new().prefix("tinyrun-rootless-").tempdir().expect("tempdir").keep();
        u.work = work.clone();
        fs::set_permissions(&work, fs::Permissions::from_mode(0o755)).unwrap();
        let src = runtime_bin();
        let rt_name = src.file_name().unwrap().to_string_lossy().into_owned();
        u.rt_name = rt_name.clone();
        u.bin = work.join(&rt_name);
        fs::copy(&src, &u.bin).expect("copy the runtime binary");
        fs::set_permissions(&u.bin, fs::Permissions::from_mode(0o755)).unwrap();
        u.xdg = work.join("xdg");
        fs::create_dir(&u.xdg).unwrap();
        fs::set_permissions(&u.xdg, fs::Permissions::from_mode(0o700)).unwrap();
        let chown = |p: &Path| nix::unistd::chown(p, Some(pw.uid), Some(pw.gid)).unwrap();
        chown(&u.xdg);
        chown(&work);
        Some(u)
    }

    /// A bundle the user owns: `spec --rootless` run by the user, a private copy of the rootfs.
    fn bundle(&self, name: &str) -> PathBuf {
        let b = self.work.join(name);
        fs::create_dir(&b).unwrap();
        let st = Command::new("cp").arg("-a").arg(shared_rootfs()).arg(b.join("rootfs")).status().unwrap();
        assert!(st.success(), "copy the rootfs");
        let st = Command::new("chown").args(["-R", &format!("{}:{}", self.uid, self.gid)]).arg(&b).status().unwrap();
        assert!(st.success(), "chown the bundle");
        let o = self.run_in(&b, &["spec", "--rootless"]);
        assert!(o.ok, "spec --rootless: {o}");
        self.edit(&b, |c| {
            c["process"]["terminal"] = json!(false);
            c["root"]["readonly"] = json!(false);
        });
        b
    }

    fn edit(&self, bundle: &Path, f: impl FnOnce(&mut Value)) {
        let p = bundle.join("config.json");
        let mut c: Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        f(&mut c);
        fs::write(&p, serde_json::to_vec_pretty(&c).unwrap()).unwrap();
    }

    /// The runtime as the user, in `dir`, with a clean environment.
    fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", &self.uid.to_string(), "--regid", &self.gid.to_string(), "--clear-groups", "--"])
            .arg(&self.bin)
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", &self.work)
            .env("USER", &self.name)
            .env("LOGNAME", &self.name)
            .env("XDG_RUNTIME_DIR", &self.xdg)
            .stdin(Stdio::null());
        c
    }

    /// Runs `c` with its output in files: a detached container keeps pipes open.
    fn output(&self, mut c: Command) -> Out {
        let out = tempfile::tempfile().unwrap();
        let err = tempfile::tempfile().unwrap();
        let status =
            c.stdout(out.try_clone().unwrap()).stderr(err.try_clone().unwrap()).status().expect("run the runtime");
        let read = |mut f: fs::File| {
            use std::io::{Read, Seek};
            let mut s = String::new();
            f.seek(std::io::SeekFrom::Start(0)).unwrap();
            f.read_to_string(&mut s).unwrap();
            s
        };
        Out { ok: status.success(), stdout: read(out), stderr: read(err) }
    }

    fn run_in(&self, dir: &Path, args: &[&str]) -> Out {
        self.output(self.command(dir, args))
    }

    fn id(&mut self, s: &str) -> String {
        let id = format!("{}-{s}", self.name);
        self.ids.push(id.clone());
        id
    }

    fn state_dir(&self) -> PathBuf {
        self.xdg.join(&self.rt_name)
    }

    fn status(&self, id: &str) -> String {
        let o = self.run_in(&self.work, &["state", id]);
        serde_json::from_str::<Value>(&o.stdout)
            .ok()
            .and_then(|v| v["status"].as_str().map(str::to_string))
            .unwrap_or_default()
    }

    fn wait_status(&self, id: &str, want: &str) {
        let t = Instant::now();
        while self.status(id) != want {
            assert!(t.elapsed() < Duration::from_secs(10), "{id}: status {:?}, want {want}", self.status(id));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn is_runc(&self) -> bool {
        self.rt_name == "runc"
    }

    /// Pids whose real uid is the user's or in its subordinate range.
    fn processes(&self) -> Vec<i32> {
        let mine = |uid: u32| uid == self.uid || (uid >= self.subuid.0 && uid < self.subuid.0 + self.subuid.1);
        fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                    .filter(|p| {
                        let s = fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
                        // A zombie is gone but for its parent's wait (pid 1 may be slow to reap).
                        let zombie =
                            s.lines().any(|l| l.starts_with("State:") && (l.contains("Z (") || l.contains("X (")));
                        !zombie
                            && s.lines()
                                .find_map(|l| l.strip_prefix("Uid:"))
                                .and_then(|l| l.split_whitespace().next()?.parse::<u32>().ok())
                                .is_some_and(mine)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for User {
    fn drop(&mut self) {
        for id in self.ids.clone() {
            let _ = self.run_in(&self.work, &["delete", "--force", &id]);
        }
        tinyrun_conformance::kill_until_gone(|| self.processes());
        for cg in self.cgroups.iter().rev() {
            tinyrun_conformance::rmdir_tree(cg);
        }
        if !self.work.as_os_str().is_empty() {
            let _ = fs::remove_dir_all(&self.work);
        }
        tinyrun_conformance::userdel(&self.name);
    }
}

fn cgroup_v2() -> bool {
    nix::sys::statfs::statfs("/sys/fs/cgroup")
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
}

#[test]
fn lifecycle_as_an_unprivileged_user() {
    require_root!();
    let Some(mut u) = User::new("a") else { return };
    let b = u.bundle("b");
    u.edit(&b, |c| c["process"]["args"] = json!(["sleep", "1000"]));
    let id = u.id("c1");
    let o = u.run_in(&b, &["run", "-d", &id]);
    assert!(o.ok, "run -d: {o}");
    assert!(u.state_dir().join(&id).is_dir(), "no state under {}", u.state_dir().display());
    assert_eq!(u.status(&id), "running");
    let state: Value = serde_json::from_str(&u.run_in(&b, &["state", &id]).stdout).unwrap();
    let pid = state["pid"].as_i64().unwrap();
    let meta = fs::metadata(format!("/proc/{pid}")).unwrap();
    assert_eq!(meta.uid(), u.uid, "init runs as the caller on the host");
    let o = u.run_in(&b, &["exec", &id, "sh", "-c", "id -u; id -g; echo pid1=$(cat /proc/1/comm)"]);
    assert!(o.ok, "exec: {o}");
    assert_eq!(o.stdout, "0\n0\npid1=sleep\n", "exec runs as root of the user namespace, in the pid namespace");
    let o = u.run_in(&b, &["exec", &id, "sh", "-c", "exit 7"]);
    assert!(!o.ok, "exec's status is the program's: {o}");
    let o = u.run_in(&b, &["exec", "-d", &id, "sleep", "999"]);
    assert!(o.ok, "exec -d: {o}");
    let o = u.run_in(&b, &["ps", &id]);
    if u.is_runc() {
        // runc 1.1.5 lists a container's processes from its cgroup, and this one has none.
        eprintln!("runc: ps without a cgroup: {o}");
    } else {
        assert!(o.ok && o.stdout.contains("sleep"), "ps: {o}");
    }
    let o = u.run_in(&b, &["list", "-q"]);
    assert!(o.ok && o.stdout.lines().any(|l| l == id), "list: {o}");
    let o = u.run_in(&b, &["kill", &id, "KILL"]);
    assert!(o.ok, "kill: {o}");
    u.wait_status(&id, "stopped");
    let o = u.run_in(&b, &["delete", &id]);
    assert!(o.ok, "delete: {o}");
    assert!(!u.state_dir().join(&id).exists(), "state left after delete");
    assert!(u.processes().is_empty(), "processes left: {:?}", u.processes());
}

#[test]
fn subordinate_ids_are_mapped_through_newuidmap() {
    require_root!();
    let Some(mut u) = User::new("m") else { return };
    let b = u.bundle("b");
    let (su, sg) = (u.subuid, u.subgid);
    let (uid, gid) = (u.uid, u.gid);
    u.edit(&b, |c| {
        c["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": uid, "size": 1},
                                           {"containerID": 1, "hostID": su.0, "size": 65536}]);
        c["linux"]["gidMappings"] = json!([{"containerID": 0, "hostID": gid, "size": 1},
                                           {"containerID": 1, "hostID": sg.0, "size": 65536}]);
        let caps = json!(["CAP_CHOWN", "CAP_SETUID", "CAP_SETGID", "CAP_DAC_OVERRIDE", "CAP_FOWNER"]);
        for set in ["bounding", "effective", "permitted"] {
            c["process"]["capabilities"][set] = caps.clone();
        }
        c["process"]["args"] = json!([
            "sh",
            "-c",
            "touch /tmp/mine /tmp/theirs && chown 1000:1000 /tmp/theirs && \
            cat /proc/self/uid_map /proc/self/gid_map && su -s /bin/sh tester -c 'id -u'"
        ]);
    });
    let id = u.id("m1");
    let o = u.run_in(&b, &["run", &id]);
    assert!(o.ok, "run: {o}");
    let lines: Vec<Vec<&str>> = o.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    let want_uid =
        vec![vec!["0".to_string(), uid.to_string(), "1".into()], vec!["1".into(), su.0.to_string(), "65536".into()]];
    let got: Vec<Vec<String>> = lines.iter().take(2).map(|l| l.iter().map(|s| s.to_string()).collect()).collect();
    assert_eq!(got, want_uid, "uid_map: {o}");
    assert_eq!(o.stdout.lines().last(), Some("1000"), "switching to a mapped user works: {o}");
    let mine = fs::metadata(b.join("rootfs/tmp/mine")).unwrap();
    assert_eq!((mine.uid(), mine.gid()), (uid, gid), "the container's root is the caller on the host");
    let theirs = fs::metadata(b.join("rootfs/tmp/theirs")).unwrap();
    assert_eq!((theirs.uid(), theirs.gid()), (su.0 + 999, sg.0 + 999), "container id 1000 is subuid start + 999");
    let _ = u.run_in(&b, &["delete", &id]);
}

#[test]
fn ids_the_user_does_not_own_are_refused() {
    require_root!();
    let Some(mut u) = User::new("r") else { return };
    let b = u.bundle("b");
    let uid = u.uid;
    // The range right after the user's own: someone else's (or nobody's).
    let other = u.subuid.0 + u.subuid.1;
    u.edit(&b, |c| {
        c["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": uid, "size": 1},
                                           {"containerID": 1, "hostID": other, "size": 1000}]);
        c["process"]["args"] = json!(["true"]);
    });
    let id = u.id("r1");
    let o = u.run_in(&b, &["run", &id]);
    assert!(!o.ok, "a mapping of ids the user does not own must fail: {o}");
    if !u.is_runc() {
        assert!(o.stderr.contains("linux.uidMappings") && o.stderr.contains(&other.to_string()), "{o}");
    }
    assert!(!u.state_dir().join(&id).exists(), "state left after a failed run");
    assert!(u.processes().is_empty(), "processes left: {:?}", u.processes());
    // root's id is never the caller's.
    u.edit(&b, |c| c["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": 0, "size": 1}]));
    let o = u.run_in(&b, &["run", &id]);
    assert!(!o.ok, "mapping host root must fail: {o}");
    assert!(u.processes().is_empty(), "processes left: {:?}", u.processes());
}

/// An id-mapped bind needs a runtime privileged over the source's file system: a rootless
/// one refuses it, as runc 1.2 does, naming the mount, and leaves nothing behind.
#[test]
fn idmapped_mounts_are_refused_for_a_rootless_container() {
    require_root!();
    let Some(mut u) = User::new("i") else { return };
    if u.is_runc() {
        skip!("runc 1.1.5 predates id-mapped mounts (runc 1.2): it takes idmap as file-system data");
    }
    let b = u.bundle("b");
    let src = u.work.clone();
    u.edit(&b, |c| {
        c["mounts"].as_array_mut().unwrap().push(json!({"destination": "/home", "type": "bind",
            "source": src, "options": ["rbind", "idmap"]}));
        c["process"]["args"] = json!(["true"]);
    });
    let id = u.id("i1");
    let o = u.run_in(&b, &["run", &id]);
    assert!(!o.ok, "an id-mapped bind of a rootless container must fail: {o}");
    assert!(o.stderr.contains("mounts[/home].options") && o.stderr.contains("rootless"), "{o}");
    assert!(!u.state_dir().join(&id).exists(), "state left after a failed run");
    assert!(u.processes().is_empty(), "processes left: {:?}", u.processes());
}

#[test]
fn limits_without_a_delegated_cgroup_are_refused_as_runc_does() {
    require_root!();
    let Some(mut u) = User::new("l") else { return };
    let b = u.bundle("b");
    u.edit(&b, |c| {
        c["process"]["args"] = json!(["cat", "/proc/self/cgroup"]);
        c["linux"]["resources"] = json!({"pids": {"limit": 64}});
    });
    let id = u.id("l1");
    let o = u.run_in(&b, &["run", &id]);
    assert!(!o.ok, "a pids limit without a cgroup must fail: {o}");
    let want = if cgroup_v2() {
        format!("rootless needs no limits + no cgrouppath when no permission is granted for cgroups: mkdir /sys/fs/cgroup/{id}: permission denied")
    } else {
        "cannot set pids limit: container could not join or create cgroup".into()
    };
    assert!(o.stderr.contains(&want), "want {want:?}: {o}");
    assert!(!u.state_dir().join(&id).exists(), "state left after a failed run");
    // Without limits the container runs, in the caller's cgroups (none of its own).
    u.edit(&b, |c| c["linux"]["resources"] = json!({}));
    let own = fs::read_to_string("/proc/self/cgroup").unwrap();
    let o = u.run_in(&b, &["run", &id]);
    assert!(o.ok, "run without limits: {o}");
    let _ = u.run_in(&b, &["delete", &id]);
    if !cgroup_v2() {
        // No cgroup namespace line differs from the caller's (setpriv keeps our cgroups).
        for h in ["memory", "pids"] {
            let mine = own.lines().find(|l| l.split(':').nth(1).is_some_and(|c| c.split(',').any(|c| c == h)));
            let theirs = o.stdout.lines().find(|l| l.split(':').nth(1).is_some_and(|c| c.split(',').any(|c| c == h)));
            assert!(mine.is_some() && theirs.is_some(), "{h} line: {own} / {o}");
        }
    }
    assert!(tinyrun_conformance::cgroup_dirs(&id).is_empty(), "a cgroup was made");
}

#[test]
fn a_delegated_cgroup_v2_subtree_gets_the_container_and_its_limits() {
    require_root!();
    if !cgroup_v2() {
        skip!("needs cgroup v2 (conformance/run-v2-tests runs this in a v2 guest)");
    }
    let Some(mut u) = User::new("d") else { return };
    // What systemd's Delegate=yes gives a user: a cgroup it owns, with controllers enabled for
    // its children, and the user's processes in a leaf below it.
    let base = PathBuf::from("/sys/fs/cgroup/tinyrun-test");
    let _ = fs::create_dir(&base);
    let _ = fs::write(base.join("cgroup.subtree_control"), "+pids +memory");
    let deleg = base.join(&u.name);
    fs::create_dir(&deleg).unwrap();
    u.cgroups.push(deleg.clone());
    fs::write(deleg.join("cgroup.subtree_control"), "+pids +memory").unwrap();
    let shell = deleg.join("shell");
    fs::create_dir(&shell).unwrap();
    let owner = (Some(nix::unistd::Uid::from_raw(u.uid)), Some(nix::unistd::Gid::from_raw(u.gid)));
    for p in [
        deleg.clone(),
        deleg.join("cgroup.procs"),
        deleg.join("cgroup.subtree_control"),
        shell.clone(),
        shell.join("cgroup.procs"),
    ] {
        nix::unistd::chown(&p, owner.0, owner.1).unwrap();
    }
    let b = u.bundle("b");
    u.edit(&b, |c| {
        c["process"]["args"] = json!(["sleep", "1000"]);
        c["linux"]["resources"] = json!({"pids": {"limit": 64}, "memory": {"limit": 64 << 20}});
    });
    let id = u.id("d1");
    // The runtime starts in the delegated leaf; the container goes beside it (runc: under the
    // parent of the caller's own cgroup).
    let in_shell = |args: &[&str]| {
        let mut c = u.command(&b, args);
        let procs = shell.join("cgroup.procs");
        // SAFETY: only write(2) on a path prepared before the fork.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, move || fs::write(&procs, "0"));
        }
        u.output(c)
    };
    let o = in_shell(&["run", "-d", &id]);
    assert!(o.ok, "run -d in a delegated cgroup: {o}");
    let cg = deleg.join(&id);
    assert_eq!(
        fs::read_to_string(cg.join("pids.max")).unwrap_or_default().trim(),
        "64",
        "pids.max in {}",
        cg.display()
    );
    assert_eq!(fs::read_to_string(cg.join("memory.max")).unwrap_or_default().trim(), (64u64 << 20).to_string());
    let o = in_shell(&["exec", &id, "true"]);
    assert!(o.ok, "exec: {o}");
    let o = in_shell(&["ps", &id]);
    assert!(o.ok && o.stdout.contains("sleep"), "ps: {o}");
    let o = in_shell(&["kill", &id, "KILL"]);
    assert!(o.ok, "kill: {o}");
    u.wait_status(&id, "stopped");
    let o = in_shell(&["delete", &id]);
    assert!(o.ok, "delete: {o}");
    assert!(!cg.exists(), "cgroup {} left after delete", cg.display());
}
