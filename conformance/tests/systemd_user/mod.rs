//! The user-instance driver: a rootless caller's `--systemd-cgroup` container is a unit of the
//! caller's own systemd (`systemd --user`), reached on its session bus at `$XDG_RUNTIME_DIR/bus`,
//! as runc's `--systemd-cgroup` does rootless. Its cgroup sits below the user manager's
//! (`/user.slice/user-UID.slice/user@UID.service/...`), an empty slice is `user.slice`, and
//! `delete` leaves neither unit nor cgroup.
//!
//! A throw-away user with lingering (logind then starts its `user@UID.service`, and with it the
//! user's bus, without a login) runs the runtime through `setpriv` with a clean environment. The
//! guard deletes what is left, stops the user's manager, turns lingering off and removes the
//! user, even when the test fails.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tinyrun_conformance::{require_root, runtime_bin, shared_rootfs, skip};

struct Lingering {
    name: String,
    uid: u32,
    gid: u32,
    /// A work dir the user may read: the runtime's copy and the bundle.
    work: PathBuf,
    bin: PathBuf,
    ids: Vec<String>,
}

fn quiet(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

impl Lingering {
    fn new() -> Lingering {
        let name = format!("tsd{}", std::process::id());
        let made =
            quiet(Command::new("useradd").args(["--no-create-home", "--shell", "/bin/false", "--user-group", &name]));
        assert!(made, "useradd {name}");
        let pw = nix::unistd::User::from_name(&name).ok().flatten().expect("the new user");
        // From here on the guard undoes whatever was made.
        let mut u = Lingering {
            name,
            uid: pw.uid.as_raw(),
            gid: pw.gid.as_raw(),
            work: PathBuf::new(),
            bin: PathBuf::new(),
            ids: Vec::new(),
        };
        u.work = tempfile::Builder::new().prefix("tinyrun-sd-user-").tempdir().expect("tempdir").keep();
        fs::set_permissions(&u.work, fs::Permissions::from_mode(0o755)).unwrap();
        let src = runtime_bin();
        u.bin = u.work.join(src.file_name().expect("runtime file name"));
        fs::copy(&src, &u.bin).expect("copy the runtime binary");
        fs::set_permissions(&u.bin, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(quiet(Command::new("loginctl").args(["enable-linger", &u.name])), "loginctl enable-linger {}", u.name);
        // The user's manager starts its bus socket (dbus-user-session) on its way up.
        let bus = u.xdg().join("bus");
        let t = Instant::now();
        while !bus.exists() {
            assert!(t.elapsed() < Duration::from_secs(90), "{} did not appear after enable-linger", bus.display());
            std::thread::sleep(Duration::from_millis(200));
        }
        u
    }

    fn xdg(&self) -> PathBuf {
        PathBuf::from(format!("/run/user/{}", self.uid))
    }

    fn is_runc(&self) -> bool {
        self.bin.file_name().is_some_and(|n| n == "runc")
    }

    /// `program args` as the user, with what a login would give it and nothing else.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", &self.uid.to_string(), "--regid", &self.gid.to_string(), "--clear-groups", "--"])
            .arg(program)
            .args(args)
            .current_dir(&self.work)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", &self.work)
            .env("USER", &self.name)
            .env("XDG_RUNTIME_DIR", self.xdg())
            .stdin(Stdio::null());
        c
    }

    /// The runtime as the user; output through files, as a detached container keeps pipes open.
    fn run(&self, args: &[&str]) -> (bool, String) {
        let out = tempfile::tempfile().unwrap();
        let status = self
            .command(&self.bin, args)
            .stdout(out.try_clone().unwrap())
            .stderr(out.try_clone().unwrap())
            .status()
            .expect("run the runtime");
        let mut text = String::new();
        use std::io::{Read, Seek};
        let mut f = out;
        f.seek(std::io::SeekFrom::Start(0)).unwrap();
        f.read_to_string(&mut text).unwrap();
        (status.success(), text)
    }

    /// `systemctl --user show UNIT -p ...` of the user's manager, as a map.
    fn show(&self, unit: &str, props: &[&str]) -> std::collections::BTreeMap<String, String> {
        let mut args = vec!["--user", "show", unit];
        for p in props {
            args.extend(["-p", p]);
        }
        let out = self.command(Path::new("systemctl"), &args).output().expect("systemctl --user show");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// A rootless bundle the user can read, from the runtime's own `spec --rootless`.
    fn bundle(&self, args: Value, cgroups_path: &str) -> PathBuf {
        let b = self.work.join("bundle");
        fs::create_dir(&b).unwrap();
        let st = Command::new("cp").arg("-a").arg(shared_rootfs()).arg(b.join("rootfs")).status().unwrap();
        assert!(st.success(), "copy the rootfs");
        let st = Command::new("chown").args(["-R", &format!("{}:{}", self.uid, self.gid)]).arg(&b).status().unwrap();
        assert!(st.success(), "chown the bundle");
        let o = self.command(&self.bin, &["spec", "--rootless"]).current_dir(&b).output().expect("spec");
        assert!(o.status.success(), "spec --rootless: {}", String::from_utf8_lossy(&o.stderr));
        let p = b.join("config.json");
        let mut c: Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        c["process"]["terminal"] = json!(false);
        c["process"]["args"] = args;
        c["root"]["readonly"] = json!(false);
        c["linux"]["cgroupsPath"] = json!(cgroups_path);
        c["linux"]["resources"] = json!({"pids": {"limit": 20}});
        fs::write(&p, serde_json::to_vec_pretty(&c).unwrap()).unwrap();
        b
    }

    fn status(&self, id: &str) -> String {
        let (_, out) = self.run(&["state", id]);
        let v: Option<Value> = out.find('{').and_then(|i| serde_json::from_str(&out[i..]).ok());
        v.and_then(|v| v["status"].as_str().map(str::to_string)).unwrap_or_default()
    }

    fn wait_status(&self, id: &str, want: &str) {
        let t = Instant::now();
        while self.status(id) != want {
            assert!(t.elapsed() < Duration::from_secs(30), "{id}: status {:?}, want {want}", self.status(id));
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        for id in self.ids.clone() {
            let _ = self.run(&["--systemd-cgroup", "delete", "--force", &id]);
        }
        // Stopping the manager ends whatever it still runs; logind then removes /run/user/UID.
        let _ = quiet(Command::new("loginctl").args(["disable-linger", &self.name]));
        let units = [format!("user@{}.service", self.uid), format!("user-runtime-dir@{}.service", self.uid)];
        let _ = quiet(Command::new("systemctl").arg("stop").args(&units));
        if !self.work.as_os_str().is_empty() {
            let _ = fs::remove_dir_all(&self.work);
        }
        tinyrun_conformance::userdel(&self.name);
    }
}

#[test]
fn a_rootless_callers_container_is_a_unit_of_its_own_systemd() {
    require_systemd!();
    let mut u = Lingering::new();
    let t = Instant::now();
    let id = format!("{}-c1", u.name);
    let b = u.bundle(json!(["sleep", "600"]), &format!(":tsd:{id}"));
    u.ids.push(id.clone());
    let unit = format!("tsd-{id}.scope");
    let path = format!("/user.slice/user-{0}.slice/user@{0}.service/user.slice/{unit}", u.uid);
    let (ok, out) = u.run(&["--systemd-cgroup", "create", "--bundle", &b.to_string_lossy(), &id]);
    assert!(ok, "create --systemd-cgroup as {}: {out}", u.name);
    let (ok, out) = u.run(&["--systemd-cgroup", "start", &id]);
    assert!(ok, "start: {out}");
    u.wait_status(&id, "running");
    let shown = u.show(&unit, &["ActiveState", "ControlGroup", "TasksMax"]);
    assert_eq!(shown.get("ActiveState").map(String::as_str), Some("active"), "the user's {unit}: {shown:?}");
    assert_eq!(shown.get("ControlGroup"), Some(&path), "{shown:?}");
    assert_eq!(shown.get("TasksMax").map(String::as_str), Some("20"), "{shown:?}");
    let cg = PathBuf::from(format!("/sys/fs/cgroup{path}"));
    assert_eq!(fs::read_to_string(cg.join("pids.max")).unwrap_or_default().trim(), "20");
    let (_, state) = u.run(&["state", &id]);
    let pid =
        state.find('{').and_then(|i| serde_json::from_str::<Value>(&state[i..]).ok()).and_then(|v| v["pid"].as_i64());
    let own = fs::read_to_string(format!("/proc/{}/cgroup", pid.expect("state.pid"))).unwrap_or_default();
    assert_eq!(own.trim(), format!("0::{path}"), "init is in the user's unit");
    let system = Command::new("systemctl").args(["show", &unit, "-p", "LoadState"]).output().expect("systemctl show");
    assert!(!String::from_utf8_lossy(&system.stdout).contains("=loaded"), "the system instance has {unit} too");
    let (ok, out) = u.run(&["--systemd-cgroup", "delete", "--force", &id]);
    assert!(ok, "delete --force: {out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while (cg.exists() || u.show(&unit, &["LoadState"]).get("LoadState").is_some_and(|s| s == "loaded"))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!cg.exists(), "{} left behind", cg.display());
    assert_ne!(u.show(&unit, &["LoadState"]).get("LoadState").map(String::as_str), Some("loaded"), "{unit} left");
    let who = if u.is_runc() { "runc" } else { "tinyrun" };
    eprintln!("TIME user_instance {who}: {} ms", t.elapsed().as_millis());
}
