//! The device node: the sysfs-like tree and /dev/infiniband/uverbsN that
//! libibverbs 44 reads when no kernel RDMA stack exists
//! (docs/libibverbs-contract.md §1). Clients find the tree through
//! `SYSFS_PATH=<root>`; `/dev/infiniband` is compiled into libibverbs.
//!
//! ```text
//! <root>/class/infiniband_verbs/abi_version              6
//! <root>/class/infiniband_verbs/uverbsN/{ibdev,dev,abi_version}
//! <root>/class/infiniband/<ibdev>/{node_type,node_guid,...,ports/1/...,rxu/...,
//!                                  device/net/<ifname> -> /sys/class/net/<ifname>}
//! /dev/infiniband/uverbsN                                 -> /dev/null (or mknod)
//! ```
//!
//! libibverbs treats a device as new whenever the mtime of
//! `class/infiniband/<ibdev>/` changes (contract §1.2 step 3), so the
//! directory is built under a hidden name and renamed into place complete,
//! `uverbsN` is published last (nothing lists a half-made device), and later
//! updates (GIDs, port state, MTU) only replace files in subdirectories,
//! each atomically (write a temporary, rename).

mod cdev;
pub mod format;
mod fsutil;
mod tree;

use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

pub use cdev::CdevKind;
pub use format::{Mtu, PortState, Speed};

/// Where libibverbs looks for device nodes; not relocatable.
pub const DEFAULT_DEV_DIR: &str = "/dev/infiniband";
/// `class/infiniband_verbs/abi_version`: libibverbs accepts 3..=6.
pub const CLASS_ABI_VERSION: u32 = 6;
/// `uverbsN/abi_version` (the provider matches it) and the GID table
/// length a device gets unless it has more addresses: the vocabulary's.
pub use transport::verbs::{GID_TBL_LEN as DEFAULT_GID_TBL_LEN, UVERBS_ABI_VERSION};
/// What kernel rxe exposes; more files buy nothing.
pub const MAX_GID_TBL_LEN: u32 = 1024;
/// libibverbs builds sysfs paths in 256-byte buffers and silently skips a
/// device whose path does not fit.
const SYSFS_PATH_MAX: usize = 256;
const IBDEV_NAME_MAX: usize = 63;
const NETDEV_NAME_MAX: usize = 15;
const NODE_DESC_MAX: usize = 64;
/// IB_PORT_CM_SUP, what rxe advertises.
const DEFAULT_CAP_MASK: u32 = 1 << 16;

#[derive(Debug, thiserror::Error)]
pub enum DevNodeError {
    #[error("invalid device description: {0}")]
    Invalid(String),
    #[error("{0} already exists; remove the old device first")]
    Exists(PathBuf),
    #[error("netdev {0:?} does not exist (libibverbs would fail every GID query with ENODEV)")]
    NoSuchNetdev(String),
    #[error("not an rxu device tree: {0}")]
    NotOurs(String),
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

type Result<T> = std::result::Result<T, DevNodeError>;

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> DevNodeError {
    let path = path.to_owned();
    move |source| {
        if source.kind() == io::ErrorKind::AlreadyExists {
            DevNodeError::Exists(path)
        } else {
            DevNodeError::Io { what, path, source }
        }
    }
}

/// Where the tree and the device node go.
#[derive(Clone, Debug)]
pub struct Paths {
    /// The fake sysfs root; clients get `SYSFS_PATH` set to it.
    pub sysfs: PathBuf,
    /// `/dev/infiniband` for real use; tests may point elsewhere (libibverbs
    /// will then not find the node).
    pub dev_dir: PathBuf,
}

impl Paths {
    pub fn new(sysfs: impl Into<PathBuf>) -> Self {
        Self {
            sysfs: sysfs.into(),
            dev_dir: DEFAULT_DEV_DIR.into(),
        }
    }

    pub fn with_dev_dir(mut self, dev_dir: impl Into<PathBuf>) -> Self {
        self.dev_dir = dev_dir.into();
        self
    }

    fn verbs_class(&self) -> PathBuf {
        self.sysfs.join("class/infiniband_verbs")
    }

    fn ibdev_dir(&self, ibdev: &str) -> PathBuf {
        self.sysfs.join("class/infiniband").join(ibdev)
    }

    fn uverbs_dir(&self, index: u32) -> PathBuf {
        self.verbs_class().join(uverbs_name(index))
    }

    fn cdev(&self, index: u32) -> PathBuf {
        self.dev_dir.join(uverbs_name(index))
    }
}

pub fn uverbs_name(index: u32) -> String {
    format!("uverbs{index}")
}

/// Port attributes. libibverbs never reads these from the tree; the kernel
/// formats are written for tools, the `rxu/` files for the provider.
#[derive(Clone, Debug)]
pub struct PortDesc {
    pub state: PortState,
    pub active_mtu: Mtu,
    pub max_mtu: Mtu,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub sm_sl: u8,
    pub cap_mask: u32,
    pub width: u8,
    pub speed: Speed,
}

impl Default for PortDesc {
    fn default() -> Self {
        Self {
            state: PortState::Active,
            active_mtu: Mtu::M1024,
            max_mtu: Mtu::M4096,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            sm_sl: 0,
            cap_mask: DEFAULT_CAP_MASK,
            width: 1,
            speed: Speed::Edr,
        }
    }
}

/// Everything the tree says about one device.
#[derive(Clone, Debug)]
pub struct DeviceDesc {
    /// The ibdev name, e.g. `rxu0`. Must not contain "rxe": the stock rxe
    /// provider claims any such name when it is installed (contract §1.5).
    pub ibdev: String,
    /// N in uverbsN.
    pub uverbs_index: u32,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub node_desc: String,
    pub fw_ver: String,
    pub hw_rev: u32,
    /// Written to `gid_attrs/ndevs/<i>` of populated GIDs; must exist.
    pub netdev: Option<String>,
    pub port: PortDesc,
    /// Addresses; the GID table is IPv4 first (index 0 = first IPv4).
    pub gids: Vec<IpAddr>,
    /// Number of `gids/<i>` files; query_port must report the same.
    pub gid_tbl_len: u32,
    pub uverbs_abi_version: u32,
    pub cdev: CdevKind,
}

impl DeviceDesc {
    /// A device with defaults: port active, MTU 1024, 16 GIDs, /dev/null
    /// symlink, node GUID derived from the first IPv4 address (else the
    /// first address). Prefer [`format::node_guid_from_mac`] when the
    /// netdev has a real MAC.
    pub fn new(ibdev: &str, uverbs_index: u32, gids: Vec<IpAddr>) -> Self {
        let first = gids.iter().find(|a| a.is_ipv4()).or(gids.first());
        let node_guid = first.map(|a| format::node_guid_from_ip(*a)).unwrap_or(0);
        Self {
            ibdev: ibdev.to_owned(),
            uverbs_index,
            node_guid,
            sys_image_guid: node_guid,
            node_desc: format!("rxu {ibdev}"),
            fw_ver: env!("CARGO_PKG_VERSION").to_owned(),
            hw_rev: 0,
            netdev: None,
            port: PortDesc::default(),
            gids,
            gid_tbl_len: DEFAULT_GID_TBL_LEN,
            uverbs_abi_version: UVERBS_ABI_VERSION,
            cdev: CdevKind::NullSymlink,
        }
    }

    /// Checks everything libibverbs would silently reject or misread.
    pub fn validate(&self, paths: &Paths) -> Result<()> {
        let bad = |m: String| Err(DevNodeError::Invalid(m));
        check_ibdev_name(&self.ibdev)?;
        if !paths.sysfs.is_absolute() {
            return bad(format!(
                "sysfs root {} must be absolute",
                paths.sysfs.display()
            ));
        }
        let longest = [
            paths.ibdev_dir(&self.ibdev),
            paths.uverbs_dir(self.uverbs_index),
        ]
        .iter()
        .map(|p| p.as_os_str().len())
        .max()
        .unwrap_or(0);
        if longest >= SYSFS_PATH_MAX {
            return bad(format!(
                "sysfs root {} too long: device paths must stay under {SYSFS_PATH_MAX} bytes",
                paths.sysfs.display()
            ));
        }
        if !(1..=MAX_GID_TBL_LEN).contains(&self.gid_tbl_len) {
            return bad(format!("gid_tbl_len {} not in 1..=1024", self.gid_tbl_len));
        }
        let n = format::gid_table(&self.gids).len();
        if n > self.gid_tbl_len as usize {
            return bad(format!(
                "{n} GIDs do not fit a table of {}",
                self.gid_tbl_len
            ));
        }
        if self.node_desc.len() > NODE_DESC_MAX || self.node_desc.contains('\n') {
            return bad("node_desc: one line of at most 64 bytes".into());
        }
        if self.fw_ver.len() > 63 || self.fw_ver.contains('\n') {
            return bad("fw_ver: one line of at most 63 bytes".into());
        }
        if let Some(nd) = &self.netdev {
            check_netdev(nd)?;
        }
        if ![1, 2, 4, 8, 12].contains(&self.port.width) {
            return bad(format!(
                "port width {} is not 1, 2, 4, 8 or 12",
                self.port.width
            ));
        }
        Ok(())
    }
}

fn check_ibdev_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= IBDEV_NAME_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(DevNodeError::Invalid(format!(
            "ibdev name {name:?}: 1..=63 of [A-Za-z0-9_.-], not starting with '.'"
        )))
    }
}

fn check_netdev(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > NETDEV_NAME_MAX || name.contains(['/', '\n', '\0']) {
        return Err(DevNodeError::Invalid(format!("netdev name {name:?}")));
    }
    let cname =
        std::ffi::CString::new(name).map_err(|_| DevNodeError::NoSuchNetdev(name.into()))?;
    // SAFETY: `cname` is a valid NUL-terminated string for the call.
    if unsafe { libc::if_nametoindex(cname.as_ptr()) } == 0 {
        return Err(DevNodeError::NoSuchNetdev(name.into()));
    }
    Ok(())
}

/// A device tree on disk, made by [`DevNode::create`] or found again by
/// [`DevNode::open`] (e.g. by `rxu down` in another process).
#[derive(Debug)]
pub struct DevNode {
    paths: Paths,
    ibdev: String,
    uverbs_index: u32,
    gid_tbl_len: u32,
    netdev: Option<String>,
    cdev: CdevKind,
}

impl DevNode {
    /// Writes the whole tree and the device node. Fails, leaving nothing
    /// behind, if either `class/infiniband/<ibdev>` or `uverbsN` exists.
    pub fn create(paths: &Paths, desc: &DeviceDesc) -> Result<DevNode> {
        desc.validate(paths)?;
        let class = paths.verbs_class();
        fsutil::create_dirs(&class).map_err(io_err("creating", &class))?;
        let ib_class = paths.sysfs.join("class/infiniband");
        fsutil::create_dirs(&ib_class).map_err(io_err("creating", &ib_class))?;
        let abi = class.join("abi_version");
        fsutil::write_if_changed(&abi, &CLASS_ABI_VERSION.to_string())
            .map_err(io_err("writing", &abi))?;

        let uverbs_dir = paths.uverbs_dir(desc.uverbs_index);
        if uverbs_dir.symlink_metadata().is_ok() {
            return Err(DevNodeError::Exists(uverbs_dir));
        }

        let ibdev_dir = paths.ibdev_dir(&desc.ibdev);
        let staging = fsutil::Staging::new(&ibdev_dir).map_err(io_err("staging", &ibdev_dir))?;
        for dir in tree::ibdev_dirs() {
            staging.dir(&dir).map_err(io_err("staging", &dir))?;
        }
        for (rel, contents) in tree::ibdev_files(desc) {
            staging
                .file(&rel, &contents)
                .map_err(io_err("staging", &rel))?;
        }
        for (rel, target) in tree::ibdev_links(desc) {
            staging
                .symlink(&rel, &target)
                .map_err(io_err("staging", &rel))?;
        }
        staging
            .publish()
            .map_err(io_err("publishing", &ibdev_dir))?;

        let node = DevNode {
            paths: paths.clone(),
            ibdev: desc.ibdev.clone(),
            uverbs_index: desc.uverbs_index,
            gid_tbl_len: desc.gid_tbl_len,
            netdev: desc.netdev.clone(),
            cdev: desc.cdev,
        };
        // From here on, a failure removes what was made.
        match node.finish_create(desc) {
            Ok(()) => Ok(node),
            Err(e) => {
                let _ = fsutil::remove_tree(&ibdev_dir);
                Err(e)
            }
        }
    }

    fn finish_create(&self, desc: &DeviceDesc) -> Result<()> {
        let dev_dir = &self.paths.dev_dir;
        fsutil::create_dirs(dev_dir).map_err(io_err("creating", dev_dir))?;
        let cdev = self.paths.cdev(self.uverbs_index);
        cdev::create(&cdev, self.cdev).map_err(io_err("creating device node", &cdev))?;

        let uverbs_dir = self.paths.uverbs_dir(self.uverbs_index);
        let publish = || -> Result<()> {
            let staging =
                fsutil::Staging::new(&uverbs_dir).map_err(io_err("staging", &uverbs_dir))?;
            for (rel, contents) in tree::uverbs_files(desc) {
                staging
                    .file(&rel, &contents)
                    .map_err(io_err("staging", &rel))?;
            }
            staging.publish().map_err(io_err("publishing", &uverbs_dir))
        };
        publish().inspect_err(|_| {
            let _ = cdev::remove(&cdev, self.cdev);
        })
    }

    /// Finds the device published as uverbsN under `paths`.
    pub fn open(paths: &Paths, uverbs_index: u32) -> Result<DevNode> {
        let uverbs_dir = paths.uverbs_dir(uverbs_index);
        let read = |p: PathBuf| -> Result<String> {
            let s = std::fs::read_to_string(&p).map_err(io_err("reading", &p))?;
            Ok(s.strip_suffix('\n').unwrap_or(&s).to_owned())
        };
        let ibdev = read(uverbs_dir.join("ibdev"))?;
        // The name is about to become part of paths we delete: check it.
        check_ibdev_name(&ibdev)?;
        let dev = read(uverbs_dir.join("dev"))?;
        let cdev = cdev::parse_dev_file(&dev)
            .ok_or_else(|| DevNodeError::NotOurs(format!("uverbs dev file {dev:?}")))?;
        let ibdev_dir = paths.ibdev_dir(&ibdev);
        let gid_tbl_len = read(ibdev_dir.join(tree::rxu_path("gid_tbl_len")))?
            .parse()
            .ok()
            .filter(|n| (1..=MAX_GID_TBL_LEN).contains(n))
            .ok_or_else(|| DevNodeError::NotOurs("bad rxu/gid_tbl_len".into()))?;
        let netdev = read(ibdev_dir.join(tree::rxu_path("netdev")))?;
        Ok(DevNode {
            paths: paths.clone(),
            ibdev,
            uverbs_index,
            gid_tbl_len,
            netdev: (!netdev.is_empty()).then_some(netdev),
            cdev,
        })
    }

    pub fn ibdev(&self) -> &str {
        &self.ibdev
    }

    pub fn uverbs_name(&self) -> String {
        uverbs_name(self.uverbs_index)
    }

    pub fn gid_tbl_len(&self) -> u32 {
        self.gid_tbl_len
    }

    /// `class/infiniband/<ibdev>`: what libibverbs calls ibdev_path.
    pub fn ibdev_path(&self) -> PathBuf {
        self.paths.ibdev_dir(&self.ibdev)
    }

    /// What a client must export to see this device.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![(
            "SYSFS_PATH".into(),
            self.paths.sysfs.to_string_lossy().into_owned(),
        )]
    }

    fn write(&self, rel: &Path, contents: &str) -> Result<()> {
        let path = self.ibdev_path().join(rel);
        fsutil::write_if_changed(&path, contents).map_err(io_err("writing", &path))
    }

    /// Replaces the GID table's contents (its length stays). A populated
    /// entry gets its ndev before its GID, an emptied one loses its GID
    /// first, so a reader never pairs a GID with a stale netdev.
    pub fn set_gids(&self, addrs: &[IpAddr]) -> Result<()> {
        let table = format::gid_table(addrs);
        if table.len() > self.gid_tbl_len as usize {
            return Err(DevNodeError::Invalid(format!(
                "{} GIDs do not fit a table of {}",
                table.len(),
                self.gid_tbl_len
            )));
        }
        if let Some(nd) = &self.netdev {
            check_netdev(nd)?;
        }
        for i in 0..self.gid_tbl_len {
            let (gid, ndev) = tree::gid_slot(&table, i, self.netdev.as_deref());
            match ndev {
                Some(ndev) => {
                    self.write(&tree::gid_ndev_path(i), &ndev)?;
                    self.write(&tree::gid_path(i), &gid)?;
                }
                None => {
                    self.write(&tree::gid_path(i), &gid)?;
                    let p = self.ibdev_path().join(tree::gid_ndev_path(i));
                    fsutil::remove_file_if_present(&p).map_err(io_err("removing", &p))?;
                }
            }
        }
        Ok(())
    }

    pub fn set_port_state(&self, state: PortState) -> Result<()> {
        for (rel, contents) in tree::port_state_files(state) {
            self.write(&rel, &contents)?;
        }
        Ok(())
    }

    pub fn set_active_mtu(&self, mtu: Mtu) -> Result<()> {
        self.write(&tree::rxu_path("active_mtu"), &tree::mtu_file(mtu))
    }

    /// Removes uverbsN first (the device disappears from listings at once),
    /// then the device directory, then the device node. The class
    /// abi_version and the directories stay for other devices.
    pub fn remove(self) -> Result<()> {
        let uverbs_dir = self.paths.uverbs_dir(self.uverbs_index);
        fsutil::remove_tree(&uverbs_dir).map_err(io_err("removing", &uverbs_dir))?;
        let ibdev_dir = self.ibdev_path();
        fsutil::remove_tree(&ibdev_dir).map_err(io_err("removing", &ibdev_dir))?;
        let cdev = self.paths.cdev(self.uverbs_index);
        cdev::remove(&cdev, self.cdev).map_err(io_err("removing device node", &cdev))
    }
}

#[cfg(test)]
mod tests;
