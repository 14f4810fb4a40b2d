//! Files into and out of sandbox boxes (`--copy-in`, `sandbox cp`), driven through the binary as
//! an agent's tool drives them: an app directory copied to /app of a default box and run from
//! there, `cp` anywhere in a launched box with its missing parents made, directories treated as
//! `docker cp` treats them both ways; and the attacks: a source tree whose entries are swapped for
//! symlinks to a root-only host file while it is copied in, a source with symlink loops, and box
//! symlinks to host paths copied out.
//!
//! Each test prints `SANDBOX <name>: <what it saw>` before it asserts.

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinyrun_conformance::require_root;
use tinyrun_conformance::sandbox::{names_in, saw, Sbx};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Everything under `dir`, relative, sorted; directories end with `/`, symlinks show their target.
fn listing(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                out.push(format!("{rel} -> {}", fs::read_link(&p).unwrap().display()));
            } else if m.is_dir() {
                out.push(format!("{rel}/"));
                walk(base, &p, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The attack: someone who can write the source tree (an agent's workspace) swaps its entries, over
/// and over, for symlinks into a root-only host directory (0700, holding a 0600 secret) while
/// `sandbox run --copy-in` copies it: files for a symlink to the secret, and directories for a
/// symlink to the secret's directory (so a copy that walks by path reads the secret under an
/// innocent name). Each swap is one `renameat2(RENAME_EXCHANGE)`, so every name always exists.
/// The box must never see the secret: an entry is copied as what it was when opened, a file, a
/// directory or a symlink, and never read through a link. Many runs, many entries.
#[test]
fn copy_in_never_reads_through_a_swapped_link() {
    require_root!();
    let sb = Sbx::new("sbx_copy_race");
    let dir = sb.rt.tempdir();
    let vault = dir.join("vault");
    fs::create_dir(&vault).unwrap();
    fs::set_permissions(&vault, fs::Permissions::from_mode(0o700)).unwrap();
    let word = format!("SECRET-{}-", std::process::id());
    // As long as the harmless files, so a copy capped at a file's size still shows it.
    let harmless = "x".repeat(word.len() * 8);
    fs::write(vault.join("f"), word.repeat(8)).unwrap();
    fs::set_permissions(vault.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
    let (src, spare) = (dir.join("src"), dir.join("spare"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&spare).unwrap();
    let entries = 32;
    for i in 0..entries {
        fs::write(src.join(format!("f{i}")), &harmless).unwrap();
        std::os::unix::fs::symlink(vault.join("f"), spare.join(format!("f{i}"))).unwrap();
        fs::create_dir(src.join(format!("d{i}"))).unwrap();
        fs::write(src.join(format!("d{i}/f")), &harmless).unwrap();
        std::os::unix::fs::symlink(&vault, spare.join(format!("d{i}"))).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, src, spare) = (stop.clone(), src.clone(), spare.clone());
        std::thread::spawn(move || {
            let (s, p) = (fs::File::open(&src).unwrap(), fs::File::open(&spare).unwrap());
            while !stop.load(Ordering::Relaxed) {
                for i in 0..entries {
                    for name in [format!("f{i}"), format!("d{i}")] {
                        let _ = nix::fcntl::renameat2(
                            Some(s.as_raw_fd()),
                            name.as_str(),
                            Some(p.as_raw_fd()),
                            name.as_str(),
                            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                        );
                    }
                }
            }
        })
    };
    let copy = format!("{}:/work/src", src.display());
    let (mut runs, mut completed, mut leaked, mut refused) = (0, 0, 0, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline && runs < 200 {
        runs += 1;
        let o = sb.run(&["--copy-in", &copy], &["sh", "-c", "cat /work/src/* /work/src/*/f 2>/dev/null; echo done"]);
        if o.stdout.contains("SECRET-") {
            leaked += 1;
        }
        if o.ok() && o.stdout.ends_with("done\n") {
            completed += 1;
        } else if refused.len() < 3 {
            refused.push(o.stderr.trim().to_string());
        }
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    saw(
        sb.name,
        format!("{runs} runs, {completed} completed, {leaked} saw the secret; refusals (first 3): {refused:?}"),
    );
    assert_eq!(leaked, 0, "the box read a root-only host file through a swapped symlink in {leaked} of {runs} runs");
    assert!(completed > 0, "no run completed: the test proves nothing\n{refused:?}");
    for e in &refused {
        assert!(e.contains("changed while it was copied"), "a swap may only be refused as a change: {e}");
    }
    sb.assert_clean("copy-in race runs");
}

/// A source with symlink loops (`self -> .`, `a/up -> ..`, `l1 -> l2 -> l1`) is copied in with the
/// links as links, in a fraction of a second, not refused as more than 100000 files. Copying out
/// with -L, a link that leads back into the directory being copied is a loop, said as one.
#[test]
fn symlink_loops_are_copied_as_links_or_named() {
    require_root!();
    let sb = Sbx::new("sbx_copy_loop");
    let host = sb.rt.tempdir();
    let src = host.join("loops");
    fs::create_dir_all(src.join("a")).unwrap();
    fs::write(src.join("a/f"), "in a\n").unwrap();
    std::os::unix::fs::symlink(".", src.join("self")).unwrap();
    std::os::unix::fs::symlink("..", src.join("a/up")).unwrap();
    std::os::unix::fs::symlink("l2", src.join("l1")).unwrap();
    std::os::unix::fs::symlink("l1", src.join("l2")).unwrap();
    let copy = format!("{}:/work/loops", src.display());
    let started = Instant::now();
    let o = sb.run(&["--copy-in", &copy], &["sh", "-c", "cd /work/loops && readlink self a/up l1 l2 && cat a/f"]);
    let took = started.elapsed();
    let id = sb.launch(&["--copy-in", &copy]);
    sb.raw(&["exec", &id, "--", "ln", "-s", "/work/loops", "/work/loops/a/back"]).expect_ok("plant a loop");
    let out = sb.raw(&["cp", "-L", &format!("{id}:/work/loops"), s(&host.join("out"))]);
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    saw(
        sb.name,
        format!(
            "in: exit {:?} in {took:?}: {:?} {:?}; out -L: {:?}",
            o.code(),
            o.stdout,
            o.stderr.trim(),
            out.stderr.trim()
        ),
    );
    assert!(o.ok(), "{o}");
    assert_eq!(o.stdout, ".\n..\nl2\nl1\nin a\n", "{o}");
    assert!(!out.ok() && out.stderr.contains("/work/loops/a/back: a symlink loop: it leads to /work/loops"), "{out}");
    assert!(!host.join("out").exists(), "a refused copy left a partial copy");
    sb.assert_clean("copies with loops");
}

/// The seeds' pattern: an app directory copied to /app of a box with the default root (no image)
/// and run from there, with python3 importing its sibling module and with sh; /app belongs to the
/// box's user and, the default root being read-only, is read-only in the box. The same with
/// `launch --copy-in`.
#[test]
fn app_copied_to_slash_app_of_a_default_box_runs() {
    require_root!();
    let sb = Sbx::new("sbx_copy_app");
    let app = sb.rt.tempdir().join("app");
    fs::create_dir_all(app.join("lib")).unwrap();
    fs::write(app.join("main.py"), "import helper\nprint('app says', helper.ANSWER)\n").unwrap();
    fs::write(app.join("helper.py"), "ANSWER = 42\n").unwrap();
    fs::write(app.join("lib/run.sh"), "echo sh ran from $(dirname $0)\n").unwrap();
    let copy = format!("{}:/app", app.display());
    let script = "python3 /app/main.py && sh /app/lib/run.sh && stat -c '%U %a' /app /app/main.py \
                  && (touch /app/new 2>/dev/null && echo writable || echo read-only)";
    let o = sb.run(&["--copy-in", &copy], &["sh", "-c", script]);
    let id = sb.launch(&["--copy-in", &copy]);
    let e = sb.raw(&["exec", &id, "--", "python3", "/app/main.py"]);
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    saw(
        sb.name,
        format!(
            "run: exit {:?} {:?} {:?}; launched: {:?} {:?}",
            o.code(),
            o.stdout,
            o.stderr.trim(),
            e.stdout,
            e.stderr.trim()
        ),
    );
    assert!(o.ok(), "{o}");
    assert_eq!(o.stdout, "app says 42\nsh ran from /app/lib\nsandbox 755\nsandbox 644\nread-only\n", "{o}");
    assert!(e.ok() && e.stdout == "app says 42\n", "{e}");
    sb.assert_clean("/app copy-ins");
}

/// `sandbox cp` into a launched box makes missing parents, owned by the box's user, anywhere in its
/// root (/app/sub) and in /work; what is copied into the root of a running box is visible in it at
/// once. Paths under the host's read-only binds, /proc and /dev are refused, naming the mount.
#[test]
fn cp_into_a_launched_box_makes_parents() {
    require_root!();
    let sb = Sbx::new("sbx_cp_parents");
    let host = sb.rt.tempdir();
    let file = host.join("file");
    fs::write(&file, "copied in\n").unwrap();
    let id = sb.launch(&[]);
    let deep = sb.raw(&["cp", s(&file), &format!("{id}:/app/sub/file")]);
    let work = sb.raw(&["cp", s(&file), &format!("{id}:/work/a/b/c")]);
    let seen = sb.raw(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "cat /app/sub/file /work/a/b/c; stat -c '%U %F' /app /app/sub /work/a",
    ]);
    let refused: Vec<(String, String)> = ["/usr/local/x", "/bin/x", "/proc/x", "/dev/x", "/etc/ssl/x"]
        .iter()
        .map(|p| {
            let o = sb.raw(&["cp", s(&file), &format!("{id}:{p}")]);
            assert!(!o.ok(), "cp to {p} succeeded\n{o}");
            (p.to_string(), o.stderr.trim().to_string())
        })
        .collect();
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    saw(
        sb.name,
        format!(
            "cp to /app/sub/file: {:?}; /work/a/b/c: {:?}; box sees {:?}; refused: {refused:?}",
            deep.code(),
            work.code(),
            seen.stdout
        ),
    );
    assert!(deep.ok(), "{deep}");
    assert!(work.ok(), "{work}");
    let want = "copied in\ncopied in\nsandbox directory\nsandbox directory\nsandbox directory\n";
    assert_eq!(seen.stdout, want, "{seen}");
    for (p, e) in &refused {
        let mount = if p.starts_with("/bin") { "/usr" } else { &p[..p.rfind('/').unwrap()] };
        assert!(e.contains(p.as_str()) && e.contains(mount), "the refusal of {p} names it and {mount}: {e}");
    }
    sb.assert_clean("cp with parents");
}

/// `docker cp`'s directory rules, the same both ways: a directory into an existing directory is
/// nested under its name, `SRC/.` copies the entries, a missing DEST is made with the entries, a
/// directory over a file is refused with nothing moved; a file into a directory goes under its
/// name. On the host a missing parent is an error (docker cp makes none).
#[test]
fn cp_treats_directories_as_docker_cp_both_ways() {
    require_root!();
    let sb = Sbx::new("sbx_cp_dirs");
    let host = sb.rt.tempdir();
    let src = host.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("f"), "f\n").unwrap();
    fs::write(src.join("sub/g"), "g\n").unwrap();
    let id = sb.launch(&[]);
    let b = |p: &str| format!("{id}:{p}");
    sb.raw(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "mkdir /work/in /work/dot && echo old > /work/in/keep && touch /work/file",
    ])
    .expect_ok("make dirs");
    let ins = [
        sb.raw(&["cp", s(&src), &b("/work/in")]),
        sb.raw(&["cp", &format!("{}/.", src.display()), &b("/work/dot")]),
        sb.raw(&["cp", s(&src), &b("/work/new")]),
        sb.raw(&["cp", &format!("{}", src.join("f").display()), &b("/work/in")]),
    ];
    let over = sb.raw(&["cp", s(&src), &b("/work/file")]);
    let box_tree = sb.raw(&["exec", &id, "--", "sh", "-c", "cd /work && find in dot new file | sort"]);
    // And out, into a copy of the same layout on the host.
    let out = host.join("out");
    fs::create_dir_all(out.join("in")).unwrap();
    fs::create_dir_all(out.join("dot")).unwrap();
    fs::write(out.join("in/keep"), "old\n").unwrap();
    fs::write(out.join("file"), "").unwrap();
    let outs = [
        sb.raw(&["cp", &b("/work/new"), s(&out.join("in"))]),
        sb.raw(&["cp", &b("/work/new/."), s(&out.join("dot"))]),
        sb.raw(&["cp", &b("/work/new"), s(&out.join("new"))]),
        sb.raw(&["cp", &b("/work/new/f"), s(&out.join("in"))]),
    ];
    let out_over = sb.raw(&["cp", &b("/work/new"), s(&out.join("file"))]);
    let no_parent = sb.raw(&["cp", &b("/work/new/f"), s(&out.join("missing/f"))]);
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    let host_tree = listing(&out);
    saw(
        sb.name,
        format!(
            "in: {:?}, dir over file: {:?} {:?}; box: {:?}; out: {:?}, dir over file: {:?}, missing parent: {:?}; \
             host: {host_tree:?}",
            ins.iter().map(|o| o.code()).collect::<Vec<_>>(),
            over.code(),
            over.stderr.trim(),
            box_tree.stdout,
            outs.iter().map(|o| o.code()).collect::<Vec<_>>(),
            out_over.stderr.trim(),
            no_parent.stderr.trim()
        ),
    );
    for o in ins.iter().chain(&outs) {
        assert!(o.ok(), "{o}");
    }
    let want =
        "dot\ndot/f\ndot/sub\ndot/sub/g\nfile\nin\nin/f\nin/keep\nin/src\nin/src/f\nin/src/sub\nin/src/sub/g\nnew\n\
                new/f\nnew/sub\nnew/sub/g\n";
    assert_eq!(box_tree.stdout, want, "{box_tree}");
    assert!(!over.ok() && over.stderr.contains("/work/file exists and is not a directory"), "{over}");
    let want: Vec<String> = [
        "dot/",
        "dot/f",
        "dot/sub/",
        "dot/sub/g",
        "file",
        "in/",
        "in/f",
        "in/keep",
        "in/new/",
        "in/new/f",
        "in/new/sub/",
        "in/new/sub/g",
        "new/",
        "new/f",
        "new/sub/",
        "new/sub/g",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(host_tree, want);
    assert!(!out_over.ok() && out_over.stderr.contains("exists and is not a directory"), "{out_over}");
    assert!(!no_parent.ok() && no_parent.stderr.contains("no such directory"), "{no_parent}");
    assert!(names_in(&host).iter().all(|n| !n.starts_with(".tinyrun")), "a temporary copy was left on the host");
    sb.assert_clean("cp directories");
}

/// The attack: a box plants `/work/result.txt -> /etc/passwd` (an absolute link, and a relative one
/// climbing out of a copied directory) and waits for the caller to copy its results out. The copy
/// is refused, naming the link, and leaves nothing; with -L the link is followed inside the box,
/// so the caller gets the box's /etc/passwd, never the host's; a link within the copied directory
/// stays a link; one to a file the box doesn't have (/etc/shadow) is an error, never the host's.
#[test]
fn cp_out_never_leaves_a_link_to_a_host_path() {
    require_root!();
    let sb = Sbx::new("sbx_cp_links_out");
    let host = sb.rt.tempdir();
    let host_passwd = fs::read_to_string("/etc/passwd").unwrap();
    let id = sb.launch(&[]);
    let plant = "ln -s /etc/passwd /work/result.txt && ln -s /etc/shadow /work/shadow && mkdir /work/out \
                 && echo data > /work/out/data && ln -s data /work/out/ok && ln -s ../../etc/passwd /work/out/up";
    sb.raw(&["exec", &id, "--", "sh", "-c", plant]).expect_ok("plant links");
    let b = |p: &str| format!("{id}:{p}");
    let plain = sb.raw(&["cp", &b("/work/result.txt"), s(&host.join("r1"))]);
    let plain_dir = sb.raw(&["cp", &b("/work/out"), s(&host.join("d1"))]);
    let left = names_in(&host);
    let followed = sb.raw(&["cp", "-L", &b("/work/result.txt"), s(&host.join("r2"))]);
    let followed_dir = sb.raw(&["cp", "--follow-link", &b("/work/out"), s(&host.join("d2"))]);
    let shadow = sb.raw(&["cp", "-L", &b("/work/shadow"), s(&host.join("s"))]);
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    let r2 = fs::read_to_string(host.join("r2")).unwrap_or_default();
    let d2 = listing(&host.join("d2"));
    let up = fs::read_to_string(host.join("d2/up")).unwrap_or_default();
    saw(
        sb.name,
        format!(
            "plain: {:?} / {:?}, host then {left:?}; -L: {:?} (box passwd: {}), dir {d2:?} (up is the box's: {}); \
             -L to /etc/shadow: {:?}",
            plain.stderr.trim(),
            plain_dir.stderr.trim(),
            followed.code(),
            r2.contains("sandbox:x:1000"),
            up.contains("sandbox:x:1000"),
            shadow.stderr.trim()
        ),
    );
    assert!(!plain.ok() && plain.stderr.contains("/work/result.txt is a symlink to /etc/passwd"), "{plain}");
    assert!(
        !plain_dir.ok() && plain_dir.stderr.contains("/work/out/up is a symlink to ../../etc/passwd"),
        "{plain_dir}"
    );
    assert!(left.is_empty(), "a refused copy left {left:?} on the host");
    assert!(followed.ok() && followed_dir.ok(), "{followed}\n{followed_dir}");
    assert!(!fs::symlink_metadata(host.join("r2")).unwrap().file_type().is_symlink());
    assert!(r2.contains("sandbox:x:1000") && r2 != host_passwd, "-L gave {r2:?}, not the box's /etc/passwd");
    assert_eq!(d2, ["data", "ok -> data", "up"], "a link inside the copy stays a link, one out is followed");
    assert!(up.contains("sandbox:x:1000") && up != host_passwd, "{up:?}");
    assert!(
        !shadow.ok() && !host.join("s").exists() && shadow.stderr.contains("/work/shadow -> /etc/shadow"),
        "{shadow}"
    );
    sb.assert_clean("cp out of links");
}
