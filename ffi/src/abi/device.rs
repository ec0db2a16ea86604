//! Device discovery and registration structs (`driver.h`): unchanged
//! from rdma-core 39 through master (docs/libibverbs-contract.md §3.2, §3.3). The public
//! `ibv_device` and `verbs_context` they point at are `verbs.h` structs
//! and live in `context.rs`, which refers to nothing here.

use std::ffi::{c_char, c_int, c_void};

use super::context::{IbvDevice, VerbsContext};

/// `struct verbs_match_ent` (24).
#[repr(C)]
pub struct VerbsMatchEnt {
    pub driver_data: *const c_void,
    /// `union { const char *modalias; uint64_t driver_id; }`.
    pub modalias: *const c_char,
    pub vendor: u16,
    pub device: u16,
    /// 0 sentinel, 1 PCI, 2 modalias, 3 driver id.
    pub kind: u8,
}

pub const VERBS_MATCH_SENTINEL: u8 = 0;
pub const VERBS_MATCH_MODALIAS: u8 = 2;

/// `struct verbs_sysfs_dev` (992). Read only in `match_device`.
#[repr(C)]
pub struct VerbsSysfsDev {
    pub entry: [usize; 2],
    pub provider_data: *mut c_void,
    pub match_: *const VerbsMatchEnt,
    pub flags: u32,
    pub sysfs_name: [c_char; 64],
    pub sysfs_cdev: u64,
    pub ibdev_name: [c_char; 64],
    pub ibdev_path: [c_char; 256],
    pub modalias: [c_char; 512],
    pub node_guid: u64,
    pub driver_id: u32,
    pub node_type: c_int,
    pub ibdev_idx: c_int,
    pub num_ports: u32,
    pub abi_ver: u32,
    pub time_created: libc::timespec,
}

/// `struct verbs_device_ops` (72).
#[repr(C)]
pub struct VerbsDeviceOps {
    pub name: *const c_char,
    pub match_min_abi_version: u32,
    pub match_max_abi_version: u32,
    pub match_table: *const VerbsMatchEnt,
    pub static_providers: *const *const VerbsDeviceOps,
    pub match_device: Option<unsafe extern "C" fn(*mut VerbsSysfsDev) -> bool>,
    pub alloc_context:
        Option<unsafe extern "C" fn(*mut IbvDevice, c_int, *mut c_void) -> *mut VerbsContext>,
    pub import_context: Option<unsafe extern "C" fn(*mut IbvDevice, c_int) -> *mut VerbsContext>,
    pub alloc_device: Option<unsafe extern "C" fn(*mut VerbsSysfsDev) -> *mut VerbsDevice>,
    pub uninit_device: Option<unsafe extern "C" fn(*mut VerbsDevice)>,
}

/// `struct verbs_device` (712). The library fills everything but
/// `core_support` after `alloc_device`.
#[repr(C)]
pub struct VerbsDevice {
    pub device: IbvDevice,
    pub ops: *const VerbsDeviceOps,
    pub refcount: c_int,
    pub entry: [usize; 2],
    pub sysfs: *mut VerbsSysfsDev,
    pub core_support: u64,
}
