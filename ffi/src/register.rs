//! Registration with libibverbs: the ELF constructor, the device ops, the
//! match rule, and device allocation.
//!
//! Matching: the table holds the contract's name pattern (`rdma_device:N`
//! followed by `rxu*`), but `match_device` has the final word (libibverbs calls it
//! unconditionally): it accepts exactly the devices whose tree carries the
//! provider-private `rxu/` files written by `rxu up`, whatever their name,
//! and never a kernel device.

use std::ffi::{c_char, CStr};
use std::path::Path;

use crate::abi::{
    IbvDevice, VerbsDevice, VerbsDeviceOps, VerbsMatchEnt, VerbsSysfsDev, VERBS_MATCH_MODALIAS,
    VERBS_MATCH_SENTINEL,
};
use crate::{context, guard, log_debug, log_err, version};

/// Pointers into statics, shared read-only with C.
#[repr(transparent)]
struct Shared<T>(T);
// SAFETY: the wrapped values are immutable and only hold pointers to
// other immutable statics.
unsafe impl<T> Sync for Shared<T> {}

static MATCH_TABLE: Shared<[VerbsMatchEnt; 2]> = Shared([
    VerbsMatchEnt {
        driver_data: std::ptr::null(),
        modalias: c"rdma_device:Nrxu*".as_ptr(),
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_MODALIAS,
    },
    VerbsMatchEnt {
        driver_data: std::ptr::null(),
        modalias: std::ptr::null(),
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_SENTINEL,
    },
]);

static DEVICE_OPS: Shared<VerbsDeviceOps> = Shared(VerbsDeviceOps {
    name: c"rxu".as_ptr(),
    match_min_abi_version: transport::verbs::UVERBS_ABI_VERSION,
    match_max_abi_version: transport::verbs::UVERBS_ABI_VERSION,
    match_table: &MATCH_TABLE.0 as *const VerbsMatchEnt,
    static_providers: std::ptr::null(),
    match_device: Some(match_device),
    alloc_context: Some(context::alloc_context),
    import_context: None,
    alloc_device: Some(alloc_device),
    uninit_device: Some(uninit_device),
});

/// Runs when the shared object is loaded (not in this crate's unit tests,
/// which are an executable of their own).
#[used]
#[cfg_attr(not(test), link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = rxu_provider_init;

extern "C" fn rxu_provider_init() {
    guard::void_op("provider init", || match version::init() {
        Ok(lib) => {
            let release = lib.release.map_or("unknown".into(), |r| r.to_string());
            log_debug!(
                "registering with {} (rdma-core {release}, verbs_qp.comp_mask at {}, port attr {} bytes)",
                lib.path,
                lib.qp_comp_mask_off,
                lib.port_attr_size
            );
            // SAFETY: register takes a pointer to ops that live forever
            // (a static), as PROVIDER_DRIVER's constructor passes.
            unsafe { (lib.register)(&DEVICE_OPS.0) };
        }
        Err(e) => log_err!("not registering the rxu provider: {e}"),
    })
}

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

unsafe extern "C" fn match_device(dev: *mut VerbsSysfsDev) -> bool {
    let mut ok = false;
    guard::void_op("match_device", || {
        // SAFETY: libibverbs passes a live verbs_sysfs_dev.
        let path = c_field(unsafe { &(*dev).ibdev_path });
        ok = is_rxu_tree(Path::new(&path));
    });
    ok
}

unsafe extern "C" fn alloc_device(_dev: *mut VerbsSysfsDev) -> *mut VerbsDevice {
    guard::ptr_op("alloc_device", || {
        // SAFETY: VerbsDevice is plain data for which all-zero is valid
        // (and what the library requires: _ops NULL, refcount 0).
        let d: Box<VerbsDevice> = Box::new(unsafe { std::mem::zeroed() });
        Ok(Box::into_raw(d))
    })
}

unsafe extern "C" fn uninit_device(dev: *mut VerbsDevice) {
    guard::void_op("uninit_device", || {
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
