//! `tinyrun sandbox --image`, `--copy-in`, `sandbox cp` and `--report-writes`, driven through the
//! binary. Images are built here, with no registry: `bundles/mkrootfs` for a root filesystem
//! directory and `bundles/mkimage --layout` for an OCI image layout with two layers, a whiteout and
//! an opaque directory; hostile layouts are written by a small Python script below.
//!
//! Checked: layers stack with their whiteouts, image owners show as the box's own ids, the cache
//! is unpacked once and reused, writes in a launched box persist between execs and never reach the
//! cache (every cached file's content and metadata compared before and after), terminate and a
//! killed supervisor leave no mount behind; hostile archives (`..`, absolute names, a symlinked
//! parent, a device node, a blob that doesn't match its digest) are refused or defused with
//! nothing written outside; copying out never follows a symlink the box planted (one out of the
//! copy is refused) and copying in never writes through one; copy caps give clear errors and leave
//! nothing half done.
//!
//! Each test prints `SANDBOX <name>: <what it saw>` before it asserts.

use std::collections::BTreeMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tinyrun_conformance::sandbox::{image_layer_dirs, mountinfo_lines, names_in, saw, text, wait_for, Sbx};
use tinyrun_conformance::{require_root, workspace_root};

fn open(p: &Path) {
    fs::set_permissions(p, fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A busybox rootfs (mkrootfs) and an OCI layout over it with a second layer owned by 1000 that
/// adds /app/new, /app/data and /etc/motd, whites out /app/doomed and makes /opt opaque.
fn images(sb: &Sbx) -> (PathBuf, PathBuf) {
    let dir = sb.rt.tempdir();
    open(&dir);
    let rootfs = dir.join("rootfs");
    let st = Command::new(workspace_root().join("bundles/mkrootfs")).arg(&rootfs).stdout(Stdio::null()).status();
    assert!(st.expect("mkrootfs").success(), "mkrootfs failed");
    fs::create_dir_all(rootfs.join("app")).unwrap();
    fs::write(rootfs.join("app/doomed"), "doomed\n").unwrap();
    fs::create_dir_all(rootfs.join("opt/old")).unwrap();
    fs::write(rootfs.join("opt/old/f"), "old\n").unwrap();
    let l2 = dir.join("l2");
    fs::create_dir_all(l2.join("app")).unwrap();
    fs::create_dir_all(l2.join("etc")).unwrap();
    fs::write(l2.join("app/new"), "v2\n").unwrap();
    fs::write(l2.join("app/data"), "original\n").unwrap();
    fs::write(l2.join("etc/motd"), "from layer 2\n").unwrap();
    let layout = dir.join("layout");
    let st = Command::new(workspace_root().join("bundles/mkimage"))
        .arg(&rootfs)
        .args(["localhost/sbx-test:1"])
        .arg(&layout)
        .arg("--layer")
        .arg(&l2)
        .args(["--layer-owner", "1000", "--whiteout", "/app/doomed", "--opaque", "/opt", "--layout"])
        .status();
    assert!(st.expect("mkimage").success(), "mkimage --layout failed");
    (layout, rootfs)
}

/// Every file of the cache: path → (a hash of its content, mode, uid, gid, size, mtime).
fn cache_sums(sb: &Sbx) -> BTreeMap<PathBuf, (u64, u32, u32, u32, u64, i64)> {
    fn walk(d: &Path, out: &mut BTreeMap<PathBuf, (u64, u32, u32, u32, u64, i64)>) {
        for e in fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            let m = fs::symlink_metadata(&p).unwrap();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            if m.is_file() {
                fs::read(&p).unwrap().hash(&mut h);
            } else if m.file_type().is_symlink() {
                fs::read_link(&p).unwrap().hash(&mut h);
            }
            out.insert(p.clone(), (h.finish(), m.mode(), m.uid(), m.gid(), m.size(), m.mtime()));
            if m.is_dir() {
                walk(&p, out);
            }
        }
    }
    // The layers only: their `.used` stamps change with every box that uses them.
    let mut out = BTreeMap::new();
    let layers = sb.rt.root().join("sandbox-images/layers");
    for l in layer_dirs(sb) {
        walk(&layers.join(l), &mut out);
    }
    out
}

fn layer_dirs(sb: &Sbx) -> Vec<String> {
    image_layer_dirs(sb.rt.root())
}

/// Layers stack with whiteouts and opaque dirs; an image file owned by 0 is the box's root's, one
/// owned by 1000 the box user's; the image's Env reaches the box; the cache is made once, then
/// reused; a root filesystem directory works too. Times the first (unpacking) and a cached run.
#[test]
fn image_layers_owners_and_cache() {
    require_root!();
    let sb = Sbx::new("sbx_image");
    let (layout, rootfs) = images(&sb);
    let l = layout.to_str().unwrap();
    let script = "cat /etc/motd; ls /app; ls /opt | wc -l; /bin/probe stat /bin/busybox | grep uid; \
                  /bin/probe stat /app/data | grep uid; echo PATH=$PATH";
    let t0 = Instant::now();
    let first = sb.run(&["--image", l], &["sh", "-c", script]);
    let first_ms = t0.elapsed().as_millis();
    let layers_after_first = layer_dirs(&sb);
    let sums = cache_sums(&sb);
    let t1 = Instant::now();
    let cached = sb.run(&["--image", l], &["true"]);
    let cached_ms = t1.elapsed().as_millis();
    let t2 = Instant::now();
    let plain = sb.run(&[], &["true"]);
    assert!(plain.ok(), "{plain}");
    let plain_ms = t2.elapsed().as_millis();
    let dir = sb.run(&["--image", rootfs.to_str().unwrap()], &["sh", "-c", "cat /etc/passwd | head -1; ls /app"]);
    saw(
        "image",
        format!(
            "first run (unpacking 2 layers) {first_ms} ms: {:?} stderr {:?}; cached run {cached_ms} ms (exit {:?}); \
             no image {plain_ms} ms; layers in cache {layers_after_first:?}; --image DIR: {:?} {:?}",
            first.stdout,
            first.stderr,
            cached.code(),
            dir.stdout,
            dir.stderr
        ),
    );
    assert!(first.ok(), "{first}");
    let lines: Vec<&str> = first.stdout.lines().collect();
    assert_eq!(lines[0], "from layer 2", "the top layer's file\n{first}");
    assert_eq!(&lines[1..3], ["data", "new"], "/app/doomed is whited out, layer 2's files are there\n{first}");
    assert_eq!(lines[3].trim(), "0", "/opt is opaque: the lower layer's /opt/old is hidden\n{first}");
    assert_eq!(lines[4], "uid=0", "an image file owned by 0 is owned by the box's root\n{first}");
    assert_eq!(lines[5], "uid=1000", "an image file owned by 1000 is the box user's\n{first}");
    assert!(lines[6].starts_with("PATH=/usr/local/sbin"), "the image's Env\n{first}");
    assert_eq!(layers_after_first.len(), 2, "one cache dir per layer: {layers_after_first:?}");
    assert!(cached.ok(), "{cached}");
    assert_eq!(cache_sums(&sb), sums, "the second run unpacked again or changed the cache");
    assert!(dir.ok() && dir.stdout.contains("root:x:0:0") && dir.stdout.contains("doomed"), "{dir}");
    sb.assert_clean("image runs");
}

/// In a launched image box, files written in one exec (to the image's /app and to $HOME) are there
/// in the next; the image's own file is changed and removed in the box, yet every cached file is
/// unchanged; after terminate nothing is mounted and a new box sees the image as it was.
#[test]
fn image_writes_persist_and_never_touch_the_cache() {
    require_root!();
    let sb = Sbx::new("sbx_image_writes");
    let (layout, _) = images(&sb);
    let l = layout.to_str().unwrap();
    let app = sb.rt.tempdir();
    fs::write(app.join("main.sh"), "echo app ran\n").unwrap();
    // The image has an /app: `DIR/.` puts the directory's entries in it, as `docker cp` does.
    let copy = format!("{}/.:/app", app.display());
    let id = sb.launch(&["--image", l, "--tmpfs-size", "8M", "--copy-in", &copy]);
    let before = cache_sums(&sb);
    let w = sb.raw(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo mine > /app/x && echo changed > /app/data && rm /app/new && mkdir -p $HOME/.local/lib \
         && echo pkg > $HOME/.local/lib/pkg.py && sh /app/main.sh",
    ]);
    let r = sb.raw(&["exec", &id, "--", "sh", "-c", "cat /app/x /app/data $HOME/.local/lib/pkg.py; ls /app"]);
    let full = sb.raw(&["exec", &id, "--", "sh", "-c", "dd if=/dev/zero of=/app/big bs=1M count=16 2>&1; echo rc=$?"]);
    let after = cache_sums(&sb);
    let mounted = mountinfo_lines(&id);
    let t = sb.raw(&["terminate", &id]);
    let left = mountinfo_lines(&id);
    let fresh = sb.run(&["--image", l], &["sh", "-c", "cat /app/data; ls /app"]);
    let changed: Vec<_> = before.iter().filter(|(p, v)| after.get(*p) != Some(v)).map(|(p, _)| p.clone()).collect();
    saw(
        "image_writes",
        format!(
            "exec write: {:?} {:?}; next exec read: {:?}; 16M into an 8M upper: {:?}; mounts while launched: {}; \
             cache files {} before, {} after, changed {changed:?}; terminate exit {:?}, mounts after: {left:?}; \
             new box: {:?}",
            w.stdout,
            w.stderr,
            r.stdout,
            full.stdout.lines().last(),
            mounted.len(),
            before.len(),
            after.len(),
            t.code(),
            fresh.stdout
        ),
    );
    assert!(w.ok() && w.stdout.contains("app ran"), "{w}");
    assert_eq!(r.stdout, "mine\nchanged\npkg\ndata\nmain.sh\nx\n", "writes persist between execs\n{r}");
    assert!(full.stdout.contains("No space left") && full.stdout.contains("rc=1"), "the upper is capped\n{full}");
    assert!(!before.is_empty() && changed.is_empty() && before.len() == after.len(), "the cache changed: {changed:?}");
    assert_eq!(mounted.len(), 3, "the box's bundle and storage tmpfs and its overlay, on the host: {mounted:?}");
    assert!(t.ok() && left.is_empty(), "{t}\nmounts: {left:?}");
    assert!(fresh.ok() && fresh.stdout == "original\ndata\nnew\n", "{fresh}");
    sb.assert_clean("terminate of an image box");
}

/// The attack: a box plants `/work/out -> /etc/shadow` (and a directory link `/work/d -> /etc`);
/// `sandbox cp ID:/work/out` is refused (a link out of what is copied), never the host's file nor a
/// link to it; a path through `/work/d` resolves in the box's root, not the host's. Copying in over a planted `/work/in -> <host file>`
/// replaces the link in the box and leaves the host file alone. For a default box and an image box.
#[test]
fn cp_never_follows_box_symlinks() {
    require_root!();
    let sb = Sbx::new("sbx_cp_attack");
    let (layout, _) = images(&sb);
    let host = sb.rt.tempdir();
    let canary = host.join("canary");
    fs::write(&canary, "host file\n").unwrap();
    let shadow = fs::read("/etc/shadow").unwrap_or_default();
    let mut seen = Vec::new();
    for opts in [vec![], vec!["--image", layout.to_str().unwrap()]] {
        let id = sb.launch(&opts);
        let plant = format!("ln -s /etc/shadow /work/out; ln -s /etc /work/d; ln -s {} /work/in", canary.display());
        sb.raw(&["exec", &id, "--", "sh", "-c", &plant]).expect_ok("plant links");
        let out = host.join(format!("out-{}", opts.len()));
        let o1 = sb.raw(&["cp", &format!("{id}:/work/out"), out.to_str().unwrap()]);
        let through = host.join(format!("through-{}", opts.len()));
        let o2 = sb.raw(&["cp", &format!("{id}:/work/d/shadow"), through.to_str().unwrap()]);
        let src = host.join("payload");
        fs::write(&src, "payload\n").unwrap();
        let i1 = sb.raw(&["cp", src.to_str().unwrap(), &format!("{id}:/work/in")]);
        let i2 = sb.raw(&["cp", src.to_str().unwrap(), &format!("{id}:/work/d/planted-by-cp")]);
        let inside = sb.raw(&["exec", &id, "--", "sh", "-c", "ls -l /work/in; cat /work/in"]);
        let link = fs::read_link(&out).ok();
        let through_bytes = fs::read(&through).ok();
        let canary_now = fs::read_to_string(&canary).unwrap_or_default();
        let host_planted = Path::new("/etc/planted-by-cp").exists();
        seen.push(format!(
            "{}: cp out /work/out -> {:?} (exit {:?}, link target {link:?}); cp out /work/d/shadow: exit {:?} {:?}, \
             host shadow copied: {}; cp in over /work/in: exit {:?}, box sees {:?}, host canary {canary_now:?}; \
             cp in /work/d/planted-by-cp: exit {:?} {:?}, /etc/planted-by-cp on host: {host_planted}",
            if opts.is_empty() { "default box" } else { "image box" },
            out,
            o1.code(),
            o2.code(),
            o2.stderr.trim(),
            through_bytes.as_ref().is_some_and(|b| !shadow.is_empty() && *b == shadow),
            i1.code(),
            inside.stdout,
            i2.code(),
            i2.stderr.trim()
        ));
        assert!(!o1.ok() && o1.stderr.contains("/work/out is a symlink to /etc/shadow"), "{o1}");
        assert!(link.is_none() && fs::symlink_metadata(&out).is_err(), "a refused copy left {out:?}");
        assert!(through_bytes.as_ref().is_none_or(|b| shadow.is_empty() || *b != shadow), "the host's shadow leaked");
        assert!(i1.ok() && inside.stdout.contains("payload") && !inside.stdout.contains("->"), "{i1}\n{inside}");
        assert_eq!(canary_now, "host file\n", "copy-in wrote through the box's symlink to the host");
        assert!(!host_planted, "copy-in through /work/d reached the host's /etc");
        let _ = fs::remove_file("/etc/planted-by-cp");
        sb.raw(&["terminate", &id]).expect_ok("terminate");
    }
    saw("cp_attack", seen.join("; "));
    sb.assert_clean("cp attack boxes");
}

/// `--copy-limit` caps a copy with an error naming it, leaving nothing behind on either side;
/// the host's /usr, bound read-only into a box, is not copied to; `--report-writes /work` lists exactly the
/// new and changed files with their sizes.
#[test]
fn copy_caps_and_report_writes() {
    require_root!();
    let sb = Sbx::new("sbx_copy_caps");
    let host = sb.rt.tempdir();
    let big = host.join("big");
    fs::write(&big, vec![b'x'; 4096]).unwrap();
    let small = host.join("given");
    fs::write(&small, "given\n").unwrap();
    let id = sb.launch(&[]);
    let over_in = sb.raw(&["cp", "--copy-limit", "1K", big.to_str().unwrap(), &format!("{id}:/work/big")]);
    let none_in = sb.raw(&["exec", &id, "--", "ls", "-A", "/work"]);
    sb.raw(&["exec", &id, "--", "sh", "-c", "head -c 4096 /dev/zero > /work/z"]).expect_ok("write /work/z");
    let out = host.join("z-out");
    let over_out = sb.raw(&["cp", "--copy-limit", "1K", &format!("{id}:/work/z"), out.to_str().unwrap()]);
    let host_left: Vec<String> = names_in(&host).into_iter().filter(|n| n != "big" && n != "given").collect();
    let usr = sb.raw(&["cp", small.to_str().unwrap(), &format!("{id}:/usr/given")]);
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    let ci = format!("{}:/work/given", small.display());
    let (v, o) = sb.run_json(
        &["--copy-in", &ci, "--report-writes", "/work"],
        &[
            "sh",
            "-c",
            "echo hello > /work/new; mkdir /work/d; printf 12345 > /work/d/f; cat /work/given; ln -s x /work/l",
        ],
    );
    let over_run = sb.run(&["--copy-in", &ci, "--copy-limit", "3"], &["true"]);
    let files: Vec<(String, u64)> = v["writes"]["files"]
        .as_array()
        .map(|a| {
            a.iter().map(|f| (f["path"].as_str().unwrap_or("").to_string(), f["size"].as_u64().unwrap_or(0))).collect()
        })
        .unwrap_or_default();
    saw(
        "copy_caps",
        format!(
            "cp in 4K with --copy-limit 1K: exit {:?} {:?}, /work then {:?}; cp out 4K with 1K: exit {:?} {:?}, \
             host leftovers {host_left:?}; cp to /usr: {:?}; --report-writes /work: {} stdout {:?}; \
             run --copy-in over --copy-limit 3: exit {:?} {:?}",
            over_in.code(),
            over_in.stderr.trim(),
            none_in.stdout,
            over_out.code(),
            over_out.stderr.trim(),
            usr.stderr.trim(),
            v["writes"],
            text(&v, "stdout"),
            over_run.code(),
            over_run.stderr.trim()
        ),
    );
    assert!(!over_in.ok() && over_in.stderr.contains("copy size cap") && over_in.stderr.contains("--copy-limit"));
    assert_eq!(none_in.stdout, "", "nothing half copied into the box\n{none_in}");
    assert!(!over_out.ok() && over_out.stderr.contains("--copy-limit"), "{over_out}");
    assert!(host_left.is_empty(), "a capped copy out left {host_left:?}");
    assert!(
        !usr.ok() && usr.stderr.contains("/usr/given: the box's /usr is the host's /usr, bound read-only"),
        "{usr}"
    );
    assert_eq!(text(&v, "stdout"), "given\n", "{o}");
    let want = vec![("/work/d/f".to_string(), 5), ("/work/l".to_string(), 1), ("/work/new".to_string(), 6)];
    assert_eq!(files, want, "exactly the command's writes, not the copied-in file\n{o}");
    assert!(!over_run.ok() && over_run.stderr.contains("--copy-limit"), "{over_run}");
    sb.assert_clean("copy runs");
}

/// Writes an OCI layout with one uncompressed layer of hostile entries (Python's tarfile writes any
/// name); `corrupt` flips the layer's last byte after its digest was taken.
const HOSTILE: &str = r#"
import hashlib, io, json, os, sys, tarfile
out, case, canary = sys.argv[1], sys.argv[2], sys.argv[3]
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
    def add(name, kind=tarfile.REGTYPE, data=b"", link="", dev=(0, 0)):
        ti = tarfile.TarInfo(name); ti.type = kind; ti.size = len(data); ti.linkname = link; ti.mode = 0o644
        ti.devmajor, ti.devminor = dev
        t.addfile(ti, io.BytesIO(data))
    add("bin/", tarfile.DIRTYPE)
    if case == "dotdot": add("../" * 12 + canary.lstrip("/") + "/dotdot", data=b"x")
    if case == "absolute": add(canary + "/absolute", data=b"x")
    if case == "symlink-parent":
        add("evil", tarfile.SYMTYPE, link=canary)
        add("evil/through-link", data=b"x")
    if case == "hardlink-out": add("h", tarfile.LNKTYPE, link="../" * 12 + "etc/passwd")
    if case in ("device", "corrupt"):
        add("dev-sda", tarfile.BLKTYPE, dev=(8, 0))
        add("dev-mem", tarfile.CHRTYPE, dev=(1, 1))
        add("ok", data=b"fine")
layer = buf.getvalue()
blobs = os.path.join(out, "blobs", "sha256"); os.makedirs(blobs)
def put(data):
    h = hashlib.sha256(data).hexdigest()
    open(os.path.join(blobs, h), "wb").write(data)
    return {"digest": "sha256:" + h, "size": len(data)}
ld = put(layer)
if case == "corrupt":
    bad = bytearray(layer); bad[2048] ^= 0xff
    open(os.path.join(blobs, ld["digest"][7:]), "wb").write(bytes(bad))
diff = "sha256:" + hashlib.sha256(layer).hexdigest()
cfg = put(json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [diff]}}).encode())
man = put(json.dumps({"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
                      "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **ld}]}).encode())
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", **man}]},
          open(os.path.join(out, "index.json"), "w"))
open(os.path.join(out, "oci-layout"), "w").write('{"imageLayoutVersion":"1.0.0"}')
"#;

/// Hostile layers: a `..` name, an absolute name and a hard link out are refused with an error
/// naming the layer and entry, nothing is written outside, nothing is cached; a file under a
/// symlink the archive planted to a host directory lands inside the image, where the box would
/// find it (the link is followed as in the box), never in the host's directory; device nodes are
/// skipped (the layer is unpacked, no node is made); a blob that doesn't match its digest is
/// refused and not cached.
#[test]
fn hostile_layers_are_refused() {
    require_root!();
    let sb = Sbx::new("sbx_hostile_layers");
    let dir = sb.rt.tempdir();
    let canary = dir.join("canary");
    fs::create_dir_all(&canary).unwrap();
    let mut seen = Vec::new();
    let mut failures = Vec::new();
    for (case, says) in [
        ("dotdot", Some("`..`")),
        ("absolute", Some("absolute")),
        ("symlink-parent", None),
        ("hardlink-out", Some("`..`")),
        ("corrupt", Some("does not match")),
        ("device", None),
    ] {
        let layout = dir.join(case);
        let st = Command::new("python3").args(["-c", HOSTILE]).arg(&layout).arg(case).arg(&canary).status();
        assert!(st.expect("python3").success(), "writing the {case} layout failed");
        let o = sb.run(&["--image", layout.to_str().unwrap()], &["sh", "-c", "ls /"]);
        let escaped: Vec<String> = names_in(&canary);
        seen.push(format!("{case}: exit {:?} {:?} (outside: {escaped:?})", o.code(), o.stderr.trim()));
        let ok = match says {
            Some(s) => !o.ok() && o.stderr.contains(s) && o.stderr.contains("layer sha256:"),
            // The layer has no shell: the box gets as far as exec, past unpacking.
            None => !o.stderr.contains("layer sha256:") && o.stderr.contains("exec"),
        };
        if !ok || !escaped.is_empty() {
            failures.push(format!("{case}\n{o}\noutside: {escaped:?}"));
        }
    }
    // Only the symlink and device layouts' layers got into the cache; no temporary dir was left.
    let cached = layer_dirs(&sb);
    let devices = Command::new("find")
        .arg(sb.rt.root().join("sandbox-images"))
        .args(["(", "-type", "b", "-o", "-type", "c", ")", "-print"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    saw("hostile_layers", format!("{}; cache: {cached:?}; device nodes in cache: {devices:?}", seen.join("; ")));
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(cached.len(), 2, "only the accepted layers are cached, no temporary dirs: {cached:?}");
    let layers = sb.rt.root().join("sandbox-images/layers");
    let ok: Vec<Vec<u8>> = cached.iter().filter_map(|l| fs::read(layers.join(l).join("ok")).ok()).collect();
    assert_eq!(ok, [b"fine".to_vec()], "the device layer's file");
    let planted: Vec<bool> = cached
        .iter()
        .map(|l| layers.join(l).join(canary.strip_prefix("/").unwrap()).join("through-link").exists())
        .collect();
    assert!(planted.contains(&true), "the file under the planted link is in the image: {planted:?}");
    assert!(devices.trim().is_empty(), "device nodes made on the host: {devices}");
    sb.assert_clean("hostile layer runs");
}

/// A one-shot image run whose supervisor is SIGKILLed leaves its tmpfs mounts and overlay; the
/// next run's garbage collection takes them down with the rest.
#[test]
fn killed_supervisor_mounts_are_collected() {
    require_root!();
    let sb = Sbx::new("sbx_image_gc");
    let (layout, _) = images(&sb);
    let l = layout.to_str().unwrap();
    let r = sb.spawn_run(&["--image", l, "--timeout", "60s"], &["sleep", "1000"]);
    let bundles = sb.rt.root().join("sandbox-bundles");
    wait_for("the box's overlay", 20, || mountinfo_lines(&bundles.to_string_lossy()).len() == 3);
    std::thread::sleep(Duration::from_millis(300));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(r.child.id() as i32), nix::sys::signal::SIGKILL);
    let o = r.wait();
    wait_for("the box's init to die with its supervisor", 10, || {
        sb.list().iter().all(|(_, status, _)| status == "stopped")
    });
    let after_kill = mountinfo_lines(&bundles.to_string_lossy());
    let next = sb.run(&[], &["true"]);
    let after_next = mountinfo_lines(&bundles.to_string_lossy());
    saw(
        "image_gc",
        format!(
            "supervisor {}; mounts after the kill: {}; next run exit {:?}; mounts after it: {after_next:?}",
            o.status,
            after_kill.len(),
            next.code()
        ),
    );
    assert_eq!(after_kill.len(), 3, "the killed run's two tmpfs and overlay stay until collected");
    assert!(next.ok(), "{next}");
    assert!(after_next.is_empty(), "garbage collection left {after_next:?}");
    sb.assert_clean("garbage collection");
}

/// Removes a host path the attack below may have made, even when the test fails.
struct HostPath(PathBuf);

impl Drop for HostPath {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0).or_else(|_| fs::remove_file(&self.0));
    }
}

/// A root filesystem image whose /etc is an absolute symlink to a directory that exists on the
/// host (as /root or /etc/cron.d do; here one the test makes) and in the image: with `--dns`,
/// the box's /etc/resolv.conf needs a mount point, and it must be made inside the image as the
/// box resolves the link, never in the host's directory. Run in a network namespace of the
/// test's own (egress sets up there, not on the host).
#[test]
fn mount_points_never_follow_image_links_out() {
    require_root!();
    let sb = Sbx::new("sbx_image_link_out");
    let dir = sb.rt.tempdir();
    open(&dir);
    let rootfs = dir.join("rootfs");
    let st = Command::new(workspace_root().join("bundles/mkrootfs")).arg(&rootfs).stdout(Stdio::null()).status();
    assert!(st.expect("mkrootfs").success(), "mkrootfs failed");
    let escape = HostPath(PathBuf::from(format!("/tmp/tinyrun-escape-{}", sb.rt.tag())));
    fs::create_dir(&escape.0).expect("the host directory");
    let inside = rootfs.join(escape.0.strip_prefix("/").unwrap());
    fs::create_dir_all(&inside).unwrap();
    fs::rename(rootfs.join("etc/passwd"), inside.join("passwd")).unwrap();
    fs::remove_dir_all(rootfs.join("etc")).unwrap();
    std::os::unix::fs::symlink(&escape.0, rootfs.join("etc")).unwrap();
    let (ns, _) = sb.rt.bound_netns();
    let mut v = vec!["sandbox", "run"];
    v.extend(sb.common());
    let image = rootfs.to_str().unwrap();
    v.extend(["--image", image, "--network", "egress", "--dns", "192.0.2.53", "--", "cat", "/etc/resolv.conf"]);
    let inner = sb.rt.command(&v);
    let mut c = Command::new("nsenter");
    c.arg(format!("--net={}", ns.display())).arg("--").arg(inner.get_program()).args(inner.get_args());
    c.envs(inner.get_envs().filter_map(|(k, val)| Some((k, val?))));
    let o = sb.rt.output(c);
    let planted = escape.0.join("resolv.conf");
    let made_on_host = planted.exists();
    saw(sb.name, format!("host file made: {made_on_host}; the run: {:?} {:?}", o.stdout.trim(), o.stderr.trim()));
    assert!(!made_on_host, "the image's /etc link made {} on the host: {o}", planted.display());
    assert!(o.ok() && o.stdout.contains("nameserver 192.0.2.53"), "the box did not get its resolver: {o}");
    assert!(inside.join("passwd").exists(), "the image itself was changed");
    sb.assert_clean("the run");
}
