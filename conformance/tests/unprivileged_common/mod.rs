//! The throw-away ordinary user of the unprivileged sandbox tests (`sandbox_unprivileged.rs`,
//! `sandbox_unprivileged_image.rs`): made with `useradd` (which adds its `/etc/subuid` and
//! `/etc/subgid` ranges; `userdel` removes them), given a copy of the binary, every call through
//! `setpriv` with a clean environment. The guard kills every process of the user's ids and
//! removes its files and the user, even when the test panics.
//!
//! Two hosts, one set of tests ([`Host`]): on a host with no delegated cgroup v2 subtree (this
//! project's cgroup v1 machines) the user gets its own `XDG_RUNTIME_DIR` and a box's limits are
//! refused or best-effort; where systemd is PID 1 on cgroup v2 (the VM runner's `--systemd`
//! guest, through `conformance/run-systemd-tests`) the user gets lingering (logind starts its
//! `user@UID.service`, its bus and `/run/user/UID`, without a login) and every call runs in a
//! scope of its user manager (`systemd-run --user --scope`), inside the subtree systemd
//! delegates to it, where limits are enforced. The guard then also turns lingering off and stops
//! the user's manager.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyrun_conformance::runtime_bin;

/// Where an ordinary user's box gets its limits on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// No cgroup v2 (a v1 or hybrid host): limits refused, or rlimits with `--limits best-effort`.
    Refused,
    /// systemd is PID 1 on cgroup v2: limits enforced in the user's delegated subtree.
    Delegated,
}

impl Host {
    /// This host, or `None` (SKIP printed) on cgroup v2 without systemd, where neither holds;
    /// fails there under `TINYRUN_REQUIRE_SYSTEMD=1`, as the systemd tier sets.
    pub fn here() -> Option<Host> {
        if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            return Some(Host::Refused);
        }
        if Path::new("/run/systemd/system").is_dir() {
            return Some(Host::Delegated);
        }
        let why = "cgroup v2 without systemd as PID 1: no user manager to delegate a subtree";
        assert!(std::env::var("TINYRUN_REQUIRE_SYSTEMD").as_deref() != Ok("1"), "TINYRUN_REQUIRE_SYSTEMD=1, but {why}");
        eprintln!("SKIP: {why}; run conformance/run-systemd-tests");
        None
    }

    /// What a result's `limits` says for a box of `--limits best-effort` here.
    pub fn best_effort_word(self) -> &'static str {
        match self {
            Host::Refused => "best-effort",
            Host::Delegated => "enforced",
        }
    }
}

/// A throw-away user and its files; all removed on drop.
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub subuid: (u32, u32),
    pub work: PathBuf,
    pub bin: PathBuf,
    pub xdg: PathBuf,
    pub host: Host,
}

pub fn quiet(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

fn subid(file: &str, name: &str) -> Option<(u32, u32)> {
    fs::read_to_string(file).unwrap_or_default().lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() == 3 && f[0] == name).then(|| Some((f[1].parse().ok()?, f[2].parse().ok()?)))?
    })
}

pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

impl User {
    /// A new user on `host`; with `ranges` false its subordinate ranges are taken away again.
    pub fn new(host: Host, tag: &str, ranges: bool) -> User {
        let name = format!("tsu{}{tag}", std::process::id());
        let made = (0..50).any(|_| {
            let ok = quiet(Command::new("useradd").args(["--no-create-home", "--shell", "/bin/false", "-U", &name]));
            if !ok {
                std::thread::sleep(Duration::from_millis(100));
            }
            ok
        });
        assert!(made, "useradd {name}");
        let pw = nix::unistd::User::from_name(&name).unwrap().expect("the new user");
        let work = tempfile::Builder::new().prefix("tinyrun-sbx-user-").tempdir().unwrap().keep();
        let uid = pw.uid.as_raw();
        let xdg = match host {
            Host::Refused => work.join("xdg"),
            Host::Delegated => PathBuf::from(format!("/run/user/{uid}")),
        };
        // From here on the guard undoes whatever was made.
        let mut u = User {
            name: name.clone(),
            uid,
            gid: pw.gid.as_raw(),
            subuid: (0, 0),
            bin: work.join("tinyrun"),
            xdg,
            work,
            host,
        };
        let sub = subid("/etc/subuid", &name).expect("useradd gave a subordinate range");
        if ranges {
            u.subuid = sub;
        } else {
            let range = format!("{}-{}", sub.0, sub.0 + sub.1 - 1);
            let gsub = subid("/etc/subgid", &name).expect("a subgid range");
            let grange = format!("{}-{}", gsub.0, gsub.0 + gsub.1 - 1);
            assert!(quiet(Command::new("usermod").args(["--del-subuids", &range, "--del-subgids", &grange, &name])));
            assert!(subid("/etc/subuid", &name).is_none(), "subuid range still there");
        }
        fs::set_permissions(&u.work, fs::Permissions::from_mode(0o755)).unwrap();
        fs::copy(runtime_bin(), &u.bin).expect("copy the binary");
        fs::set_permissions(&u.bin, fs::Permissions::from_mode(0o755)).unwrap();
        match host {
            Host::Refused => {
                fs::create_dir(&u.xdg).unwrap();
                fs::set_permissions(&u.xdg, fs::Permissions::from_mode(0o700)).unwrap();
                nix::unistd::chown(&u.xdg, Some(pw.uid), Some(pw.gid)).unwrap();
            }
            Host::Delegated => {
                assert!(quiet(Command::new("loginctl").args(["enable-linger", &name])), "enable-linger {name}");
                let bus = u.xdg.join("bus");
                let t = Instant::now();
                while !bus.exists() {
                    assert!(
                        t.elapsed() < Duration::from_secs(90),
                        "{} did not appear after enable-linger",
                        bus.display()
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        u
    }

    /// `tinyrun sandbox ARGS` as the user with `PATH` `path`; with `scope`, in a scope of its
    /// user manager where there is one.
    pub fn command(&self, path: &str, scope: bool, args: &[&str]) -> Command {
        let mut c = Command::new("/usr/bin/setpriv");
        c.args(["--reuid", &self.uid.to_string(), "--regid", &self.gid.to_string(), "--clear-groups", "--"]);
        if scope && self.host == Host::Delegated {
            c.args(["/usr/bin/systemd-run", "--user", "--scope", "--quiet", "--"]);
        }
        c.arg(&self.bin)
            .arg("sandbox")
            .args(args)
            .current_dir(&self.work)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &self.work)
            .env("USER", &self.name)
            .env("XDG_RUNTIME_DIR", &self.xdg)
            .stdin(Stdio::null());
        if self.host == Host::Delegated {
            c.env("DBUS_SESSION_BUS_ADDRESS", format!("unix:path={}/bus", self.xdg.display()));
        }
        c
    }

    /// `tinyrun sandbox ARGS` as the user: (success, stdout, stderr).
    pub fn sandbox(&self, args: &[&str]) -> (bool, String, String) {
        self.output(self.command(PATH, true, args))
    }

    pub fn output(&self, mut c: Command) -> (bool, String, String) {
        let o = c.output().expect("run tinyrun");
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
    }

    /// `sandbox run --json ARGS`, parsed.
    pub fn run_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["run", "--json"];
        all.extend_from_slice(args);
        parse(self.sandbox(&all))
    }

    pub fn root(&self) -> PathBuf {
        self.xdg.join("tinyrun")
    }

    /// The pid of the holder of the user's namespaces, from the record it leaves in the root.
    pub fn holder(&self) -> Option<i32> {
        let text = fs::read_to_string(self.root().join("sandbox-userns")).ok()?;
        text.split_whitespace().next()?.parse().ok()
    }

    /// Mount points at or below `dir` in the mount namespace the user's commands share, read
    /// through the mountinfo of its holder `holder`; `None` if that can't be read (the holder is
    /// gone).
    pub fn mounts_under(holder: i32, dir: &Path) -> Option<Vec<String>> {
        let info = fs::read_to_string(format!("/proc/{holder}/mountinfo")).ok()?;
        let dir = dir.to_str()?;
        let points = info.lines().filter_map(|l| l.split(' ').nth(4)).map(|p| p.replace("\\040", " "));
        Some(points.filter(|p| p == dir || p.starts_with(&format!("{dir}/"))).collect())
    }

    /// The user's delegated subtree (a cgroupfs dir) where systemd runs its manager.
    pub fn subtree(&self) -> PathBuf {
        PathBuf::from(format!("/sys/fs/cgroup/user.slice/user-{0}.slice/user@{0}.service", self.uid))
    }

    /// Processes whose real uid is the user's or one of its subordinate ids, less its user
    /// manager's own (its `init.scope` and services such as `dbus.service`).
    pub fn processes(&self) -> Vec<i32> {
        self.all_processes()
            .into_iter()
            .filter(|p| {
                let cg = fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap_or_default();
                let cg = cg.trim();
                self.host == Host::Refused || !(cg.ends_with("/init.scope") || cg.ends_with(".service"))
            })
            .collect()
    }

    fn all_processes(&self) -> Vec<i32> {
        let mine = |uid: u32| uid == self.uid || (uid >= self.subuid.0 && uid < self.subuid.0 + self.subuid.1);
        let live = |p: &i32| {
            let s = fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
            let zombie = s.lines().any(|l| l.starts_with("State:") && (l.contains("Z (") || l.contains("X (")));
            let uid = s.lines().find_map(|l| l.strip_prefix("Uid:")?.split_whitespace().next()?.parse().ok());
            !zombie && uid.is_some_and(mine)
        };
        let pids = fs::read_dir("/proc").map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()));
        pids.map(|p| p.filter(live).collect()).unwrap_or_default()
    }

    /// Box cgroups in the user's subtree (none where it has none).
    pub fn box_cgroups(&self) -> Vec<PathBuf> {
        let parent = self.subtree().join("tinyrun-sandbox");
        let dirs =
            fs::read_dir(parent).map(|d| d.filter_map(|e| Some(e.ok()?.path())).filter(|p| p.is_dir()).collect());
        dirs.unwrap_or_default()
    }

    /// Boxes, records, box cgroups and processes left: the user's holder of its namespace may
    /// take a second to go.
    pub fn assert_nothing_left(&self) {
        let bundles = self.root().join("sandbox-bundles");
        let boxes = || fs::read_dir(&bundles).map(|d| d.count()).unwrap_or(0);
        assert_eq!(boxes(), 0, "bundles left in {}", bundles.display());
        assert_eq!(self.box_cgroups(), Vec::<PathBuf>::new(), "box cgroups left");
        for _ in 0..60 {
            if self.processes().is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("processes left: {:?}", self.processes());
    }
}

impl Drop for User {
    fn drop(&mut self) {
        if self.host == Host::Delegated {
            // Stopping the manager ends whatever runs in its subtree; logind removes /run/user/UID.
            let _ = quiet(Command::new("loginctl").args(["disable-linger", &self.name]));
            let units = [format!("user@{}.service", self.uid), format!("user-runtime-dir@{}.service", self.uid)];
            let _ = quiet(Command::new("systemctl").arg("stop").args(&units));
        }
        tinyrun_conformance::kill_until_gone(|| self.all_processes());
        let _ = fs::remove_dir_all(&self.work);
        tinyrun_conformance::userdel(&self.name);
    }
}

/// A `--json` result from `(ok, stdout, stderr)`.
pub fn parse((_, out, err): (bool, String, String)) -> Value {
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: stdout {out:?} stderr {err:?}"))
}

pub fn text(v: &Value, stream: &str) -> String {
    v[stream]["text"].as_str().unwrap_or_default().to_string()
}
