//! What a device tree describes and where it goes: the limits libibverbs
//! imposes, the errors, the paths, and the device and port descriptions
//! with their validation. `tree.rs` turns a description into files; the
//! module's `DevNode` writes them.

use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::cdev::CdevKind;
use super::format::{self, Mtu, PortState, Speed};

/// Where libibverbs looks for device nodes; not relocatable.
pub const DEFAULT_DEV_DIR: &str = "/dev/infiniband";
/// `class/infiniband_verbs/abi_version`: libibverbs accepts 3..=6.
pub const CLASS_ABI_VERSION: u32 = 6;
/// `class/misc/rdma_cm/abi_version`: the ucma ABI `librxu-ucma.so` speaks
/// (librdmacm reads it through SYSFS_PATH and accepts 3..=4).
pub const UCMA_ABI_VERSION: u32 = 4;
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

pub(super) type Result<T> = std::result::Result<T, DevNodeError>;

pub(super) fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> DevNodeError {
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

    pub(super) fn verbs_class(&self) -> PathBuf {
        self.sysfs.join("class/infiniband_verbs")
    }

    pub(super) fn ibdev_dir(&self, ibdev: &str) -> PathBuf {
        self.sysfs.join("class/infiniband").join(ibdev)
    }

    pub(super) fn uverbs_dir(&self, index: u32) -> PathBuf {
        self.verbs_class().join(uverbs_name(index))
    }

    pub(super) fn cdev(&self, index: u32) -> PathBuf {
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
    /// provider claims any such name when it is installed (docs/libibverbs-contract.md §1.5).
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

pub(super) fn check_ibdev_name(name: &str) -> Result<()> {
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

pub(super) fn check_netdev(name: &str) -> Result<()> {
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
