//! The tree as the installed libibverbs sees it, through `ibv_devices`.
//!
//! There is no rxu provider yet, and libibverbs drops devices no provider
//! matches, so two things are checked:
//! - an `rxu…` device: `IBV_SHOW_WARNINGS=1` makes libibverbs name every
//!   device that survived enumeration (tree, abi_version, /dev node) but
//!   found no provider — that warning is the proof it read the tree;
//! - a device named `rxe…`, which the stock rxe provider claims by name:
//!   `ibv_devices` never opens a device, so it lists it with the node GUID
//!   it read from our `node_guid` file. (Real devices must never be named
//!   like that; docs/libibverbs-contract.md §1.5.)
//!
//! Needs root (/dev/infiniband is not relocatable) and ibverbs-utils;
//! skips loudly otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use rxu_testkit::{have, is_root, skip};
use rxud::devnode::{format, CdevKind, DevNode, DeviceDesc, Paths, DEFAULT_DEV_DIR};

/// The temporary sysfs root, and the /dev nodes this test may have made
/// (removed even if an assertion fails midway).
struct TestDir(PathBuf, Vec<PathBuf>);

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        for node in &self.1 {
            let _ = std::fs::remove_file(node);
        }
    }
}

/// (stdout, stderr) of `ibv_devices` against the tree.
fn ibv_devices(tool: &Path, sysfs: &Path) -> (String, String) {
    let out = Command::new(tool)
        .env("SYSFS_PATH", sysfs)
        .env("IBV_SHOW_WARNINGS", "1")
        .env_remove("RDMAV_DRIVERS")
        .env_remove("IBV_DRIVERS")
        .output()
        .unwrap();
    assert!(out.status.success(), "ibv_devices failed: {out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn ibv_devices_reads_the_tree() {
    if !is_root() {
        skip(&format!("needs root to create {DEFAULT_DEV_DIR}/uverbsN"));
        return;
    }
    if !have("ibv_devices") {
        skip("ibv_devices (ibverbs-utils) not installed");
        return;
    }
    let tool = Path::new("ibv_devices");
    let pid = std::process::id();
    // Indices far from anything real and unique per run.
    let base = 1_000_000 + (pid % 100_000) * 8;
    let dev = Path::new(DEFAULT_DEV_DIR);
    let nodes = (0..3).map(|k| dev.join(format!("uverbs{}", base + k)));
    let mut nodes: Vec<PathBuf> = nodes.collect();
    nodes.push(dev.join(format!(".rxu-test-saved-{pid}")));
    let dir = TestDir(std::env::temp_dir().join(format!("rxu-ibv-{pid}")), nodes);
    let paths = Paths::new(dir.0.join("sys"));
    let dev_dir_existed = dev.exists();

    let kinds = [CdevKind::NullSymlink, CdevKind::null_char_device().unwrap()];
    for (k, kind) in kinds.into_iter().enumerate() {
        let k = k as u32;
        let mut desc = DeviceDesc::new(
            &format!("rxut{pid}k{k}"),
            base + k,
            vec!["127.0.0.1".parse().unwrap()],
        );
        desc.netdev = Some("lo".into());
        desc.cdev = kind;
        let node = DevNode::create(&paths, &desc).unwrap();
        let warning = format!(
            "no userspace device-specific driver found for {}",
            desc.ibdev
        );

        let (_, err) = ibv_devices(tool, &paths.sysfs);
        assert!(
            err.contains(&warning),
            "{kind:?}: libibverbs did not enumerate it: {err}"
        );
        assert!(!err.contains("Fatal"), "{err}");

        // Negative control: without the /dev node the entry is dropped
        // silently (docs/libibverbs-contract.md §1.2), so the warning above really came from
        // a complete entry.
        let cdev = Path::new(DEFAULT_DEV_DIR).join(node.uverbs_name());
        let saved = cdev.with_file_name(format!(".rxu-test-saved-{pid}"));
        std::fs::rename(&cdev, &saved).unwrap();
        let (_, err) = ibv_devices(tool, &paths.sysfs);
        std::fs::rename(&saved, &cdev).unwrap();
        assert!(!err.contains(&warning), "{err}");

        node.remove().unwrap();
        let (_, err) = ibv_devices(tool, &paths.sysfs);
        assert!(!err.contains(&warning), "still listed after remove: {err}");
    }

    if !Path::new("/etc/libibverbs.d/rxe.driver").exists() {
        println!("SKIP listing check: the stock rxe provider is not installed");
    } else {
        let mut desc = DeviceDesc::new(
            &format!("rxetest{pid}"),
            base + 2,
            vec!["10.11.12.13".parse().unwrap()],
        );
        desc.node_guid = 0x0211_22ff_fe33_4455;
        let node = DevNode::create(&paths, &desc).unwrap();
        let (out, err) = ibv_devices(tool, &paths.sysfs);
        node.remove().unwrap();
        let line = out
            .lines()
            .find(|l| l.contains(&desc.ibdev))
            .unwrap_or_else(|| panic!("not listed: {out} {err}"));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields, vec![desc.ibdev.as_str(), "021122fffe334455"]);
        assert_eq!(format::guid(desc.node_guid), "0211:22ff:fe33:4455");
    }

    if !dev_dir_existed {
        // Only if empty; other devices' nodes keep it.
        let _ = std::fs::remove_dir(DEFAULT_DEV_DIR);
    }
}
