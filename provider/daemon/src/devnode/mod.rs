//! The device node: the sysfs-like tree and /dev/infiniband/uverbsN that
//! libibverbs 44 reads when no kernel RDMA stack exists
//! (docs/libibverbs-contract.md §1). Clients find the tree through
//! `SYSFS_PATH=<root>`; `/dev/infiniband` is compiled into libibverbs.
//!
//! ```text
//! <root>/class/infiniband_verbs/abi_version              6
//! <root>/class/misc/rdma_cm/abi_version                  4 (the ucma ABI of librxu-ucma.so)
//! <root>/class/infiniband_verbs/uverbsN/{ibdev,dev,abi_version}
//! <root>/class/infiniband/<ibdev>/{node_type,node_guid,...,ports/1/...,rxu/...,
//!                                  device/net/<ifname> -> /sys/class/net/<ifname>}
//! /dev/infiniband/uverbsN                                 -> /dev/null (or mknod)
//!                                  (uverbsN/dev says /dev/null's numbers either way)
//! ```
//!
//! libibverbs treats a device as new whenever the mtime of
//! `class/infiniband/<ibdev>/` changes (docs/libibverbs-contract.md §1.2 step 3), so the
//! directory is built under a hidden name and renamed into place complete,
//! `uverbsN` is published last (nothing lists a half-made device), and later
//! updates (GIDs, port state, MTU) only replace files in subdirectories,
//! each atomically (write a temporary, rename).

mod cdev;
mod desc;
pub mod format;
mod fsutil;
mod tree;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

pub use cdev::CdevKind;
pub use format::{Mtu, PortState, Speed};

use desc::{check_ibdev_name, check_netdev, io_err, Result};
pub use desc::{
    uverbs_name, DevNodeError, DeviceDesc, Paths, PortDesc, CLASS_ABI_VERSION, DEFAULT_DEV_DIR,
    DEFAULT_GID_TBL_LEN, MAX_GID_TBL_LEN, UCMA_ABI_VERSION, UVERBS_ABI_VERSION,
};

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
        // The ucma device `librxu-ucma.so` emulates, as the kernel lists it.
        let ucma = paths.sysfs.join("class/misc/rdma_cm");
        fsutil::create_dirs(&ucma).map_err(io_err("creating", &ucma))?;
        let ucma_abi = ucma.join("abi_version");
        fsutil::write_if_changed(&ucma_abi, &UCMA_ABI_VERSION.to_string())
            .map_err(io_err("writing", &ucma_abi))?;

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
        let cdev = cdev::parse_dev_file(&dev, &paths.cdev(uverbs_index))
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
