//! Trees written into temporary directories and read back byte for byte.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::*;

/// A temporary directory removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("rxu-devnode-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    fn paths(&self) -> Paths {
        Paths::new(self.0.join("sys")).with_dev_dir(self.0.join("dev/infiniband"))
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn desc() -> DeviceDesc {
    let mut d = DeviceDesc::new(
        "rxu0",
        7,
        vec![
            "fd00::5".parse().unwrap(),
            "127.0.0.1".parse().unwrap(),
            "10.1.2.3".parse().unwrap(),
        ],
    );
    d.netdev = Some("lo".into());
    d.gid_tbl_len = 4;
    d
}

/// Every regular file under `root`, relative path -> contents (a symlink
/// as `-> target`).
fn read_tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                let target = fs::read_link(&p).unwrap();
                out.insert(rel, format!("-> {}", target.display()));
            } else if ft.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// /dev/null's `major:minor`, what every node's `dev` file says.
fn null_numbers() -> String {
    let rdev = fs::metadata("/dev/null").unwrap().rdev();
    format!("{}:{}", libc::major(rdev), libc::minor(rdev))
}

#[test]
fn writes_exactly_the_expected_tree() {
    let t = TestDir::new("tree");
    let paths = t.paths();
    let node = DevNode::create(&paths, &desc()).unwrap();
    let files = read_tree(&paths.sysfs);
    let guid = format::guid(desc().node_guid);
    let fixed: Vec<(&str, String)> = vec![
        ("class/infiniband_verbs/abi_version", "6".into()),
        ("class/misc/rdma_cm/abi_version", "4".into()),
        ("class/infiniband_verbs/uverbs7/ibdev", "rxu0".into()),
        ("class/infiniband_verbs/uverbs7/dev", null_numbers()),
        ("class/infiniband_verbs/uverbs7/abi_version", "1".into()),
        ("class/infiniband/rxu0/node_type", "1: CA".into()),
        ("class/infiniband/rxu0/node_guid", guid.clone()),
        ("class/infiniband/rxu0/sys_image_guid", guid),
        ("class/infiniband/rxu0/node_desc", "rxu rxu0".into()),
        (
            "class/infiniband/rxu0/fw_ver",
            env!("CARGO_PKG_VERSION").into(),
        ),
        ("class/infiniband/rxu0/hw_rev", "0".into()),
        ("class/infiniband/rxu0/ports/1/state", "4: ACTIVE".into()),
        (
            "class/infiniband/rxu0/ports/1/phys_state",
            "5: LinkUp".into(),
        ),
        (
            "class/infiniband/rxu0/ports/1/link_layer",
            "Ethernet".into(),
        ),
        (
            "class/infiniband/rxu0/ports/1/rate",
            "25 Gb/sec (1X EDR)".into(),
        ),
        ("class/infiniband/rxu0/ports/1/lid", "0x0".into()),
        ("class/infiniband/rxu0/ports/1/sm_lid", "0x0".into()),
        ("class/infiniband/rxu0/ports/1/lid_mask_count", "0".into()),
        ("class/infiniband/rxu0/ports/1/sm_sl", "0".into()),
        (
            "class/infiniband/rxu0/ports/1/cap_mask",
            "0x00010000".into(),
        ),
        ("class/infiniband/rxu0/ports/1/pkeys/0", "0xffff".into()),
        ("class/infiniband/rxu0/rxu/netdev", "lo".into()),
        ("class/infiniband/rxu0/rxu/gid_tbl_len", "4".into()),
        ("class/infiniband/rxu0/rxu/active_mtu", "1024".into()),
        ("class/infiniband/rxu0/rxu/max_mtu", "4096".into()),
        (
            "class/infiniband/rxu0/ports/1/gids/0",
            "0000:0000:0000:0000:0000:ffff:7f00:0001".into(),
        ),
        (
            "class/infiniband/rxu0/ports/1/gids/1",
            "0000:0000:0000:0000:0000:ffff:0a01:0203".into(),
        ),
        (
            "class/infiniband/rxu0/ports/1/gids/2",
            "fd00:0000:0000:0000:0000:0000:0000:0005".into(),
        ),
        (
            "class/infiniband/rxu0/ports/1/gids/3",
            "0000:0000:0000:0000:0000:0000:0000:0000".into(),
        ),
    ];
    let mut want: BTreeMap<String, String> = fixed
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v + "\n"))
        .collect();
    let attrs = "class/infiniband/rxu0/ports/1/gid_attrs";
    for i in 0..4 {
        want.insert(format!("{attrs}/types/{i}"), "RoCE v2\n".into());
    }
    for i in 0..3 {
        want.insert(format!("{attrs}/ndevs/{i}"), "lo\n".into());
    }
    want.insert(
        "class/infiniband/rxu0/device/net/lo".into(),
        "-> /sys/class/net/lo".into(),
    );
    assert_eq!(files, want);

    // The node, the modes, and the handle's view.
    let cdev = paths.dev_dir.join("uverbs7");
    assert_eq!(fs::read_link(&cdev).unwrap(), Path::new("/dev/null"));
    let ibdev_dir = node.ibdev_path();
    assert_eq!(ibdev_dir, paths.sysfs.join("class/infiniband/rxu0"));
    assert_eq!(
        fs::metadata(&ibdev_dir).unwrap().permissions().mode() & 0o777,
        0o755
    );
    let f = ibdev_dir.join("ports/1/gids/0");
    assert_eq!(fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o644);
    assert_eq!(
        node.env(),
        vec![("SYSFS_PATH".into(), paths.sysfs.display().to_string())]
    );
}

#[test]
fn every_file_fits_libibverbs_buffers() {
    // One read() into a fixed buffer; content + newline must be shorter than
    // the buffer (docs/libibverbs-contract.md §1.2 reading rules). Smallest buffers: 8 bytes
    // (abi_version), 11 (gid types), 16 (ndevs), 24 (node_guid), 41 (gids).
    let t = TestDir::new("sizes");
    let paths = t.paths();
    DevNode::create(&paths, &desc()).unwrap();
    for (rel, contents) in read_tree(&paths.sysfs) {
        if contents.starts_with("-> ") {
            continue;
        }
        assert!(contents.ends_with('\n'), "{rel}");
        assert_eq!(contents.matches('\n').count(), 1, "{rel}");
        let limit = match rel.rsplit('/').nth(1).unwrap_or("") {
            "gids" => 41,
            "types" => 11,
            "ndevs" => 16,
            _ if rel.ends_with("abi_version") => 8,
            _ if rel.ends_with("guid") => 24,
            _ => 66,
        };
        assert!(contents.len() < limit, "{rel}: {} bytes", contents.len());
    }
}

#[test]
fn refuses_to_overwrite_and_leaves_nothing_behind() {
    let t = TestDir::new("exists");
    let paths = t.paths();
    let _node = DevNode::create(&paths, &desc()).unwrap();
    let before = read_tree(&t.0);
    // Same uverbs index.
    assert!(matches!(
        DevNode::create(&paths, &desc()),
        Err(DevNodeError::Exists(_))
    ));
    // Same ibdev, other index.
    let mut d = desc();
    d.uverbs_index = 8;
    assert!(matches!(
        DevNode::create(&paths, &d),
        Err(DevNodeError::Exists(_))
    ));
    assert_eq!(read_tree(&t.0), before);
    let leftovers: Vec<_> = fs::read_dir(paths.sysfs.join("class/infiniband"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, vec!["rxu0"]);
}

#[test]
fn validation() {
    let t = TestDir::new("valid");
    let paths = t.paths();
    let invalid = |d: &DeviceDesc, p: &Paths| DevNode::create(p, d).unwrap_err();
    for name in ["", ".rxu", "rx/u", "rxu 0", &"r".repeat(64)] {
        let mut d = desc();
        d.ibdev = name.into();
        assert!(
            matches!(invalid(&d, &paths), DevNodeError::Invalid(_)),
            "{name:?}"
        );
    }
    let mut d = desc();
    d.gid_tbl_len = 2;
    assert!(matches!(invalid(&d, &paths), DevNodeError::Invalid(_)));
    d.gid_tbl_len = 0;
    assert!(matches!(invalid(&d, &paths), DevNodeError::Invalid(_)));
    d.gid_tbl_len = 1025;
    assert!(matches!(invalid(&d, &paths), DevNodeError::Invalid(_)));
    let mut d = desc();
    d.netdev = Some("rxu-no-such0".into());
    assert!(matches!(invalid(&d, &paths), DevNodeError::NoSuchNetdev(_)));
    let mut d = desc();
    d.node_desc = "two\nlines".into();
    assert!(matches!(invalid(&d, &paths), DevNodeError::Invalid(_)));
    let rel = Paths::new("relative/sys");
    assert!(matches!(invalid(&desc(), &rel), DevNodeError::Invalid(_)));
    let long = Paths::new(t.0.join("x".repeat(230)));
    assert!(matches!(invalid(&desc(), &long), DevNodeError::Invalid(_)));
    assert!(!paths.sysfs.exists(), "validation failures write nothing");
}

#[test]
fn updates_touch_only_subdirectories() {
    let t = TestDir::new("update");
    let paths = t.paths();
    let node = DevNode::create(&paths, &desc()).unwrap();
    let dir = node.ibdev_path();
    let mtime = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
    let before = mtime(&dir);
    std::thread::sleep(std::time::Duration::from_millis(20));

    node.set_gids(&["192.168.7.9".parse().unwrap()]).unwrap();
    node.set_port_state(PortState::Down).unwrap();
    node.set_active_mtu(Mtu::M4096).unwrap();

    assert_eq!(
        mtime(&dir),
        before,
        "device identity (dir mtime) must not change"
    );
    let files = read_tree(&dir);
    assert_eq!(
        files["ports/1/gids/0"],
        "0000:0000:0000:0000:0000:ffff:c0a8:0709\n"
    );
    assert_eq!(
        files["ports/1/gids/1"],
        "0000:0000:0000:0000:0000:0000:0000:0000\n"
    );
    assert_eq!(files["ports/1/gid_attrs/ndevs/0"], "lo\n");
    assert!(!files.contains_key("ports/1/gid_attrs/ndevs/1"));
    assert!(!files.contains_key("ports/1/gid_attrs/ndevs/2"));
    assert_eq!(files["ports/1/gid_attrs/types/3"], "RoCE v2\n");
    assert_eq!(files["ports/1/state"], "1: DOWN\n");
    assert_eq!(files["ports/1/phys_state"], "3: Disabled\n");
    assert_eq!(files["rxu/active_mtu"], "4096\n");
    assert!(
        files
            .keys()
            .all(|k| !k.rsplit('/').next().unwrap().starts_with('.')),
        "no temporaries left: {:?}",
        files.keys()
    );
    assert!(node.set_gids(&["10.0.0.1".parse().unwrap()]).is_ok());
    let five: Vec<IpAddr> = (1..=5)
        .map(|i| format!("10.0.0.{i}").parse().unwrap())
        .collect();
    assert!(matches!(
        node.set_gids(&five),
        Err(DevNodeError::Invalid(_))
    ));
}

#[test]
fn open_then_remove_then_recreate() {
    let t = TestDir::new("remove");
    let paths = t.paths();
    DevNode::create(&paths, &desc()).unwrap();
    let node = DevNode::open(&paths, 7).unwrap();
    assert_eq!(node.ibdev(), "rxu0");
    assert_eq!(node.uverbs_name(), "uverbs7");
    assert_eq!(node.gid_tbl_len(), 4);
    node.set_port_state(PortState::Active).unwrap();
    node.remove().unwrap();
    assert!(!paths.sysfs.join("class/infiniband_verbs/uverbs7").exists());
    assert!(!paths.sysfs.join("class/infiniband/rxu0").exists());
    assert!(fs::symlink_metadata(paths.dev_dir.join("uverbs7")).is_err());
    assert!(paths
        .sysfs
        .join("class/infiniband_verbs/abi_version")
        .exists());
    assert!(matches!(
        DevNode::open(&paths, 7),
        Err(DevNodeError::Io { .. })
    ));
    DevNode::create(&paths, &desc()).unwrap().remove().unwrap();
}

#[test]
fn open_refuses_a_tampered_ibdev_name() {
    let t = TestDir::new("tamper");
    let paths = t.paths();
    DevNode::create(&paths, &desc()).unwrap();
    let victim = t.0.join("victim");
    fs::create_dir(&victim).unwrap();
    fs::write(
        paths.sysfs.join("class/infiniband_verbs/uverbs7/ibdev"),
        "../../../victim\n",
    )
    .unwrap();
    assert!(matches!(
        DevNode::open(&paths, 7),
        Err(DevNodeError::Invalid(_))
    ));
    assert!(victim.exists());
}

#[test]
fn device_node_reuse_and_refusal() {
    let t = TestDir::new("cdev");
    let paths = t.paths();
    // An identical symlink left over from an earlier run is reused.
    fs::create_dir_all(&paths.dev_dir).unwrap();
    std::os::unix::fs::symlink("/dev/null", paths.dev_dir.join("uverbs7")).unwrap();
    DevNode::create(&paths, &desc()).unwrap().remove().unwrap();
    // Something else there: refused, and the tree is rolled back.
    fs::write(paths.dev_dir.join("uverbs7"), "not a device").unwrap();
    let err = DevNode::create(&paths, &desc()).unwrap_err();
    assert!(matches!(err, DevNodeError::Exists(_)), "{err}");
    assert!(!paths.sysfs.join("class/infiniband/rxu0").exists());
    assert!(!paths.sysfs.join("class/infiniband_verbs/uverbs7").exists());
    assert!(
        paths.dev_dir.join("uverbs7").is_file(),
        "not ours: left alone"
    );
}

#[test]
fn mknod_character_device_as_root() {
    if !is_root() {
        println!("SKIP mknod_character_device_as_root: mknod needs root (CAP_MKNOD)");
        return;
    }
    let t = TestDir::new("mknod");
    let paths = t.paths();
    let mut d = desc();
    d.cdev = CdevKind::null_char_device().unwrap();
    let node = DevNode::create(&paths, &d).unwrap();
    let meta = fs::symlink_metadata(paths.dev_dir.join("uverbs7")).unwrap();
    assert!(meta.file_type().is_char_device());
    assert_eq!(meta.rdev(), fs::metadata("/dev/null").unwrap().rdev());
    assert_eq!(meta.permissions().mode() & 0o777, 0o666);
    let dev = fs::read_to_string(paths.sysfs.join("class/infiniband_verbs/uverbs7/dev")).unwrap();
    assert_eq!(dev, "1:3\n");
    // It behaves like /dev/null: writable, reads EOF.
    fs::write(paths.dev_dir.join("uverbs7"), b"x").unwrap();
    assert_eq!(fs::read(paths.dev_dir.join("uverbs7")).unwrap(), b"");
    DevNode::open(&paths, 7).unwrap();
    node.remove().unwrap();
    assert!(fs::symlink_metadata(paths.dev_dir.join("uverbs7")).is_err());
}
