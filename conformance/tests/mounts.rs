//! Filesystem setup (runtime-spec `config.md` "Root", "Mounts"; `config-linux.md` "Devices",
//! "Default Devices", "Masked Paths", "Readonly Paths", "Sysctl"): tmpfs and bind mounts, a
//! read-only root, the default /dev, extra device nodes, masked and read-only paths, sysctls,
//! and mount-target symlinks that must not reach the host (cli-contract.md §5.3).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;
use tinyrun_conformance::{kv, mounts_under, require_root, Runtime};

/// One line of /proc/self/mountinfo.
struct MountInfo {
    point: String,
    opts: Vec<String>,
    fstype: String,
    super_opts: Vec<String>,
}

fn mountinfo(text: &str) -> Vec<MountInfo> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            Some(MountInfo {
                point: f.get(4)?.replace("\\040", " "),
                opts: f.get(5)?.split(',').map(str::to_string).collect(),
                fstype: r.first()?.to_string(),
                super_opts: r.get(2).unwrap_or(&"").split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// The last (topmost) mount at `point`.
fn mount_at<'a>(mounts: &'a [MountInfo], point: &str) -> Option<&'a MountInfo> {
    mounts.iter().rev().find(|m| m.point == point)
}

/// Run `sh -c` and split the output into sections introduced by `== NAME` lines.
fn sections(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut cur = String::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("== ") {
            cur = name.to_string();
            out.insert(cur.clone(), String::new());
        } else if let Some(s) = out.get_mut(&cur) {
            s.push_str(line);
            s.push('\n');
        }
    }
    out
}

#[test]
fn tmpfs_with_options() {
    require_root!();
    let rt = Runtime::new("tmpfs");
    let b = rt.bundle(&["/bin/probe", "mounts"]);
    b.add_mount(json!({"destination": "/run", "type": "tmpfs", "source": "tmpfs",
                       "options": ["nosuid", "nodev", "noexec", "mode=1700", "size=1m"]}));
    let o = rt.run_bundle(&b).expect_ok("run");
    let mounts = mountinfo(&o.stdout);
    let m = mount_at(&mounts, "/run").unwrap_or_else(|| panic!("no mount at /run\n{o}"));
    assert_eq!(m.fstype, "tmpfs");
    for opt in ["nosuid", "nodev", "noexec"] {
        assert!(m.opts.contains(&opt.to_string()), "{opt} missing: {:?}", m.opts);
    }
    assert!(m.super_opts.contains(&"size=1024k".to_string()), "size=1m → size=1024k: {:?}", m.super_opts);
    // The option, not the root inode: runc chmods a tmpfs root back to the mode of the
    // directory it covers (docker volume copy-up), so `stat /run` says 0755 there.
    assert!(m.super_opts.contains(&"mode=1700".to_string()), "mode=1700: {:?}", m.super_opts);
}

#[test]
fn bind_mount_rw() {
    require_root!();
    let rt = Runtime::new("bindrw");
    let host = rt.tempdir();
    std::fs::write(host.join("from-host"), "host-data\n").unwrap();
    let b = rt.bundle(&["/bin/sh", "-c", "/bin/probe cat /var/from-host && /bin/probe write /var/from-container"]);
    b.add_mount(json!({"destination": "/var", "type": "bind", "source": host, "options": ["rbind", "rw"]}));
    let o = rt.run_bundle(&b).expect_ok("run");
    assert!(o.stdout.contains("host-data"), "host file visible inside\n{o}");
    assert!(o.stdout.contains("write=ok"), "{o}");
    assert_eq!(std::fs::read_to_string(host.join("from-container")).unwrap(), "probe\n", "write visible on host");
}

#[test]
fn bind_mount_ro() {
    require_root!();
    let rt = Runtime::new("bindro");
    let host = rt.tempdir();
    std::fs::write(host.join("from-host"), "host-data\n").unwrap();
    let b = rt.bundle(&["/bin/sh", "-c", "/bin/probe cat /var/from-host; /bin/probe write /var/from-container"]);
    b.add_mount(json!({"destination": "/var", "type": "bind", "source": host, "options": ["rbind", "ro"]}));
    let o = rt.run_bundle(&b);
    assert!(o.stdout.contains("host-data"), "{o}");
    assert!(o.stdout.contains("write=EROFS"), "ro bind must give EROFS\n{o}");
    assert!(!host.join("from-container").exists());
}

/// `rro` (runc's recursive mount attributes, set with mount_setattr(AT_RECURSIVE)): a bind of a
/// host directory with a tmpfs mounted inside it is read-only all the way down, where a plain
/// `ro` bind leaves the submount writable.
#[test]
fn recursive_read_only_bind() {
    require_root!();
    let rt = Runtime::new("bindrro");
    let host = rt.tempdir();
    let sub = host.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let st = std::process::Command::new("mount").args(["-t", "tmpfs", "tmpfs"]).arg(&sub).status().unwrap();
    assert!(st.success(), "mount a tmpfs under the host dir");
    rt.track_mount(&sub);
    for (opt, sub_result) in [("ro", "write=ok"), ("rro", "write=EROFS")] {
        let b = rt.bundle(&["/bin/sh", "-c", "/bin/probe write /var/top; /bin/probe write /var/sub/file"]);
        b.add_mount(json!({"destination": "/var", "type": "bind", "source": host, "options": ["rbind", opt]}));
        let o = rt.run_bundle(&b);
        let lines: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("write=")).collect();
        assert_eq!(lines, ["write=EROFS", sub_result], "{opt}: the top, then the submount\n{o}");
        let _ = std::fs::remove_file(sub.join("file"));
    }
}

/// The atime mode a mountinfo line shows: `noatime`, `relatime`, or neither (strictatime).
fn atime_mode(m: &MountInfo) -> &'static str {
    ["noatime", "relatime"].into_iter().find(|a| m.opts.iter().any(|o| o == a)).unwrap_or("strictatime")
}

/// The recursive atime options leave the bind and the mount below it in runc's mode:
/// `rnorelatime` (like `rrelatime`, relatime being the atime field's zero) gives relatime, not
/// strictatime. The host's tree is a relatime tmpfs with a noatime one below it, so an option
/// that changes nothing shows on the submount.
#[test]
fn recursive_atime_options_as_runc_sets_them() {
    require_root!();
    let rt = Runtime::new("bindratime");
    let host = rt.tempdir();
    let sub = host.join("sub");
    for (dir, opts) in [(&host, "relatime,size=1m"), (&sub, "noatime,size=1m")] {
        std::fs::create_dir_all(dir).unwrap();
        let st = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", opts, "tmpfs"]).arg(dir).status();
        assert!(st.unwrap().success(), "mount a tmpfs ({opts}) at {}", dir.display());
        rt.track_mount(dir);
    }
    for (opt, want) in [("rnorelatime", "relatime"), ("rstrictatime", "strictatime"), ("rnoatime", "noatime")] {
        let b = rt.bundle(&["/bin/probe", "mounts"]);
        b.add_mount(json!({"destination": "/var", "type": "bind", "source": host, "options": ["rbind", opt]}));
        let o = rt.run_bundle(&b).expect_ok(opt);
        let mounts = mountinfo(&o.stdout);
        for point in ["/var", "/var/sub"] {
            let m = mount_at(&mounts, point).unwrap_or_else(|| panic!("{opt}: no mount at {point}\n{o}"));
            if rt.is_runc() && opt == "rnorelatime" && point == "/var/sub" && atime_mode(m) == "noatime" {
                eprintln!("runc before 1.5 sets nothing for rnorelatime: the noatime submount stays noatime");
                continue;
            }
            assert_eq!(atime_mode(m), want, "{opt} at {point}: {:?}", m.opts);
        }
    }
}

/// Waits up to `secs` for `p` to exist.
fn appears(p: &Path, secs: u64) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !p.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    p.exists()
}

/// A bind with `rshared` propagation under `rootfsPropagation: rshared`, as containerd's CRI
/// makes a Kubernetes `mountPropagation: Bidirectional` volume (what CSI node plugins use): a
/// mount the container makes under it reaches the host, and one the host makes reaches the
/// container. The host directory is a shared mount, as containerd requires of the source. The
/// container's rootfs must not show up on the host.
#[test]
fn rshared_bind_propagates_both_ways() {
    require_root!();
    let rt = Runtime::new("rshared");
    let host = rt.tempdir();
    for d in ["inner", "fromhost"] {
        std::fs::create_dir(host.join(d)).unwrap();
    }
    let mount = |args: &[&str], at: &Path| {
        let st = std::process::Command::new("mount").args(args).arg(at).status().unwrap();
        assert!(st.success(), "mount {args:?} {}", at.display());
    };
    mount(&["--bind", host.to_str().unwrap()], &host);
    rt.track_mount(&host);
    mount(&["--make-shared"], &host);
    let script = "mount -t tmpfs -o size=1m tmpfs /var/inner && echo c > /var/inner/marker; \
                  i=0; while [ ! -e /var/fromhost/marker ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; \
                  [ -e /var/fromhost/marker ] && echo host-mount-seen || echo host-mount-missing";
    let b = rt.bundle(&["/bin/sh", "-c", script]);
    b.add_mount(json!({"destination": "/var", "type": "bind", "source": host, "options": ["rbind", "rshared"]}));
    b.config_mut(|c| {
        for set in ["bounding", "effective", "permitted"] {
            c["process"]["capabilities"][set].as_array_mut().unwrap().push("CAP_SYS_ADMIN".into());
        }
        c["linux"]["rootfsPropagation"] = "rshared".into();
    });
    let o = rt.create(&b).expect_ok("create with an rshared bind");
    rt.run(&["start", &b.id]).expect_ok("start");
    let reached_host = appears(&host.join("inner/marker"), 10);
    assert!(mounts_under(&b.rootfs()).is_empty(), "the container's mounts showed up under its rootfs on the host");
    mount(&["-t", "tmpfs", "-o", "size=1m", "tmpfs"], &host.join("fromhost"));
    std::fs::write(host.join("fromhost/marker"), "h\n").unwrap();
    rt.wait_status(&b.id, "stopped");
    let out = o.stdout_now();
    assert!(reached_host, "the container's mount under the rshared bind never reached the host\n{out}");
    assert!(out.contains("host-mount-seen"), "the host's mount never reached the container\n{out}");
    rt.run(&["delete", &b.id]).expect_ok("delete");
    rt.assert_nothing_left(&b.id);
}

#[test]
fn readonly_root() {
    require_root!();
    let rt = Runtime::new("roroot");
    let b = rt.bundle(&["/bin/probe", "write", "/probe-was-here"]);
    assert_eq!(b.config()["root"]["readonly"], true);
    let o = rt.run_bundle(&b);
    assert_eq!(o.kv().get("write").map(String::as_str), Some("EROFS"), "{o}");
    assert!(!b.rootfs().join("probe-was-here").exists());

    // A writable root (own copy): the write lands in the rootfs on the host.
    let b = rt.bundle(&["/bin/probe", "write", "/probe-was-here"]);
    let rootfs = b.writable_rootfs();
    rt.run_bundle(&b).expect_ok("write to a writable root");
    assert_eq!(std::fs::read_to_string(rootfs.join("probe-was-here")).unwrap(), "probe\n");
}

/// The default devices of runtime-spec "Default Devices", plus the /dev symlinks runc makes.
#[test]
fn default_dev() {
    require_root!();
    let rt = Runtime::new("defaultdev");
    let paths = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
        "/dev/ptmx",
        "/dev/fd",
        "/dev/stdin",
        "/dev/stdout",
        "/dev/stderr",
        "/dev/shm",
        "/dev/pts",
    ];
    let script: String = paths.iter().map(|p| format!("echo '== {p}'; /bin/probe stat {p}; ")).collect();
    let b = rt.bundle(&["/bin/sh", "-c", &script]);
    let o = rt.run_bundle(&b).expect_ok("stat /dev entries");
    let s = sections(&o.stdout);
    let st = |p: &str| kv(s.get(p).unwrap_or_else(|| panic!("{p} missing\n{o}")));
    for (p, rdev) in [
        ("/dev/null", "1:3"),
        ("/dev/zero", "1:5"),
        ("/dev/full", "1:7"),
        ("/dev/random", "1:8"),
        ("/dev/urandom", "1:9"),
        ("/dev/tty", "5:0"),
    ] {
        let m = st(p);
        assert_eq!(m.get("type").map(String::as_str), Some("chr"), "{p}: {m:?}");
        assert_eq!(m.get("rdev").map(String::as_str), Some(rdev), "{p}: {m:?}");
        assert_eq!(m.get("mode").map(String::as_str), Some("0666"), "{p}: {m:?}");
    }
    let ptmx = st("/dev/ptmx");
    let ok =
        (ptmx["type"] == "lnk" && ptmx["target"] == "pts/ptmx") || (ptmx["type"] == "chr" && ptmx["rdev"] == "5:2");
    assert!(ok, "/dev/ptmx must be pts/ptmx or char 5:2: {ptmx:?}");
    for (p, target) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        let m = st(p);
        assert_eq!((m["type"].as_str(), m["target"].as_str()), ("lnk", target), "{p}: {m:?}");
    }
    assert_eq!(st("/dev/shm")["type"], "dir");
    assert_eq!(st("/dev/pts")["type"], "dir");
}

#[test]
fn extra_device_node() {
    require_root!();
    let rt = Runtime::new("devnode");
    let b = rt.bundle(&["/bin/probe", "stat", "/dev/tinyrun-null"]);
    b.config_mut(|c| {
        c["linux"]["devices"] = json!([{"path": "/dev/tinyrun-null", "type": "c", "major": 1, "minor": 3,
                                        "fileMode": 0o640, "uid": 0, "gid": 0}]);
    });
    let m = rt.run_bundle(&b).expect_ok("stat the device").kv();
    assert_eq!(m["type"], "chr");
    assert_eq!(m["rdev"], "1:3");
    assert_eq!(m["mode"], "0640");
}

#[test]
fn masked_paths() {
    require_root!();
    let rt = Runtime::new("masked");
    // A default masked /proc file that exists on this kernel (kcore needs CONFIG_PROC_KCORE).
    let proc_file = ["/proc/kcore", "/proc/keys", "/proc/timer_list"].into_iter().find(|p| Path::new(p).exists());
    let proc_file = proc_file.expect("no default masked /proc file exists on this host");
    let script = format!(
        "echo '== proc'; /bin/probe stat {proc_file}; /bin/probe cat {proc_file} | wc -c; \
         echo '== passwd'; /bin/probe stat /etc/passwd; /bin/probe cat /etc/passwd | wc -c; \
         echo '== home'; ls -A /home; echo '== end'"
    );
    let b = rt.bundle(&["/bin/sh", "-c", &script]);
    b.config_mut(|c| {
        let masked = c["linux"]["maskedPaths"].as_array_mut().unwrap();
        masked.push("/etc/passwd".into());
        masked.push("/home".into());
    });
    assert!(b.rootfs().join("home/tester").is_dir() && b.rootfs().join("etc/passwd").is_file());
    let o = rt.run_bundle(&b).expect_ok("run");
    let s = sections(&o.stdout);
    for file in ["proc", "passwd"] {
        let st = kv(&s[file]);
        assert_eq!(st.get("rdev").map(String::as_str), Some("1:3"), "a masked file has /dev/null bound over it\n{o}");
        assert_eq!(s[file].lines().last().map(str::trim), Some("0"), "reading a masked file gives nothing\n{o}");
    }
    assert_eq!(s["home"].trim(), "", "a masked directory is empty\n{o}");
}

#[test]
fn readonly_paths() {
    require_root!();
    let rt = Runtime::new("ropaths");
    // domainname is per-UTS-namespace, so even a wrong success would not touch the host.
    let host = rt.tempdir();
    let b = rt.bundle(&["/bin/sh", "-c", "/bin/probe write /proc/sys/kernel/domainname; /bin/probe write /var/x"]);
    b.add_mount(json!({"destination": "/var", "type": "bind", "source": host, "options": ["rbind", "rw"]}));
    b.config_mut(|c| c["linux"]["readonlyPaths"].as_array_mut().unwrap().push("/var".into()));
    let o = rt.run_bundle(&b);
    let writes: Vec<&str> = o.stdout.lines().filter_map(|l| l.strip_prefix("write=")).collect();
    assert_eq!(writes, ["EROFS", "EROFS"], "/proc/sys and /var are read-only\n{o}");
    assert!(!host.join("x").exists());
}

#[test]
fn sysctl_in_new_netns() {
    require_root!();
    let rt = Runtime::new("sysctl");
    let host_before = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let want = if host_before.trim() == "1" { "0" } else { "1" };
    let b = rt.bundle(&["/bin/probe", "sysctl", "net.ipv4.ip_forward"]);
    b.config_mut(|c| c["linux"]["sysctl"] = json!({"net.ipv4.ip_forward": want}));
    let o = rt.run_bundle(&b).expect_ok("run with a sysctl");
    assert_eq!(o.kv()["net.ipv4.ip_forward"], want, "{o}");
    assert_eq!(std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(), host_before, "host sysctl changed");
}

/// A net.* sysctl without a private network namespace would change the host: refuse it.
#[test]
fn sysctl_for_host_netns_refused() {
    require_root!();
    let rt = Runtime::new("sysctlhost");
    let host_before = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let want = if host_before.trim() == "1" { "0" } else { "1" };
    let b = rt.bundle(&["/bin/probe", "sysctl", "net.ipv4.ip_forward"]);
    b.without_ns("network").config_mut(|c| c["linux"]["sysctl"] = json!({"net.ipv4.ip_forward": want}));
    let o = rt.create(&b).expect_err("net sysctl in the host network namespace");
    assert_eq!(o.code(), Some(1), "{o}");
    assert_eq!(std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(), host_before, "host sysctl changed!");
    rt.assert_nothing_left(&b.id);
}

fn assert_host_dir_untouched(dir: &Path) {
    assert!(mounts_under(dir).is_empty(), "something is mounted on host path {}", dir.display());
    let entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(entries.is_empty(), "host dir {} was written to: {entries:?}", dir.display());
}

/// SECURITY: a mount destination that is a symlink in the rootfs pointing at a host path must
/// resolve inside the rootfs (or fail), never reach the host (CVE-2021-30465 family).
#[test]
fn mount_destination_symlink_stays_in_rootfs() {
    require_root!();
    let rt = Runtime::new("symlinkmnt");
    let target = rt.tempdir(); // the "host" directory the image tries to reach
    let sub = target.join("created-by-runtime");
    let b = rt.bundle(&["/bin/probe", "mounts"]);
    let rootfs = b.writable_rootfs();
    std::os::unix::fs::symlink(&target, rootfs.join("evil")).unwrap();
    std::os::unix::fs::symlink(&sub, rootfs.join("evil-new")).unwrap();
    std::os::unix::fs::symlink(target.join("file"), rootfs.join("evil-file")).unwrap();
    let src_file = rt.tempdir().join("src-file");
    std::fs::write(&src_file, "bound\n").unwrap();
    b.add_mount(json!({"destination": "/evil", "type": "tmpfs", "source": "tmpfs"}));
    b.add_mount(json!({"destination": "/evil-new", "type": "tmpfs", "source": "tmpfs"}));
    b.add_mount(json!({"destination": "/evil-file", "type": "bind", "source": src_file, "options": ["bind", "ro"]}));

    let o = rt.create(&b);
    assert_host_dir_untouched(&target);
    if !o.ok() {
        eprintln!("runtime refused the symlinked destinations (acceptable):\n{o}");
        rt.assert_nothing_left(&b.id);
        return;
    }
    rt.run(&["start", &b.id]).expect_ok("start");
    rt.wait_status(&b.id, "stopped");
    assert_host_dir_untouched(&target);
    // Inside, the symlinks resolve against the container root, so that is where the mounts are.
    let mounts = mountinfo(&o.stdout_now());
    for p in [target.clone(), sub, target.join("file")] {
        let p = p.to_str().unwrap();
        assert!(mount_at(&mounts, p).is_some(), "expected a mount at {p} inside the container\n{}", o.stdout_now());
    }
    assert!(rootfs.join(target.strip_prefix("/").unwrap()).is_dir(), "mountpoint created inside the rootfs");
}

/// SECURITY: a masked path that is a symlink to a host file must not mask (or touch) the host
/// file; the same for a read-only path.
#[test]
fn masked_path_symlink_stays_in_rootfs() {
    require_root!();
    let rt = Runtime::new("symlinkmask");
    let target = rt.tempdir();
    let secret = target.join("secret");
    std::fs::write(&secret, "host-secret\n").unwrap();
    let b = rt.bundle(&["/bin/probe", "exit", "0"]);
    let rootfs = b.writable_rootfs();
    std::os::unix::fs::symlink(&secret, rootfs.join("etc/masklink")).unwrap();
    std::os::unix::fs::symlink(&target, rootfs.join("etc/rolink")).unwrap();
    b.config_mut(|c| {
        c["linux"]["maskedPaths"].as_array_mut().unwrap().push("/etc/masklink".into());
        c["linux"]["readonlyPaths"].as_array_mut().unwrap().push("/etc/rolink".into());
    });
    let o = rt.create(&b);
    let check_host = || {
        assert!(mounts_under(&target).is_empty(), "host path mounted over");
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "host-secret\n", "host file changed");
        let n = std::fs::read_dir(&target).unwrap().count();
        assert_eq!(n, 1, "host dir gained entries");
    };
    check_host();
    if o.ok() {
        rt.run(&["start", &b.id]).expect_ok("start");
        rt.wait_status(&b.id, "stopped");
        check_host();
    } else {
        eprintln!("runtime refused the symlinked masked path (acceptable):\n{o}");
        rt.assert_nothing_left(&b.id);
    }
}
