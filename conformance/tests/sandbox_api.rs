//! `tinyrun sandbox serve`, the HTTP/JSON API, driven through a real client (curl over the unix
//! socket, and a raw socket where curl would be too polite): the same results as the CLI, each
//! client seeing only its own boxes, the policy refusing what is looser than it allows, the files
//! API keeping cp's rules against escapes, caps on bodies and slow clients, a load of concurrent
//! commands, a command's working directory, a vanished client's command stopped, a client's box
//! limit held against concurrent creates, the SIGTERM drain and a restart adopting the boxes it
//! finds.
//!
//! Every test prints one line `SANDBOX <name>: <what it saw>` (run with --nocapture) before it
//! asserts, and leaves nothing behind (checked with the harness's `assert_clean`).

mod sandbox_api_common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use sandbox_api_common::{curl_as, raw, tag, Server};
use serde_json::{json, Value};
use tinyrun_conformance::sandbox::{saw, wait_for, Sbx};
use tinyrun_conformance::{require_root, LocalUser};

/// Results, files, streams, lifetimes and pools: what the CLI gives, over HTTP.
#[test]
fn the_api_runs_commands_and_moves_files() {
    require_root!();
    let sb = Sbx::new("sbx_api_basics");
    let tg = tag(&sb);
    let srv = Server::start(&sb, &[]);
    let (code, health) = srv.json("GET", "/v1/health", &Value::Null);
    let id = srv.create(&tg, json!({"type": "nano"}));
    let (c1, res) = srv.json(
        "POST",
        &format!("/v1/boxes/{id}/commands"),
        &json!({"command": ["sh", "-c", "cat; echo err >&2; exit 3"], "stdin": "in"}),
    );
    let (_, stream) = srv.curl(
        "POST",
        &format!("/v1/boxes/{id}/commands"),
        &["-H", "Accept: application/x-ndjson", "-d", r#"{"command":["sh","-c","echo a; sleep 0.2; echo b >&2"]}"#],
    );
    let (_, sse) = srv.curl(
        "POST",
        &format!("/v1/boxes/{id}/commands"),
        &["-H", "Accept: text/event-stream", "-d", r#"{"command":["echo","s"]}"#],
    );
    let (put, _) = srv.curl("PUT", &format!("/v1/boxes/{id}/files?path=/work/dir/f.txt"), &["--data-binary", "hello"]);
    let (_, got) = srv.curl("GET", &format!("/v1/boxes/{id}/files?path=/work/dir/f.txt"), &[]);
    let (_, listed) = srv.json("GET", &format!("/v1/boxes/{id}/files/list?path=/work/dir"), &Value::Null);
    let tar = sb.rt.work().join("up.tar");
    let src = sb.rt.work().join("up");
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("sub/g"), "tarred").expect("write");
    assert!(Command::new("tar").arg("-C").arg(&src).arg("-cf").arg(&tar).arg(".").status().expect("tar").success());
    let (put_tar, _) = srv.curl(
        "PUT",
        &format!("/v1/boxes/{id}/archive?path=/work/t"),
        &["--data-binary", &format!("@{}", tar.display())],
    );
    let (_, g) = srv.json("POST", &format!("/v1/boxes/{id}/commands"), &json!({"command": ["cat", "/work/t/sub/g"]}));
    let (life, l) = srv.json("POST", &format!("/v1/boxes/{id}/lifetime"), &json!({"lifetime": "2m"}));
    let (_, metrics) = srv.curl("GET", "/metrics", &[]);
    let (del, _) = srv.curl("DELETE", &format!("/v1/boxes/{id}"), &[]);
    let (gone, _) = srv.curl("GET", &format!("/v1/boxes/{id}"), &[]);
    let (run, r) =
        srv.json("POST", "/v1/run", &json!({"command": ["echo", "once"], "type": "nano", "env": [tag(&sb)]}));
    saw(sb.name, format!("health {code} {health}; exec {c1} {res}; stream {stream:?}; put {put} get {got:?}; list {listed}; tar {put_tar} {g}; lifetime {life} {l}; delete {del} then {gone}; run {run} {r}"));
    assert_eq!((code, health["status"].as_str()), (200, Some("ok")));
    assert_eq!((c1, res["schema_version"].as_u64(), res["exit_code"].as_i64()), (200, Some(2), Some(3)), "{res}");
    assert_eq!((res["stdout"]["text"].as_str(), res["stderr"]["text"].as_str()), (Some("in"), Some("err\n")));
    let events: Vec<Value> = stream.lines().map(|l| serde_json::from_str(l).expect("an NDJSON line")).collect();
    assert_eq!(
        events.first().map(|e| (e["type"].clone(), e["data"].clone())),
        Some((json!("stdout"), json!("a\n"))),
        "{stream}"
    );
    assert!(events.iter().any(|e| e["type"] == "stderr" && e["data"] == "b\n"), "{stream}");
    assert_eq!(events.last().map(|e| e["result"]["exit_code"].clone()), Some(json!(0)), "{stream}");
    assert!(sse.contains("event: stdout\ndata: ") && sse.contains("event: exit\n"), "{sse}");
    assert_eq!((put, got.as_str()), (204, "hello"));
    assert_eq!(listed["entries"][0]["name"], "f.txt", "{listed}");
    assert_eq!((put_tar, g["stdout"]["text"].as_str()), (204, Some("tarred")), "{g}");
    assert!(life == 200 && l["expires_at"].is_string(), "{l}");
    assert!(
        metrics.contains("tinyrun_api_commands_total ") && metrics.contains("tinyrun_api_box_start_seconds_bucket")
    );
    assert_eq!((del, gone), (202, 404));
    assert_eq!((run, r["stdout"]["text"].as_str()), (200, Some("once\n")), "{r}");
    drop(srv);
    sb.assert_clean("the API's boxes");
}

/// The default policy allows the sandbox's defaults only: each loosening, host path or limit above
/// its cap is refused with 403 naming the field, and no box is made.
#[test]
fn the_policy_refuses_what_is_looser() {
    require_root!();
    let sb = Sbx::new("sbx_api_policy");
    let srv = Server::start(&sb, &[]);
    let mut seen = Vec::new();
    for (body, field) in [
        (json!({"no_seccomp": true}), "no_seccomp"),
        (json!({"writable_root": true}), "writable_root"),
        (json!({"cgroup_parent": "/"}), "cgroup_parent"),
        (json!({"rootfs": "/"}), "rootfs"),
        (json!({"copy_in": ["/etc/shadow:/work/shadow"]}), "copy_in"),
        (json!({"memory": "4G"}), "memory"),
        (json!({"type": "large"}), "type"),
        (json!({"network": "egress", "allow_host": ["example.com"]}), "network"),
        (json!({"lifetime": "1d"}), "lifetime"),
    ] {
        let (code, v) = srv.json("POST", "/v1/boxes", &body);
        seen.push(format!("{body} -> {code} {}", v["field"]));
        assert_eq!(
            (code, v["field"].as_str(), v["code"].as_str()),
            (403, Some(field), Some("forbidden")),
            "{body}: {v}"
        );
        assert!(v["error"].as_str().is_some_and(|e| e.contains(field)), "{v}");
    }
    let (code, v) = srv.json("POST", "/v1/run", &json!({"command": ["true"], "no_seccomp": true}));
    saw(sb.name, format!("{seen:?}; run {code} {v}"));
    assert_eq!((code, v["field"].as_str()), (403, Some("no_seccomp")));
    assert!(sb.list().is_empty(), "a refused request made a box");
    drop(srv);
    sb.assert_clean("refused requests");
}

/// Another local user (its own uid, allowed on the socket by --group) neither sees nor touches
/// root's box: 404 on each route, an empty list; its own box is its own, and root sees both.
#[test]
fn a_client_sees_only_its_own_boxes() {
    require_root!();
    let sb = Sbx::new("sbx_api_owner");
    let tg = tag(&sb);
    let user = LocalUser::new("api");
    let srv = Server::start(&sb, &["--group", &user.name]);
    let mine = srv.create(&tg, json!({"type": "nano"}));
    let as_user = |m: &str, p: &str, extra: &[&str]| curl_as(Some(&user), &srv.sock, m, p, extra);
    let (get, _) = as_user("GET", &format!("/v1/boxes/{mine}"), &[]);
    let (exec, _) = as_user("POST", &format!("/v1/boxes/{mine}/commands"), &["-d", r#"{"command":["true"]}"#]);
    let (file, _) = as_user("GET", &format!("/v1/boxes/{mine}/files?path=/etc/hostname"), &[]);
    let (del, _) = as_user("DELETE", &format!("/v1/boxes/{mine}"), &[]);
    let (_, list) = as_user("GET", "/v1/boxes", &[]);
    let body = json!({"type": "nano", "env": [tag(&sb)]}).to_string();
    let (made, theirs) = as_user("POST", "/v1/boxes", &["-d", &body]);
    let theirs: Value = serde_json::from_str(&theirs).unwrap_or_default();
    let (_, root_list) = srv.json("GET", "/v1/boxes", &Value::Null);
    let (still, _) = srv.curl("GET", &format!("/v1/boxes/{mine}"), &[]);
    saw(sb.name, format!("user: get {get}, exec {exec}, file {file}, delete {del}, list {list}, made {made} {theirs}; root sees {root_list}"));
    assert_eq!((get, exec, file, del), (404, 404, 404, 404));
    assert_eq!(serde_json::from_str::<Value>(&list).unwrap_or_default()["boxes"], json!([]), "{list}");
    assert_eq!((made, theirs["owner"].clone()), (201, json!(format!("uid:{}", user.uid))));
    let ids: Vec<&str> = root_list["boxes"].as_array().into_iter().flatten().filter_map(|b| b["id"].as_str()).collect();
    assert!(ids.contains(&mine.as_str()) && ids.contains(&theirs["id"].as_str().unwrap_or("-")), "{root_list}");
    assert_eq!(still, 200);
    drop(srv);
    for id in sb.list() {
        sb.quiet(&["sandbox", "terminate", &id.0]);
    }
    sb.assert_clean("two clients' boxes");
}

/// The files API has cp's rules: `..` is resolved inside the box, a symlink the box made to
/// /etc/shadow is not followed out to the host, a tar entry leading out is refused.
#[test]
fn the_files_api_does_not_escape() {
    require_root!();
    let sb = Sbx::new("sbx_api_escape");
    let tg = tag(&sb);
    let srv = Server::start(&sb, &[]);
    let id = srv.create(&tg, json!({"type": "nano"}));
    let shadow = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    let (_, _) = srv.json(
        "POST",
        &format!("/v1/boxes/{id}/commands"),
        &json!({"command": ["sh", "-c", "ln -s /etc/shadow /work/s; mkdir /work/d; ln -s /etc/shadow /work/d/s"]}),
    );
    let (up, up_body) = srv.curl("GET", &format!("/v1/boxes/{id}/files?path=/work/../../../etc/shadow"), &[]);
    let (link, link_body) = srv.curl("GET", &format!("/v1/boxes/{id}/files?path=/work/s"), &[]);
    let (dir, dir_body) = srv.curl("GET", &format!("/v1/boxes/{id}/archive?path=/work/d"), &[]);
    // A tar whose entry climbs out: made by hand, as tar(1) strips the `..`.
    let mut h = [0u8; 512];
    h[..13].copy_from_slice(b"../../escaped");
    h[100..107].copy_from_slice(b"0000644");
    h[124..135].copy_from_slice(b"00000000001");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut tar = h.to_vec();
    tar.extend_from_slice(&[b'x'; 512]);
    tar.extend_from_slice(&[0u8; 1024]);
    let file = sb.rt.work().join("evil.tar");
    std::fs::write(&file, &tar).expect("write");
    let (evil, evil_body) = srv.curl(
        "PUT",
        &format!("/v1/boxes/{id}/archive?path=/work/x"),
        &["--data-binary", &format!("@{}", file.display())],
    );
    let escaped = sb.rt.root().join("sandbox-api/escaped").exists() || sb.rt.root().join("escaped").exists();
    saw(
        sb.name,
        format!(
            "../ {up} {up_body:.80}; link {link} {link_body:.80}; dir {dir} ({} bytes); evil tar {evil} {evil_body}",
            dir_body.len()
        ),
    );
    let leaked = |s: &str| !shadow.is_empty() && s.contains(shadow.lines().next().unwrap_or("root:"));
    assert!(!leaked(&up_body) && !leaked(&link_body) && !leaked(&dir_body), "the host's /etc/shadow came out");
    assert_ne!(up, 500);
    assert_eq!(evil, 400, "{evil_body}");
    assert!(!escaped, "a tar entry landed outside");
    drop(srv);
    sb.assert_clean("escape attempts");
}

/// A 1 GiB upload against the cap is refused from its Content-Length, before its body is read,
/// and one streamed without a length is cut at the cap; a client that sends half a header and
/// stalls neither blocks others nor keeps its connection past the idle timeout.
#[test]
fn caps_and_slow_clients() {
    require_root!();
    let sb = Sbx::new("sbx_api_caps");
    let tg = tag(&sb);
    let srv = Server::start(&sb, &["--max-body", "4M", "--idle-timeout", "2s"]);
    let id = srv.create(&tg, json!({"type": "nano"}));
    let t = Instant::now();
    let req =
        format!("PUT /v1/boxes/{id}/files?path=/work/big HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n");
    let answer = raw(&srv.sock, req.as_bytes(), 10);
    let announced = t.elapsed();
    let cmd = format!("head -c 64M /dev/zero | curl -s -o /dev/null -w '%{{http_code}}' --unix-socket {} -T - 'http://x/v1/boxes/{id}/files?path=/work/big'", srv.sock.display());
    let streamed = Command::new("sh").args(["-c", &cmd]).output().expect("sh");
    let streamed = String::from_utf8_lossy(&streamed.stdout).into_owned();
    let (_, listed) = srv.json("GET", &format!("/v1/boxes/{id}/files/list?path=/work"), &Value::Null);
    // Half a header, then nothing.
    let mut slow = UnixStream::connect(&srv.sock).expect("connect");
    slow.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n").expect("write");
    let t = Instant::now();
    let (other, _) = srv.curl("GET", "/v1/health", &[]);
    let other_took = t.elapsed();
    slow.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut buf = Vec::new();
    let _ = slow.read_to_end(&mut buf);
    let closed_after = t.elapsed();
    saw(sb.name, format!("1 GiB announced: {:?} in {announced:?}; 64M streamed: {streamed}; /work {listed}; others {other} in {other_took:?}; slow one closed after {closed_after:?}", answer.lines().next()));
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(announced < Duration::from_secs(5));
    // A body streamed past the cap is answered 413 and the connection closed while curl may
    // still be writing: curl then reports the 413, or only the 100 Continue it saw before
    // (never a success). What matters is what the listing checks: nothing was kept.
    assert!(streamed == "413" || streamed == "100", "a streamed upload over the cap: {streamed}");
    assert_eq!(listed["entries"], json!([]), "a refused upload left a file: {listed}");
    assert!(other == 200 && other_took < Duration::from_secs(2));
    assert!(closed_after < Duration::from_secs(8), "the slow connection was kept {closed_after:?}");
    drop(srv);
    sb.assert_clean("capped uploads");
}

/// 64 commands at once over 16 boxes, from 8 clients (connections) at a time: each gets its own
/// answer; then every box is deleted and nothing is left.
#[test]
fn sixty_four_commands_over_sixteen_boxes() {
    require_root!();
    let sb = Sbx::new("sbx_api_load");
    let tg = tag(&sb);
    let srv = Server::start(&sb, &[]);
    let ids: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..16).map(|_| s.spawn(|| srv.create(&tg, json!({"type": "nano"})))).collect();
        hs.into_iter().map(|h| h.join().expect("create")).collect()
    });
    let t = Instant::now();
    let wrong: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..64)
            .map(|i| {
                let (srv, id) = (&srv, ids[i % 16].clone());
                s.spawn(move || {
                    let (code, v) = srv.json(
                        "POST",
                        &format!("/v1/boxes/{id}/commands"),
                        &json!({"command": ["sh", "-c", format!("echo {i}; sleep 0.1")]}),
                    );
                    (code == 200 && v["stdout"]["text"] == format!("{i}\n") && v["exit_code"] == 0)
                        .then_some(())
                        .map_or(Some(format!("{i}: {code} {v}")), |()| None)
                })
            })
            .collect();
        hs.into_iter().filter_map(|h| h.join().expect("command")).collect()
    });
    let took = t.elapsed();
    for id in &ids {
        srv.curl("DELETE", &format!("/v1/boxes/{id}"), &[]);
    }
    wait_for("the deleted boxes to go", 30, || sb.list().is_empty());
    saw(sb.name, format!("64 commands in {took:?}, wrong: {wrong:?}"));
    assert!(wrong.is_empty(), "{wrong:#?}");
    drop(srv);
    sb.assert_clean("64 commands");
}

/// A command's `cwd`: `pwd` prints it, answered whole or streamed; a directory the box does not
/// have, a relative path and one with `..` are 400 naming the field, and run nothing.
#[test]
fn a_command_runs_in_its_cwd() {
    require_root!();
    let sb = Sbx::new("sbx_api_cwd");
    let tg = tag(&sb);
    let srv = Server::start(&sb, &[]);
    let id = srv.create(&tg, json!({"type": "nano"}));
    let path = format!("/v1/boxes/{id}/commands");
    let (ok, res) = srv.json("POST", &path, &json!({"command": ["pwd"], "cwd": "/tmp"}));
    let (_, stream) =
        srv.curl("POST", &path, &["-H", "Accept: application/x-ndjson", "-d", r#"{"command":["pwd"],"cwd":"/proc"}"#]);
    let (missing, m) = srv.json("POST", &path, &json!({"command": ["touch", "/tmp/ran"], "cwd": "/no/such/dir"}));
    let (relative, r) = srv.json("POST", &path, &json!({"command": ["pwd"], "cwd": "tmp"}));
    let (dotdot, d) = srv.json("POST", &path, &json!({"command": ["pwd"], "cwd": "/tmp/../etc"}));
    let (_, ran) = srv.json("POST", &path, &json!({"command": ["ls", "/tmp"]}));
    saw(sb.name, format!("/tmp: {ok} {res}; streamed {stream:?}; missing {missing} {m}; relative {relative} {r}; .. {dotdot} {d}; /tmp has {ran}"));
    assert_eq!((ok, res["stdout"]["text"].as_str()), (200, Some("/tmp\n")), "{res}");
    assert!(stream.lines().next().is_some_and(|l| l.contains(r#""data":"/proc\n""#)), "{stream}");
    for (code, v) in [(missing, &m), (relative, &r), (dotdot, &d)] {
        assert_eq!((code, v["field"].as_str()), (400, Some("cwd")), "{v}");
    }
    assert!(m["error"].as_str().is_some_and(|e| e.contains("/no/such/dir")), "{m}");
    assert_eq!(ran["stdout"]["text"], "", "a refused cwd ran the command: {ran}");
    drop(srv);
    sb.assert_clean("commands with a cwd");
}

/// A client that disconnects while its command runs (answered whole, or streamed) stops it and
/// what it started, well before the command's own end; the box lives on and answers.
#[test]
fn a_vanished_client_stops_its_command() {
    require_root!();
    let sb = Sbx::new("sbx_api_vanish");
    let tg = tag(&sb);
    let srv = Server::start(&sb, &[]);
    let id = srv.create(&tg, json!({"type": "nano"}));
    let path = format!("/v1/boxes/{id}/commands");
    let running = |what: &str| {
        let (_, v) = srv.json("POST", &path, &json!({"command": ["ps", "-eo", "args"]}));
        v["stdout"]["text"].as_str().unwrap_or_default().lines().any(|l| l.trim() == what)
    };
    let mut seen = Vec::new();
    for (accept, cmd, marks) in [
        ("application/json", json!(["sleep", "1000"]), vec!["sleep 1000"]),
        ("application/x-ndjson", json!(["sh", "-c", "sleep 1001 & sleep 1002"]), vec!["sleep 1001", "sleep 1002"]),
    ] {
        let body = json!({"command": cmd}).to_string();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut client = UnixStream::connect(&srv.sock).expect("connect");
        client.write_all(req.as_bytes()).expect("send");
        wait_for("the command to run", 20, || marks.iter().all(|m| running(m)));
        drop(client);
        let t = Instant::now();
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            marks.iter().all(|m| !running(m))
        });
        seen.push(format!("{accept}: gone {gone} after {:?}", t.elapsed()));
        assert!(gone, "{accept}: {marks:?} still run 10 s after the client went");
    }
    let (alive, v) = srv.json("POST", &path, &json!({"command": ["echo", "alive"]}));
    saw(sb.name, format!("{seen:?}; then the box: {alive} {}", v["stdout"]));
    assert_eq!((alive, v["stdout"]["text"].as_str()), (200, Some("alive\n")), "{v}");
    drop(srv);
    sb.assert_clean("a vanished client's commands");
}

/// A client's box limit holds against creates at once: with max_boxes 2, of six concurrent
/// creates by one client two make a box and four are 403 naming max_boxes.
#[test]
fn concurrent_creates_hold_the_box_limit() {
    require_root!();
    let sb = Sbx::new("sbx_api_limit");
    let user = LocalUser::new("lim");
    let policy = sb.rt.work().join("policy.json");
    std::fs::write(&policy, r#"{"max_boxes": 2}"#).expect("write the policy");
    let srv = Server::start(&sb, &["--group", &user.name, "--policy", policy.to_str().unwrap_or("")]);
    let body = json!({"type": "nano", "env": [tag(&sb)]}).to_string();
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    let (code, text) = curl_as(Some(&user), &srv.sock, "POST", "/v1/boxes", &["-d", &body]);
                    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("create")).collect()
    });
    let made = answers.iter().filter(|(c, _)| *c == 201).count();
    let refused = answers.iter().filter(|(c, v)| *c == 403 && v["field"] == "max_boxes").count();
    let boxes = sb.list().len();
    saw(sb.name, format!("made {made}, refused {refused}, boxes {boxes}: {answers:?}"));
    assert_eq!((made, refused, boxes), (2, 4, 2), "{answers:?}");
    drop(srv);
    sb.assert_clean("boxes at the limit");
}

/// SIGTERM lets a command in flight finish, then terminates the clients' boxes; with
/// --keep-boxes they stay, a new server adopts them and their lifetimes still hold; after a
/// SIGKILL a restart's SIGTERM cleans everything.
#[test]
fn sigterm_drains_and_a_restart_adopts() {
    require_root!();
    let sb = Sbx::new("sbx_api_restart");
    let tg = tag(&sb);
    let mut srv = Server::start(&sb, &[]);
    let id = srv.create(&tg, json!({"type": "nano"}));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(srv.child.as_ref().map_or(0, Child::id)).unwrap_or(0));
    let answer = std::thread::scope(|s| {
        let h = s.spawn(|| {
            srv.json(
                "POST",
                &format!("/v1/boxes/{id}/commands"),
                &json!({"command": ["sh", "-c", "sleep 1; echo done"]}),
            )
        });
        std::thread::sleep(Duration::from_millis(300));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        h.join().expect("command")
    });
    let status = srv.term(30);
    let after_term = sb.list();
    let mut kept = Server::start(&sb, &["--keep-boxes"]);
    let adopted = kept.create(&tg, json!({"type": "nano", "lifetime": "4s"}));
    let kept_status = kept.term(30);
    let mut again = Server::start(&sb, &[]);
    let (seen, _) = again.curl("GET", &format!("/v1/boxes/{adopted}"), &[]);
    std::thread::sleep(Duration::from_secs(5));
    let (expired, _) = again.curl("GET", &format!("/v1/boxes/{adopted}"), &[]);
    let leftover = again.create(&tg, json!({"type": "nano"}));
    again.kill();
    let mut last = Server::start(&sb, &[]);
    let (still, _) = last.curl("GET", &format!("/v1/boxes/{leftover}"), &[]);
    let last_status = last.term(30);
    saw(sb.name, format!("in flight {answer:?}, exit {status:?}, left {after_term:?}; kept exit {kept_status:?}, adopted {seen} then {expired}; after SIGKILL {still}, exit {last_status:?}, left {:?}", sb.list()));
    assert_eq!((answer.0, answer.1["stdout"]["text"].as_str()), (200, Some("done\n")), "the drain cut a command short");
    assert_eq!(status, Some(0));
    assert!(after_term.is_empty(), "SIGTERM left {after_term:?}");
    assert_eq!((kept_status, seen, expired), (Some(0), 200, 404));
    assert_eq!((still, last_status), (200, Some(0)));
    assert!(sb.list().is_empty());
    sb.assert_clean("restarts");
}

/// TCP is loopback only and never without tokens: a non-loopback address or a missing token file
/// does not start; a request without the token gets 401; two tokens are two clients.
#[test]
fn tcp_is_loopback_with_tokens() {
    require_root!();
    let sb = Sbx::new("sbx_api_tcp");
    let tg = tag(&sb);
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let addr = format!("127.0.0.1:{port}");
    let tokens = sb.rt.work().join("tokens");
    let (a, b) = ("token-a-0123456789abcdef", "token-b-0123456789abcdef");
    std::fs::write(&tokens, format!("{a}\n{b}\n")).expect("write");
    let refused = |flags: &[&str]| sb.rt.command(&["sandbox", "serve"]).args(flags).output().expect("serve");
    let wide = refused(&["--listen", &format!("0.0.0.0:{port}"), "--token-file", tokens.to_str().unwrap_or("")]);
    let no_token = refused(&["--listen", &addr]);
    let srv = Server::start(&sb, &["--listen", &addr, "--token-file", tokens.to_str().unwrap_or("")]);
    let tcp = |token: Option<&str>, method: &str, path: &str, body: Option<&str>| {
        let mut c = Command::new("curl");
        c.args(["-s", "-m", "60", "-o", "-", "-w", "\n%{http_code}", "-X", method]);
        if let Some(t) = token {
            c.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        if let Some(d) = body {
            c.args(["-d", d]);
        }
        let o = c.arg(format!("http://{addr}{path}")).output().expect("curl");
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse::<u16>().unwrap_or(0), body.to_string())
    };
    let (anon, _) = tcp(None, "GET", "/v1/health", None);
    let (wrong, _) = tcp(Some("token-c-0123456789abcdef"), "GET", "/v1/health", None);
    let create = json!({"type": "nano", "env": [tg]}).to_string();
    let (made, v) = tcp(Some(a), "POST", "/v1/boxes", Some(&create));
    let id = serde_json::from_str::<Value>(&v).unwrap_or_default()["id"].as_str().unwrap_or("-").to_string();
    let (by_b, _) = tcp(Some(b), "GET", &format!("/v1/boxes/{id}"), None);
    let (by_a, _) = tcp(Some(a), "GET", &format!("/v1/boxes/{id}"), None);
    saw(sb.name, format!("0.0.0.0: {:?}; no token file: {:?}; anonymous {anon}, wrong token {wrong}; made {made}; other token {by_b}, own {by_a}", wide.status.code(), no_token.status.code()));
    assert!(!wide.status.success() && String::from_utf8_lossy(&wide.stderr).contains("loopback"));
    assert!(!no_token.status.success() && String::from_utf8_lossy(&no_token.stderr).contains("token"));
    assert_eq!((anon, wrong, made, by_b, by_a), (401, 401, 201, 404, 200));
    drop(srv);
    sb.assert_clean("a TCP client's box");
}

/// What a box tried and was refused reaches an API client as it does the CLI: in a command's
/// result, in a streamed command's exit event, and cumulatively in the box's record.
#[test]
fn refused_calls_reach_the_api_client() {
    require_root!();
    let sb = Sbx::new("sbx_api_refused");
    let tg = tag(&sb);
    let srv = Server::start(&sb, &[]);
    let id = srv.create(&tg, json!({"type": "nano"}));
    // mount(2) straight from python, so no mount program's own checks come first.
    let try_mount = ["python3", "-c", "import ctypes; ctypes.CDLL(None).syscall(165, 0, 0, 0, 0, 0)"];
    let (code, res) = srv.json("POST", &format!("/v1/boxes/{id}/commands"), &json!({"command": try_mount}));
    let body = json!({"command": try_mount}).to_string();
    let (_, stream) =
        srv.curl("POST", &format!("/v1/boxes/{id}/commands"), &["-H", "Accept: application/x-ndjson", "-d", &body]);
    let (clean_code, clean) = srv.json("POST", &format!("/v1/boxes/{id}/commands"), &json!({"command": ["true"]}));
    let (_, record) = srv.json("GET", &format!("/v1/boxes/{id}"), &Value::Null);
    saw(sb.name, format!("json {code} {res}; stream {stream}; clean {clean}; box {record}"));
    let mounts = |v: &Value| {
        v["refused"]["syscalls"]
            .as_array()
            .and_then(|calls| calls.iter().find(|c| c["name"] == "mount"))
            .and_then(|c| c["count"].as_u64())
    };
    assert_eq!((code, mounts(&res)), (200, Some(1)), "{res}");
    let exit: Value = stream
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "exit")
        .unwrap_or_else(|| panic!("no exit event: {stream}"));
    assert_eq!(mounts(&exit["result"]), Some(1), "{exit}");
    assert_eq!(clean_code, 200);
    assert!(clean["refused"].is_null() || mounts(&clean).is_none(), "a clean command reports nothing: {clean}");
    assert!(mounts(&record).unwrap_or(0) >= 2, "the box's record counts both: {record}");
    drop(srv);
    sb.assert_clean("the API's refused box");
}
