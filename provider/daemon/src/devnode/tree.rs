//! Which files the tree holds, relative to their directories, for a device.
//!
//! Read by libibverbs 44 (docs/libibverbs-contract.md §1.2, §1.4, §1.8):
//!   class/infiniband_verbs/abi_version, uverbsN/{ibdev,dev,abi_version},
//!   <ibdev>/{node_type,node_guid}, ports/1/gids/<i>,
//!   ports/1/gid_attrs/{types,ndevs}/<i>, ports/1/pkeys/0.
//! Written in the kernel's formats for tools and humans, never read by
//! libibverbs (it asks the provider for port attributes): <ibdev>/
//! {sys_image_guid,node_desc,fw_ver,hw_rev} and ports/1/{state,phys_state,
//! link_layer,rate,lid,sm_lid,lid_mask_count,sm_sl,cap_mask}.
//! Private to the rxu provider: <ibdev>/rxu/{netdev,gid_tbl_len,active_mtu,
//! max_mtu}.
//! For netdev mapping tools (ibdev2netdev's older method, device managers
//! that follow `ibdev_path`): <ibdev>/device/net/<ifname>, a symlink to the
//! interface's directory in the real sysfs, as a NIC's PCI device holds
//! its netdev (`ports/1/gid_attrs/ndevs/<i>` is the newer method).
//! Deliberately absent: device/modalias (no stock provider then matches by
//! PCI id) and board_id (ibv_devinfo omits the line).

use std::path::PathBuf;

use super::desc::DeviceDesc;
use super::format::{self, Gid, Mtu, PortState};

pub const PORT: &str = "ports/1";
pub const RXU: &str = "rxu";

pub fn gid_path(i: u32) -> PathBuf {
    PathBuf::from(format!("{PORT}/gids/{i}"))
}

pub fn gid_type_path(i: u32) -> PathBuf {
    PathBuf::from(format!("{PORT}/gid_attrs/types/{i}"))
}

pub fn gid_ndev_path(i: u32) -> PathBuf {
    PathBuf::from(format!("{PORT}/gid_attrs/ndevs/{i}"))
}

pub fn state_path() -> PathBuf {
    PathBuf::from(format!("{PORT}/state"))
}

pub fn phys_state_path() -> PathBuf {
    PathBuf::from(format!("{PORT}/phys_state"))
}

pub fn rxu_path(name: &str) -> PathBuf {
    PathBuf::from(format!("{RXU}/{name}"))
}

/// Entry `i` of the GID table: the GID text, and the netdev to name in
/// `ndevs/<i>` (None: no file, which libibverbs reads as ifindex 0).
pub fn gid_slot(table: &[Gid], i: u32, netdev: Option<&str>) -> (String, Option<String>) {
    match table.get(i as usize) {
        Some(g) => (format::gid(g), netdev.map(str::to_owned)),
        None => (format::gid(&[0; 16]), None),
    }
}

/// Every file of `class/infiniband/<ibdev>/`, relative to it. Directories
/// that may be empty come from `ibdev_dirs`.
pub fn ibdev_files(desc: &DeviceDesc) -> Vec<(PathBuf, String)> {
    let p = &desc.port;
    let mut files: Vec<(PathBuf, String)> = vec![
        ("node_type".into(), "1: CA".into()),
        ("node_guid".into(), format::guid(desc.node_guid)),
        ("sys_image_guid".into(), format::guid(desc.sys_image_guid)),
        ("node_desc".into(), desc.node_desc.clone()),
        ("fw_ver".into(), desc.fw_ver.clone()),
        ("hw_rev".into(), format!("{:x}", desc.hw_rev)),
        (state_path(), p.state.state_file()),
        (phys_state_path(), p.state.phys_state_file().into()),
        (format!("{PORT}/link_layer").into(), "Ethernet".into()),
        (
            format!("{PORT}/rate").into(),
            format::rate(p.width, p.speed),
        ),
        (format!("{PORT}/lid").into(), format!("0x{:x}", p.lid)),
        (format!("{PORT}/sm_lid").into(), format!("0x{:x}", p.sm_lid)),
        (format!("{PORT}/lid_mask_count").into(), p.lmc.to_string()),
        (format!("{PORT}/sm_sl").into(), p.sm_sl.to_string()),
        (
            format!("{PORT}/cap_mask").into(),
            format!("0x{:08x}", p.cap_mask),
        ),
        (format!("{PORT}/pkeys/0").into(), "0xffff".into()),
        (rxu_path("netdev"), desc.netdev.clone().unwrap_or_default()),
        (rxu_path("gid_tbl_len"), desc.gid_tbl_len.to_string()),
        (rxu_path("active_mtu"), mtu_file(p.active_mtu)),
        (rxu_path("max_mtu"), mtu_file(p.max_mtu)),
    ];
    let table = format::gid_table(&desc.gids);
    for i in 0..desc.gid_tbl_len {
        let (gid, ndev) = gid_slot(&table, i, desc.netdev.as_deref());
        files.push((gid_path(i), gid));
        files.push((gid_type_path(i), "RoCE v2".into()));
        if let Some(ndev) = ndev {
            files.push((gid_ndev_path(i), ndev));
        }
    }
    files
}

/// Where the real sysfs lists network interfaces (not relocated with the
/// tree: the link names the interface the kernel knows).
pub const NET_CLASS: &str = "/sys/class/net";

/// Symbolic links of `class/infiniband/<ibdev>/`: `device/net/<ifname>`.
pub fn ibdev_links(desc: &DeviceDesc) -> Vec<(PathBuf, PathBuf)> {
    desc.netdev
        .iter()
        .map(|nd| {
            (
                PathBuf::from(format!("device/net/{nd}")),
                std::path::Path::new(NET_CLASS).join(nd),
            )
        })
        .collect()
}

/// Directories that must exist even when empty: libibverbs decides GID
/// types by whether `gid_attrs/` exists, and ndevs/ may hold nothing.
pub fn ibdev_dirs() -> Vec<PathBuf> {
    vec![format!("{PORT}/gid_attrs/ndevs").into()]
}

/// Files of `class/infiniband_verbs/uverbsN/`.
pub fn uverbs_files(desc: &DeviceDesc) -> Vec<(PathBuf, String)> {
    vec![
        ("ibdev".into(), desc.ibdev.clone()),
        ("dev".into(), desc.cdev.dev_file()),
        ("abi_version".into(), desc.uverbs_abi_version.to_string()),
    ]
}

pub fn mtu_file(m: Mtu) -> String {
    m.bytes().to_string()
}

pub fn port_state_files(state: PortState) -> [(PathBuf, String); 2] {
    [
        (state_path(), state.state_file()),
        (phys_state_path(), state.phys_state_file().into()),
    ]
}
