//! Applying layers and reading layouts against hand-made archives, hostile
//! ones included. Unpacking sets owners, and applying a layer onto the
//! ones below mounts an overlay, both of which need the host's root:
//! without it these tests say so and pass.

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use sha2::{Digest, Sha256};
use tinyrun::tree::Tree;

use super::unpack::{unpack, Limits, Stats, View};
use super::{prepare, Source, Target};

fn root() -> bool {
    let r = nix::unistd::geteuid().is_root();
    if !r {
        eprintln!("skipped: unpacking needs root");
    }
    r
}

/// A tar entry; `name` goes into the header as raw bytes, so names the tar
/// crate would refuse to write (`..`, absolute) can be made.
struct E<'a> {
    name: &'a [u8],
    kind: tar::EntryType,
    data: &'a [u8],
    link: &'a [u8],
    uid: u64,
    mode: u32,
}

fn e(name: &'static str, kind: tar::EntryType) -> E<'static> {
    E { name: name.as_bytes(), kind, data: b"", link: b"", uid: 0, mode: 0o644 }
}

fn tar_of(entries: &[E<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for x in entries {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..x.name.len()].copy_from_slice(x.name);
        h.as_old_mut().linkname[..x.link.len()].copy_from_slice(x.link);
        h.set_entry_type(x.kind);
        h.set_size(x.data.len() as u64);
        h.set_uid(x.uid);
        h.set_gid(x.uid);
        h.set_mode(x.mode);
        h.set_cksum();
        b.append(&h, x.data).unwrap();
    }
    b.into_inner().unwrap()
}

/// Unpacks `entries` as a bottom layer into `dir`.
fn unpack_into(dir: &Path, entries: &[E<'_>], limits: Limits) -> Result<Stats, String> {
    std::fs::create_dir_all(dir).unwrap();
    let tree = Tree::open_one_mount(dir).unwrap();
    unpack(tar_of(entries).as_slice(), &View { tree: &tree, has_lower: false }, limits)
}

#[test]
fn owners_are_the_images_own_and_types_are_kept() {
    if !root() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("layer");
    use tar::EntryType as T;
    let stats = unpack_into(
        &d,
        &[
            E { mode: 0o755, ..e("app/", T::Directory) },
            E { data: b"hello", uid: 1000, mode: 0o4755, ..e("app/run", T::Regular) },
            E { data: b"x", uid: 70_000, ..e("app/big-uid", T::Regular) },
            E { link: b"/etc/shadow", ..e("app/abs-link", T::Symlink) },
            E { link: b"app/run", ..e("app/hard", T::Link) },
            e("dev/null", T::Char),
            e("app/fifo", T::Fifo),
            E { data: b"deep", ..e("no/parent/listed", T::Regular) },
            e(".wh.nothing-below", T::Regular),
        ],
        Limits::default(),
    )
    .unwrap();
    assert_eq!((stats.entries, stats.devices_skipped), (9, 1));
    let run = std::fs::metadata(d.join("app/run")).unwrap();
    assert_eq!((run.uid(), run.gid()), (1000, 1000), "the image's own ids");
    assert_eq!(run.mode() & 0o7777, 0o4755, "set-id bits survive the chown");
    assert_eq!(std::fs::metadata(d.join("app/big-uid")).unwrap().uid(), 65_534, "an id past 65535 is nobody");
    assert_eq!(std::fs::read_link(d.join("app/abs-link")).unwrap(), Path::new("/etc/shadow"));
    assert_eq!(std::fs::metadata(d.join("app/hard")).unwrap().ino(), run.ino());
    assert!(!d.join("dev/null").exists(), "no device node is made on the host");
    assert!(std::fs::symlink_metadata(d.join("app/fifo")).unwrap().file_type().is_fifo());
    assert_eq!(std::fs::read(d.join("no/parent/listed")).unwrap(), b"deep");
    assert!(std::fs::symlink_metadata(d.join("nothing-below")).is_err(), "a bottom layer's whiteout makes nothing");
}

#[test]
fn hostile_names_are_refused_and_nothing_escapes() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let abs_file = format!("{}/abs", outside.display());
    let cases: Vec<(&str, Vec<E<'_>>, &str)> = vec![
        ("absolute", vec![E { data: b"x", ..E { name: abs_file.as_bytes(), ..e("", T::Regular) } }], "absolute"),
        ("dotdot", vec![E { data: b"x", ..e("../outside/dotdot", T::Regular) }], "`..`"),
        ("inner dotdot", vec![E { data: b"x", ..e("a/../../outside/in", T::Regular) }], "`..`"),
        ("hard link out", vec![E { link: b"../outside/f", ..e("h", T::Link) }], "`..`"),
        ("hard link absolute", vec![E { link: b"/etc/passwd", ..e("h", T::Link) }], "absolute"),
        ("parent is a file", vec![e("f", T::Regular), e("f/x", T::Regular)], "not a directory"),
    ];
    for (what, entries, says) in cases {
        let d = t.path().join(what.replace(' ', "-"));
        let err = unpack_into(&d, &entries, Limits::default()).unwrap_err();
        assert!(err.contains(says), "{what}: {err}");
        let left: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
        assert!(left.is_empty(), "{what}: wrote outside the layer: {left:?}");
    }
}

/// Links the archive plants are followed as the box would follow them:
/// inside the layer, an absolute one or one full of `..` included.
#[test]
fn symlinked_parents_stay_inside_the_image() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let target = outside.to_str().unwrap().as_bytes().to_vec();
    let d = t.path().join("layer");
    unpack_into(
        &d,
        &[
            E { link: &target, ..e("escape", T::Symlink) },
            E { data: b"x", ..e("escape/through-link", T::Regular) },
            E { link: b"../../../../..", ..e("up", T::Symlink) },
            E { data: b"y", ..e("up/top", T::Regular) },
        ],
        Limits::default(),
    )
    .unwrap();
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing outside the layer");
    assert_eq!(std::fs::read(d.join(outside.strip_prefix("/").unwrap()).join("through-link")).unwrap(), b"x");
    assert_eq!(std::fs::read(d.join("top")).unwrap(), b"y");
    assert!(std::fs::symlink_metadata(d.join("escape")).unwrap().file_type().is_symlink(), "the link stays a link");
}

#[test]
fn caps_on_entries_and_bytes() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let many: Vec<E<'_>> = (0..5).map(|_| e("f", T::Regular)).collect();
    let err = unpack_into(&t.path().join("a"), &many, Limits { max_entries: 3, ..Limits::default() }).unwrap_err();
    assert!(err.contains("more than 3 entries"), "{err}");
    let big = [E { data: &[7u8; 20], ..e("f", T::Regular) }];
    let err = unpack_into(&t.path().join("b"), &big, Limits { max_bytes: 10, ..Limits::default() }).unwrap_err();
    assert!(err.contains("more than 10 bytes"), "{err}");
}

fn hex(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// One image of a layout: its tag, its layers' tars (bottom first), and
/// what its config's `config` holds (JSON members).
struct Img<'a> {
    tag: Option<&'a str>,
    tars: Vec<Vec<u8>>,
    config: &'a str,
}

/// An OCI layout of `images`, each layer gzipped; `corrupt` flips a byte
/// of the last layer blob after its digest was taken.
fn layout(dir: &Path, images: &[Img<'_>], corrupt: bool) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |data: &[u8]| {
        let h = hex(data);
        std::fs::write(blobs.join(&h), data).unwrap();
        format!(r#""digest":"sha256:{h}","size":{}"#, data.len())
    };
    let mut entries = Vec::new();
    for img in images {
        let mut layers = Vec::new();
        for tar in &img.tars {
            let blob = gz_of(tar);
            let desc = put(&blob);
            if corrupt {
                let mut bad = blob.clone();
                let last = bad.len() - 1;
                bad[last] ^= 0xff;
                std::fs::write(blobs.join(hex(&blob)), bad).unwrap();
            }
            layers.push(format!(r#"{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip",{desc}}}"#));
        }
        let diffs: Vec<String> = img.tars.iter().map(|t| format!(r#""sha256:{}""#, hex(t))).collect();
        let config = format!(
            r#"{{"architecture":"amd64","os":"linux","config":{{{}}},"rootfs":{{"type":"layers","diff_ids":[{}]}}}}"#,
            img.config,
            diffs.join(",")
        );
        let manifest = format!(
            r#"{{"schemaVersion":2,"config":{{"mediaType":"application/vnd.oci.image.config.v1+json",{}}},"layers":[{}]}}"#,
            put(config.as_bytes()),
            layers.join(",")
        );
        let ann = img.tag.map(|t| format!(r#","annotations":{{"org.opencontainers.image.ref.name":"{t}"}}"#));
        entries.push(format!(
            r#"{{"mediaType":"application/vnd.oci.image.manifest.v1+json",{}{}}}"#,
            put(manifest.as_bytes()),
            ann.unwrap_or_default()
        ));
    }
    std::fs::write(dir.join("index.json"), format!(r#"{{"schemaVersion":2,"manifests":[{}]}}"#, entries.join(",")))
        .unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

fn gz_of(tar: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(tar).unwrap();
    gz.finish().unwrap()
}

/// A runtime root with a bundle dir for each of `boxes`.
fn state(t: &Path, boxes: &[&str]) -> std::path::PathBuf {
    let state = t.join("state");
    for b in boxes {
        std::fs::create_dir_all(state.join("sandbox-bundles").join(b)).unwrap();
    }
    state
}

fn target<'a>(state: &'a Path, bundle: &'a Path, cache_size: u64) -> Target<'a> {
    Target { root: state, bundle, limits: Limits::default(), cache_size }
}

/// Layer 2 adds `lib/x` (no directory entry for `lib`) over layer 1's
/// `lib -> usr/lib`, whites out a file, makes a directory opaque, and
/// whites out a file it also adds: the layer lands as an engine puts it.
#[test]
fn layers_apply_onto_the_view_below() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let l1 = tar_of(&[
        E { mode: 0o755, ..e("usr/lib/", T::Directory) },
        E { data: b"lower", ..e("usr/lib/old", T::Regular) },
        E { link: b"usr/lib", ..e("lib", T::Symlink) },
        E { data: b"gone", ..e("etc/gone", T::Regular) },
        E { data: b"old", ..e("opq/old", T::Regular) },
        E { data: b"a", ..e("keep/a", T::Regular) },
    ]);
    let l2 = tar_of(&[
        E { data: b"new", ..e("lib/x", T::Regular) },
        e("etc/.wh.gone", T::Regular),
        E { data: b"new", ..e("opq/new", T::Regular) },
        e("opq/.wh..wh..opq", T::Regular),
        E { data: b"mine", ..e("keep/a", T::Regular) },
        e("keep/.wh.a", T::Regular),
    ]);
    let dir = t.path().join("img");
    layout(&dir, &[Img { tag: None, tars: vec![l1, l2], config: r#""Cmd":["sh"]"# }], false);
    let state = state(t.path(), &["box"]);
    let bundle = state.join("sandbox-bundles/box");
    let p = prepare(&Source::open(&dir).unwrap(), &target(&state, &bundle, u64::MAX)).unwrap();
    let (top, bottom) = (p.dir.join(&p.layers[0]), p.dir.join(&p.layers[1]));
    assert_eq!(std::fs::read(top.join("usr/lib/x")).unwrap(), b"new", "x went through the link below");
    assert!(std::fs::symlink_metadata(top.join("lib")).is_err(), "no real lib/ hides the link");
    assert!(std::fs::symlink_metadata(bottom.join("lib")).unwrap().file_type().is_symlink());
    let gone = std::fs::symlink_metadata(top.join("etc/gone")).unwrap();
    assert!(gone.file_type().is_char_device() && gone.rdev() == 0, "a whiteout in overlay's own format");
    let old = std::fs::symlink_metadata(top.join("opq/old")).unwrap();
    assert!(old.file_type().is_char_device(), "the opaque directory hides what is below");
    assert_eq!(std::fs::read(top.join("opq/new")).unwrap(), b"new", "but not what the layer adds");
    assert_eq!(std::fs::read(top.join("keep/a")).unwrap(), b"mine", "a whiteout hides nothing of its own layer");
    let record = std::fs::read_to_string(bundle.join("image-layers")).unwrap();
    assert_eq!(record.lines().count(), 2, "the box records both layers: {record}");
}

#[test]
fn layers_are_verified_cached_once_and_never_half_there() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let state = state(t.path(), &["a", "b"]);
    let (a, b) = (state.join("sandbox-bundles/a"), state.join("sandbox-bundles/b"));
    let tar = tar_of(&[E { data: b"print(1)", mode: 0o755, ..e("app/main.py", T::Regular) }]);
    let good = t.path().join("good");
    let cfg =
        r#""Env":["PATH=/bin","IMG=1"],"User":"app","WorkingDir":"/app","Entrypoint":["python3"],"Cmd":["main.py"]"#;
    layout(&good, &[Img { tag: None, tars: vec![tar.clone()], config: cfg }], false);
    let src = Source::open(&good).unwrap();
    let p = prepare(&src, &target(&state, &a, u64::MAX)).unwrap();
    let c = p.config.clone().unwrap();
    assert_eq!(c.env, ["PATH=/bin", "IMG=1"]);
    assert_eq!((c.user.as_deref(), c.working_dir.as_deref()), (Some("app"), Some("/app")));
    assert_eq!((c.entrypoint, c.cmd), (vec!["python3".to_string()], vec!["main.py".to_string()]));
    assert_eq!(p.layers.len(), 1);
    let main = p.dir.join(&p.layers[0]).join("app/main.py");
    assert_eq!(std::fs::read(&main).unwrap(), b"print(1)");
    let ino = std::fs::metadata(&main).unwrap().ino();
    let again = prepare(&src, &target(&state, &b, u64::MAX)).unwrap();
    let ino2 = std::fs::metadata(again.dir.join(&again.layers[0]).join("app/main.py")).unwrap().ino();
    assert_eq!(ino2, ino, "cached, not unpacked again, for another box");
    let cache = state.join("sandbox-images");
    assert_eq!(std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777, 0o700);

    let bad = t.path().join("bad");
    let other = tar_of(&[E { data: b"other", ..e("f", T::Regular) }]);
    layout(&bad, &[Img { tag: None, tars: vec![other], config: "" }], true);
    let err = prepare(&Source::open(&bad).unwrap(), &target(&state, &a, u64::MAX)).unwrap_err().to_string();
    assert!(err.contains("does not match") || err.contains("gzip") || err.contains("corrupt"), "{err}");
    let left: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .chain(std::fs::read_dir(cache.join("layers")).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.iter().filter(|n| n.starts_with(".tmp")).count(), 0, "{left:?}");
    assert_eq!(left.iter().filter(|n| n.len() == 64).count(), 1, "only the good layer is cached: {left:?}");
}

/// Over its cap, the cache drops the layers no box records, least
/// recently used first, and keeps those a box records.
#[test]
fn eviction_spares_layers_in_use() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let state = state(t.path(), &["a", "b"]);
    let (a, b) = (state.join("sandbox-bundles/a"), state.join("sandbox-bundles/b"));
    let (ia, ib) = (t.path().join("ia"), t.path().join("ib"));
    layout(&ia, &[Img { tag: None, tars: vec![tar_of(&[E { data: b"a", ..e("a", T::Regular) }])], config: "" }], false);
    layout(&ib, &[Img { tag: None, tars: vec![tar_of(&[E { data: b"b", ..e("b", T::Regular) }])], config: "" }], false);
    let pa = prepare(&Source::open(&ia).unwrap(), &target(&state, &a, 0)).unwrap();
    let pb = prepare(&Source::open(&ib).unwrap(), &target(&state, &b, 0)).unwrap();
    let layer_a = pa.dir.join(&pa.layers[0]);
    assert!(layer_a.is_dir(), "box a still records its layer: kept over the cap");
    std::fs::remove_dir_all(&a).unwrap();
    prepare(&Source::open(&ib).unwrap(), &target(&state, &b, 0)).unwrap();
    assert!(!layer_a.exists(), "a layer no box uses goes once the cache is over its cap");
    assert!(pb.dir.join(&pb.layers[0]).is_dir(), "the layer in use stays");
    let usage: u64 = std::fs::read_to_string(state.join("sandbox-images/usage")).unwrap().trim().parse().unwrap();
    assert!(usage > 0 && usage < 1 << 20, "{usage}");
}

#[test]
fn tags_pick_an_image_and_several_untagged_are_refused() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("two");
    let one = |d: &'static [u8]| vec![tar_of(&[E { data: d, ..e("f", T::Regular) }])];
    layout(
        &dir,
        &[
            Img { tag: Some("v1"), tars: one(b"1"), config: r#""Cmd":["one"]"# },
            Img { tag: Some("v2"), tars: one(b"2"), config: r#""Cmd":["two"]"# },
        ],
        false,
    );
    let cfg = |arg: &str| Source::open(Path::new(arg)).unwrap().config().unwrap().unwrap().cmd;
    let d = dir.to_str().unwrap();
    assert_eq!(cfg(&format!("{d}:v1")), ["one"]);
    assert_eq!(cfg(&format!("{d}:v2")), ["two"]);
    let e = Source::open(&dir).unwrap().config().unwrap_err().to_string();
    assert!(e.contains("lists 2 images") && e.contains("v1, v2") && e.contains("LAYOUT:TAG"), "{e}");
    let e = Source::open(Path::new(&format!("{d}:v3"))).unwrap().config().unwrap_err().to_string();
    assert!(e.contains("no image is tagged \"v3\"") && e.contains("v1, v2"), "{e}");
    let (i1, i2) =
        (Source::open(Path::new(&format!("{d}:v1"))).unwrap(), Source::open(Path::new(&format!("{d}:v2"))).unwrap());
    assert_ne!(i1.identity().unwrap().0, i2.identity().unwrap().0, "each tag is its own image");
    // A directory whose name has a colon is a path, not a tag.
    let colon = t.path().join("a:b");
    std::fs::create_dir_all(&colon).unwrap();
    assert!(matches!(Source::open(&colon).unwrap(), Source::Dir(_)));
    assert!(Source::open(&t.path().join("nothing:here")).is_err());
}
