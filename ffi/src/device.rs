//! The device ops libibverbs calls before any context exists: matching a
//! sysfs device (ours when its tree carries the `rxu/` files `rxu up`
//! writes), allocating and freeing the `verbs_device`; the devices
//! allocated so far ([`devices`], for `ibv_import_device`, which picks
//! the first device whose node numbers match and every rxu device has
//! /dev/null's); and reading names from the device structs.

use std::ffi::{c_char, CStr};
use std::path::Path;
use std::sync::Mutex;

use crate::abi::{IbvDevice, VerbsDevice, VerbsSysfsDev};
use crate::guard;

/// A fixed-size C string field as text (up to its NUL).
pub fn c_field(field: &[c_char]) -> String {
    // SAFETY: c_char and u8 have the same size and alignment.
    let bytes = unsafe { std::slice::from_raw_parts(field.as_ptr().cast::<u8>(), field.len()) };
    CStr::from_bytes_until_nul(bytes)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Whether a device's tree is one `rxu up` wrote.
pub fn is_rxu_tree(ibdev_path: &Path) -> bool {
    ibdev_path.join("rxu/gid_tbl_len").is_file()
}

pub unsafe extern "C" fn match_device(dev: *mut VerbsSysfsDev) -> bool {
    let mut ok = false;
    guard::void_op("match_device", || {
        // SAFETY: libibverbs passes a live verbs_sysfs_dev.
        let path = c_field(unsafe { &(*dev).ibdev_path });
        ok = is_rxu_tree(Path::new(&path));
    });
    ok
}

/// The `verbs_device`s alloc_device made and uninit_device did not free
/// yet (their addresses).
static DEVICES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn registry() -> std::sync::MutexGuard<'static, Vec<usize>> {
    DEVICES.lock().unwrap_or_else(|p| p.into_inner())
}

/// The rxu devices libibverbs holds now.
pub fn devices() -> Vec<*mut IbvDevice> {
    // A VerbsDevice starts with its ibv_device.
    registry().iter().map(|&d| d as *mut IbvDevice).collect()
}

pub unsafe extern "C" fn alloc_device(_dev: *mut VerbsSysfsDev) -> *mut VerbsDevice {
    guard::ptr_op("alloc_device", || {
        // SAFETY: VerbsDevice is plain data for which all-zero is valid
        // (and what the library requires: _ops NULL, refcount 0).
        let d: Box<VerbsDevice> = Box::new(unsafe { std::mem::zeroed() });
        let p = Box::into_raw(d);
        registry().push(p as usize);
        Ok(p)
    })
}

pub unsafe extern "C" fn uninit_device(dev: *mut VerbsDevice) {
    guard::void_op("uninit_device", || {
        registry().retain(|&d| d != dev as usize);
        // SAFETY: `dev` came from alloc_device's Box::into_raw and the
        // library calls this once, after its last use. vdev->sysfs is
        // already freed and not touched.
        drop(unsafe { Box::from_raw(dev) });
    })
}

/// The ibdev name of a device libibverbs hands us.
///
/// # Safety
/// `dev` must point to a live `ibv_device`.
pub unsafe fn ibdev_name(dev: *const IbvDevice) -> String {
    // SAFETY: dev points to a live ibv_device (the contract).
    c_field(unsafe { &(*dev).name })
}
