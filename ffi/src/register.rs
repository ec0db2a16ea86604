//! Registration with libibverbs: the ELF constructor, the device ops
//! table and the match table. The top of the crate: it names the device
//! ops (`crate::device`), `alloc_context` (`crate::context::open`) and
//! `import_context` (`crate::context::import`).
//!
//! Matching: the table holds the contract's name pattern (`rdma_device:N`
//! followed by `rxu*`), but `match_device` has the final word (libibverbs calls it
//! unconditionally): it accepts exactly the devices whose tree carries the
//! provider-private `rxu/` files written by `rxu up`, whatever their name,
//! and never a kernel device.

use crate::abi::{VerbsDeviceOps, VerbsMatchEnt, VERBS_MATCH_MODALIAS, VERBS_MATCH_SENTINEL};
use crate::context::import::import_context;
use crate::context::open::alloc_context;
use crate::device::{alloc_device, match_device, uninit_device};
use crate::{guard, log_debug, log_err, log_info, version};

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
    alloc_context: Some(alloc_context),
    import_context: Some(import_context),
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
            let file = version::provider_file().unwrap_or_else(|| "?".into());
            log_info!(
                "{file}: registering with {} (rdma-core {release}, IBVERBS_PRIVATE_{}, \
                 verbs_context {} bytes, {} ops, verbs_qp.comp_mask at {}, port attr {} bytes)",
                lib.path,
                lib.layout.private,
                lib.layout.verbs_context_size(),
                lib.ops.len(),
                lib.qp_comp_mask_off,
                lib.port_attr_size
            );
            log_debug!(
                "ops members left to libibverbs' placeholders: {:?}",
                lib.layout.extra
            );
            // SAFETY: register takes a pointer to ops that live forever
            // (a static), as PROVIDER_DRIVER's constructor passes.
            unsafe { (lib.register)(&DEVICE_OPS.0) };
        }
        Err(e) => log_err!("not registering the rxu provider: {e}"),
    })
}
