//! SECURITY: the way from `create` to the program, attacked from the image, the config and the
//! host's other users.
//!
//! * The start socket is the container's trigger: under any umask, no other user may connect.
//! * While a container waits to be started, its init holds none of the runtime's fds: no
//!   namespace or cgroup handle, nothing the caller leaked.
//! * Files init reads in the image (`/etc/passwd`, `#!` lines) may be FIFOs: `create` must not
//!   hang on them.
//! * `/proc` and `/sys` in the image must be ordinary directories, not symlinks or files.
//! * Sysctl writes must land on procfs, and a namespaced sysctl is refused when its namespace is
//!   joined by a path to the host's own.
//!
//! Every test prints `ESCAPE <name>: tried <what>, saw <what>` (run with --nocapture).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use tinyrun_conformance::{pass_fds, require_root, Bundle, Out, Runtime};

fn escape(name: &str, tried: &str, saw: &str) {
    eprintln!("ESCAPE {name}: tried {tried}, saw {saw}");
}

/// Opens the test's scratch dirs to other users, as a state root under /run is (0711).
fn traversable(rt: &Runtime) {
    for d in [rt.work(), rt.root()] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o711)).expect("chmod");
    }
}

/// `python3 -c CODE ARGS...` as uid and gid 65534 (nobody): another local user.
fn as_nobody(code: &str, args: &[&str]) -> std::process::Output {
    Command::new("python3").arg("-c").arg(code).args(args).uid(65534).gid(65534).output().expect("python3")
}

/// A local user who knows the id connects to the start socket (runc: opens exec.fifo for
/// reading), under a runtime started with umask 0. The container must stay `created`.
#[test]
fn start_socket_is_private_whatever_the_umask() {
    require_root!();
    let rt = Runtime::new("startsockumask");
    traversable(&rt);
    let b = rt.bundle(&["/bin/probe", "exit", "0"]);
    let mut cmd = rt.command(&["create", "--bundle", b.path(), &b.id]);
    // SAFETY: umask is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    rt.output(cmd).expect_ok("create under umask 0");
    let (file, code) = if rt.is_runc() {
        ("exec.fifo", "import os, sys\nos.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)\nprint('opened')")
    } else {
        (
            "start.sock",
            "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ns.send(b's')\nprint('connected')",
        )
    };
    let path = rt.root().join(&b.id).join(file);
    let mode = fs::symlink_metadata(&path).expect("the trigger exists").permissions().mode() & 0o777;
    let o = as_nobody(code, &[path.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(300));
    let status = rt.status(&b.id);
    escape(
        "start-socket",
        &format!("connecting to {file} (mode {mode:o}) as uid 65534"),
        &format!("{:?}, container {status:?}", String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")),
    );
    assert_eq!(status.as_deref(), Some("created"), "another user started the container");
    assert!(!o.status.success(), "another user reached the trigger");
    // runc's FIFO is 0622: others may open it for writing, which is init's side, not start's.
    let open_to_others = if rt.is_runc() { 0o044 } else { 0o077 };
    assert_eq!(mode & open_to_others, 0, "{file} is open to other users: {mode:o}");
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete");
    rt.assert_nothing_left(&b.id);
}

/// What init holds while it waits for `start`: nothing but stdio and two sockets (the start
/// listener and its channel to the runtime). The container joins a network namespace by path
/// and the runtime is handed an extra fd it did not ask to pass on.
#[test]
fn init_holds_no_host_fds_while_created() {
    require_root!();
    let rt = Runtime::new("inithostfds");
    if rt.is_runc() {
        eprintln!("SKIP: runc's init is a different program; its fds are its own business");
        return;
    }
    let (nsfile, _) = rt.bound_netns();
    let b = rt.bundle(&["/bin/probe", "exit", "0"]);
    b.config_mut(|c| {
        for ns in c["linux"]["namespaces"].as_array_mut().unwrap() {
            if ns["type"] == "network" {
                ns["path"] = nsfile.to_str().unwrap().into();
            }
        }
    });
    let leak = fs::File::open(rt.work()).expect("open a host directory");
    let mut cmd = rt.command(&["create", "--bundle", b.path(), &b.id]);
    pass_fds(&mut cmd, vec![(std::os::fd::AsRawFd::as_raw_fd(&leak), 7)]);
    rt.output(cmd).expect_ok("create");
    let pid = rt.state(&b.id).expect("state")["pid"].as_i64().expect("pid");
    let mut held = Vec::new();
    for e in fs::read_dir(format!("/proc/{pid}/fd")).expect("init's fds").flatten() {
        let n: i32 = e.file_name().to_str().unwrap().parse().unwrap();
        let target = fs::read_link(e.path()).map(|p| p.display().to_string()).unwrap_or_default();
        if n > 2 {
            held.push(format!("{n} -> {target}"));
        }
    }
    escape("init-fds", "a joined netns and a leaked host dir fd 7", &format!("init holds {held:?}"));
    assert!(held.iter().all(|h| h.contains("socket:[")), "init holds more than its sockets: {held:?}");
    assert!(held.len() <= 2, "init holds more than the start listener and its channel: {held:?}");
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete");
    rt.assert_nothing_left(&b.id);
}

/// `create`, if it comes back within 20 s (a FIFO in the image would block it forever).
fn create_within(rt: &Runtime, b: &Bundle) -> Option<Out> {
    let mut running = rt.spawn(&["create", "--bundle", b.path(), &b.id]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if running.child.try_wait().expect("try_wait").is_some() {
            return Some(running.wait());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = running.child.kill();
    let _ = running.child.wait();
    None
}

fn mkfifo(p: &Path) {
    let _ = fs::remove_file(p);
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

/// /etc/passwd is a FIFO (read for HOME when the config sets none), and the program's `#!`
/// names a FIFO as its interpreter (read to refuse the runtime's own binary).
#[test]
fn a_fifo_in_the_image_does_not_hang_create() {
    require_root!();
    let rt = Runtime::new("imagefifo");
    let b0 = rt.bundle(&["/bin/true"]);
    let rootfs = b0.writable_rootfs();
    mkfifo(&rootfs.join("etc/passwd"));
    mkfifo(&rootfs.join("fifo"));
    fs::write(rootfs.join("script"), "#!/fifo\n").unwrap();
    fs::set_permissions(rootfs.join("script"), fs::Permissions::from_mode(0o755)).unwrap();
    for (name, args) in [("passwd", vec!["/bin/probe", "env"]), ("interpreter", vec!["/script"])] {
        let b = rt.bundle(&args);
        b.config_mut(|c| {
            c["root"] = json!({"path": rootfs, "readonly": true});
            c["process"]["env"] = json!(["PATH=/bin"]);
        });
        let what = format!("image-fifo-{name}");
        let Some(o) = create_within(&rt, &b) else {
            escape(&what, "a FIFO where init reads a file of the image", "create hung");
            if rt.is_runc() {
                eprintln!("KNOWN: runc 1.1.5 opens the image's files as they are, and blocks on a FIFO");
                rt.run(&["delete", "--force", &b.id]);
                continue;
            }
            panic!("{what}: create hung on a FIFO in the image");
        };
        escape(&what, "a FIFO where init reads a file of the image", &format!("create exit {:?}", o.code()));
        if o.ok() {
            let s = rt.run(&["start", &b.id]);
            if name == "passwd" {
                s.expect_ok("start");
                rt.wait_status(&b.id, "stopped");
            }
        }
        rt.run(&["delete", "--force", &b.id]);
        rt.assert_nothing_left(&b.id);
    }
}

/// The image makes /proc (then /sys) a symlink to a directory of its own, or a plain file:
/// proc and sysfs must not be mounted through or over it. runc refuses the same, in words tools
/// match: "must be mounted on ordinary directory".
#[test]
fn proc_and_sys_not_directories_in_the_image_are_refused() {
    require_root!();
    let rt = Runtime::new("procsymlink");
    for (dir, kind) in [("proc", "symlink"), ("sys", "symlink"), ("proc", "file")] {
        let b = rt.bundle(&["/bin/true"]);
        let rootfs = b.writable_rootfs();
        fs::remove_dir(rootfs.join(dir)).expect("rmdir");
        if kind == "file" {
            fs::write(rootfs.join(dir), "").unwrap();
        } else {
            fs::create_dir(rootfs.join("fake")).unwrap();
            std::os::unix::fs::symlink("/fake", rootfs.join(dir)).unwrap();
        }
        let o = rt.create(&b);
        escape(&format!("{dir}-{kind}"), &format!("/{dir} a {kind} in the image"), &format!("{:?}", o.stderr.trim()));
        assert!(!o.ok(), "/{dir} mounted through a {kind} of the image\n{o}");
        assert!(o.stderr.contains(&format!("/{dir}")), "the error names /{dir}\n{o}");
        assert!(o.stderr.contains("must be mounted on ordinary directory"), "runc's words\n{o}");
        rt.assert_nothing_left(&b.id);
    }
}

/// A bind mount over /proc/sys/net/ipv4 puts a host file where a sysctl is written: the write
/// must be refused, not go to that file (nor look applied).
#[test]
fn sysctl_writes_land_on_procfs() {
    require_root!();
    let rt = Runtime::new("sysctlprocfs");
    let fake = rt.tempdir();
    fs::write(fake.join("ip_forward"), "unchanged\n").unwrap();
    let b = rt.bundle(&["/bin/true"]);
    b.add_mount(json!({"destination": "/proc/sys/net/ipv4", "type": "bind", "source": fake, "options": ["rbind"]}));
    b.config_mut(|c| c["linux"]["sysctl"] = json!({"net.ipv4.ip_forward": "1"}));
    let o = rt.create(&b);
    let after = fs::read_to_string(fake.join("ip_forward")).unwrap();
    escape("sysctl-not-procfs", "a host file bound over /proc/sys/net/ipv4", &format!("file now {after:?}, {o}"));
    if rt.is_runc() && o.ok() {
        eprintln!("KNOWN: runc 1.1.5 writes sysctls through whatever is mounted at /proc/sys");
    } else {
        assert_eq!(after, "unchanged\n", "the sysctl write went to a host file");
        assert!(!o.ok(), "a sysctl that did not reach procfs looked applied\n{o}");
        // runc refuses the mount under /proc itself, before any sysctl.
        assert!(rt.is_runc() || o.stderr.contains("net.ipv4.ip_forward"), "{o}");
    }
    rt.run(&["delete", "--force", &b.id]);
    rt.assert_nothing_left(&b.id);
}

/// `{"type": "network", "path": "/proc/self/ns/net"}` is the runtime's, the host's, network
/// namespace: a net.* sysctl there would change the host. The value asked for is the host's
/// current one, so even a runtime that lets it through changes nothing.
#[test]
fn namespaced_sysctl_in_the_hosts_namespace_joined_by_path_is_refused() {
    require_root!();
    let rt = Runtime::new("sysctlhostns");
    let current = fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap().trim().to_string();
    let b = rt.bundle(&["/bin/true"]);
    b.config_mut(|c| {
        for ns in c["linux"]["namespaces"].as_array_mut().unwrap() {
            if ns["type"] == "network" {
                ns["path"] = "/proc/self/ns/net".into();
            }
        }
        c["linux"]["sysctl"] = json!({"net.ipv4.ip_forward": current});
    });
    let o = rt.create(&b);
    escape("sysctl-host-netns", "net.ipv4.ip_forward in the netns at /proc/self/ns/net", &format!("{o}"));
    if rt.is_runc() && o.ok() {
        eprintln!("KNOWN: runc 1.1.5 checks only that a network namespace is listed");
    } else {
        assert!(!o.ok(), "a host-wide sysctl was accepted\n{o}");
        assert!(o.stderr.contains("net.ipv4.ip_forward"), "{o}");
    }
    rt.run(&["delete", "--force", &b.id]);
    rt.assert_nothing_left(&b.id);
}
