//! What the tests of `tinyrun sandbox serve` share: a server on a test's root and clients of it
//! (curl over the unix socket, as root or another local user, and a raw socket where curl would
//! be too polite).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tinyrun_conformance::sandbox::{wait_for, Sbx};
use tinyrun_conformance::LocalUser;

/// A server on the test's root, started as `tinyrun sandbox serve FLAGS`; stopped with SIGTERM
/// (which terminates its clients' boxes) when dropped, killed if that takes over 30 s.
pub struct Server {
    pub child: Option<Child>,
    pub sock: PathBuf,
}

impl Server {
    pub fn start(sb: &Sbx, flags: &[&str]) -> Server {
        let sock = sb.rt.root().join("sandbox.sock");
        let child = sb
            .rt
            .command(&["sandbox", "serve"])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tinyrun sandbox serve");
        let s = Server { child: Some(child), sock };
        wait_for("the server's socket", 20, || UnixStream::connect(&s.sock).is_ok());
        s
    }

    /// SIGTERM, then its exit status (within `secs`).
    pub fn term(&mut self, secs: u64) -> Option<i32> {
        let mut c = self.child.take()?;
        let pid = nix::unistd::Pid::from_raw(i32::try_from(c.id()).ok()?);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = c.try_wait() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `curl` over the socket: (HTTP status, body). `extra` goes before the URL.
    pub fn curl(&self, method: &str, path: &str, extra: &[&str]) -> (u16, String) {
        curl_as(None, &self.sock, method, path, extra)
    }

    pub fn json(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let (code, text) = self.curl(method, path, &["-H", "Content-Type: application/json", "-d", &body.to_string()]);
        (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// A box with the test's tag (so the harness finds its processes): its id.
    #[track_caller]
    pub fn create(&self, tag: &str, opts: Value) -> String {
        let mut body = opts;
        body["env"] = json!([tag]);
        let (code, v) = self.json("POST", "/v1/boxes", &body);
        assert_eq!(code, 201, "create: {v}");
        v["id"].as_str().expect("an id").to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.term(30);
    }
}

pub fn tag(sb: &Sbx) -> String {
    sb.common()[1].to_string()
}

/// curl, as root or (with `user`) as that local user through setpriv.
pub fn curl_as(
    user: Option<&LocalUser>,
    sock: &std::path::Path,
    method: &str,
    path: &str,
    extra: &[&str],
) -> (u16, String) {
    let mut c = match user {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", &u.uid.to_string(), "--regid", &u.gid.to_string(), "--clear-groups", "--", "curl"]);
            c
        }
        None => Command::new("curl"),
    };
    c.args(["-s", "-m", "60", "-o", "-", "-w", "\n%{http_code}", "--unix-socket"]).arg(sock).args(["-X", method]);
    let o = c.args(extra).arg(format!("http://api{path}")).stdin(Stdio::null()).output().expect("curl");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A raw HTTP/1.1 request on a new connection; the whole answer as text (until the server closes
/// or `secs` pass).
pub fn raw(sock: &std::path::Path, request: &[u8], secs: u64) -> String {
    let mut s = UnixStream::connect(sock).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(secs))).expect("timeout");
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}
