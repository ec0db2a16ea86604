//! Which libibverbs is running, and the layouts that follow from it
//! (docs/provider-abi.md). One provider file serves rdma-core 34..65: it is
//! installed under every name libibverbs looks for
//! (`librxu-rdmav{34,57,59,64,65}.so`), and at load time it
//! - reads the release from the library's file name,
//! - sees which `verbs_register_driver_<n>` the library has (by version
//!   node `IBVERBS_PRIVATE_<n>`) and its newest public node,
//! - picks the `verbs_context` / `verbs_context_ops` layout they name
//!   ([`layouts`]), and registers with that `verbs_register_driver_<n>`,
//! - probes the offset of `verbs_qp.comp_mask` (344 / 352 / 360) and the
//!   size of `ibv_port_attr` (52 / 56), which differ inside one layout.
//!
//! It refuses, with a log line that says why, anything it does not know.
//!
//! The private entry points are resolved with `dlvsym` by version node
//! instead of being linked: a link-time reference would pin one node and
//! make `dlopen` of the provider fail under every other library.

mod dl;
pub mod layouts;
#[cfg(test)]
mod tests;

use std::ffi::{c_int, c_void, CStr, CString};
use std::mem::offset_of;
use std::sync::OnceLock;

use crate::abi::{IbvDevice, IbvQpEx, VerbsContext, VerbsDeviceOps};
use dl::{library_path, probe_qp_comp_mask, sym, QpToQpExFn};
pub use layouts::Layout;

pub type RegisterFn = unsafe extern "C" fn(*const VerbsDeviceOps);
pub type InitAllocFn =
    unsafe extern "C" fn(*mut IbvDevice, c_int, usize, *mut VerbsContext, u32) -> *mut c_void;
/// The ops argument is the release's `struct verbs_context_ops`, built by
/// [`Layout::build_ops`].
pub type SetOpsFn = unsafe extern "C" fn(*mut VerbsContext, *const usize);
pub type UninitFn = unsafe extern "C" fn(*mut VerbsContext);

/// The running library, as detected at load time.
pub struct Lib {
    /// rdma-core release from the library's file name, if it parsed.
    pub release: Option<u32>,
    pub path: String,
    /// Its `verbs_context` / `verbs_context_ops` layout.
    pub layout: &'static Layout,
    /// This release's `verbs_context_ops`, filled from `crate::ops::OPS`.
    pub ops: Box<[usize]>,
    /// Offset of `verbs_qp.comp_mask` (= size of the library's `ibv_qp_ex`).
    pub qp_comp_mask_off: usize,
    /// The library's `sizeof(struct ibv_port_attr)`.
    pub port_attr_size: usize,
    pub register: RegisterFn,
    pub init_and_alloc_context: InitAllocFn,
    pub set_ops: SetOpsFn,
    pub uninit_context: UninitFn,
}

impl Lib {
    /// `ibv_qp_ex.wr_atomic_write` exists (44+).
    pub fn has_atomic_write(&self) -> bool {
        self.qp_comp_mask_off > offset_of!(IbvQpEx, wr_atomic_write)
    }
    /// `ibv_qp_ex.wr_flush` exists (45+).
    pub fn has_flush(&self) -> bool {
        self.qp_comp_mask_off > std::mem::size_of::<IbvQpEx>()
    }
}

static LIB: OnceLock<Lib> = OnceLock::new();

/// The library detected by [`init`]; None if the provider did not register.
pub fn lib() -> Option<&'static Lib> {
    LIB.get()
}

/// Detects the library and remembers it; the error says why the provider
/// must not register.
pub fn init() -> Result<&'static Lib, String> {
    let lib = detect()?;
    Ok(LIB.get_or_init(|| lib))
}

/// The file name this provider was loaded by (one of the
/// `librxu-rdmav<n>.so` names, not what the symlink points to), for the log.
pub fn provider_file() -> Option<String> {
    dl::file_of(init as *const c_void)
}

/// The rdma-core release in a library file name such as
/// `libibverbs.so.1.14.44.0` (upstream names it
/// `libibverbs.so.1.<abi minor>.<release>`).
pub fn parse_release(file_name: &str) -> Option<u32> {
    let rest = file_name.strip_prefix("libibverbs.so.1.")?;
    let mut it = rest.split('.');
    let _abi_minor: u32 = it.next()?.parse().ok()?;
    it.next()?.parse().ok()
}

/// The (comp_mask offset, port attr size) each release uses.
pub fn expected_layout(release: u32) -> Option<(usize, usize)> {
    match release {
        34..=43 => Some((344, 52)),
        44 => Some((352, 52)),
        45..=48 => Some((360, 52)),
        49..=65 => Some((360, 56)),
        _ => None,
    }
}

/// Checks the probed facts against the release named by the file.
pub fn check_layout(release: Option<u32>, qp_off: usize, port: usize) -> Result<(), String> {
    if ![344, 352, 360].contains(&qp_off) || ![52, 56].contains(&port) {
        return Err(format!(
            "unknown layout (verbs_qp.comp_mask at {qp_off}, ibv_port_attr of {port} bytes)"
        ));
    }
    let Some(r) = release else { return Ok(()) };
    match expected_layout(r) {
        None => Err(format!("rdma-core {r} is not supported")),
        Some(exp) if exp != (qp_off, port) => Err(format!(
            "rdma-core {r} should have verbs_qp.comp_mask at {} and a {}-byte ibv_port_attr, \
             but the loaded library has {qp_off} and {port}",
            exp.0, exp.1
        )),
        Some(_) => Ok(()),
    }
}

fn node(name: String) -> CString {
    // A formatted node name holds no NUL.
    CString::new(name).unwrap_or_default()
}

/// The library's identity from its symbols.
fn seen(handle: *mut c_void, release: Option<u32>) -> layouts::Seen {
    let privates = layouts::PRIVATE_ABIS
        .iter()
        .copied()
        .filter(|n| {
            let f = node(format!("verbs_register_driver_{n}"));
            !sym(handle, &f, Some(&node(format!("IBVERBS_PRIVATE_{n}")))).is_null()
        })
        .collect();
    let public_minor = layouts::PUBLIC_NODE_SYMBOLS
        .iter()
        .rev()
        .find(|(m, s)| !sym(handle, s, Some(&node(format!("IBVERBS_1.{m}")))).is_null())
        .map(|&(m, _)| m);
    layouts::Seen {
        release,
        privates,
        public_minor,
    }
}

fn detect() -> Result<Lib, String> {
    // The library that is loading us: already in the process, found by soname.
    // SAFETY: the name is NUL-terminated; RTLD_NOLOAD never loads anything.
    let handle = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD,
        )
    };
    if handle.is_null() {
        return Err(format!(
            "libibverbs.so.1 is not loaded in this process ({})",
            dl::dlerror_text()
        ));
    }
    let path = library_path(handle)?;
    let file = path.rsplit('/').next().unwrap_or(&path);
    let release = parse_release(file);
    let layout = layouts::choose(&seen(handle, release)).map_err(|e| format!("{path}: {e}"))?;
    if layout.context_off > crate::context::state::MAX_CONTEXT_OFFSET {
        return Err(format!(
            "{path}: verbs_context of {} bytes does not fit the provider's context",
            layout.verbs_context_size()
        ));
    }
    let private_node = node(format!("IBVERBS_PRIVATE_{}", layout.private));
    let private = |name: &CStr| {
        let p = sym(handle, name, Some(&private_node));
        if p.is_null() {
            Err(format!(
                "{path} has no {}@{}",
                name.to_string_lossy(),
                private_node.to_string_lossy()
            ))
        } else {
            Ok(p)
        }
    };
    let register = private(&node(format!("verbs_register_driver_{}", layout.private)))?;
    let init_alloc = private(c"_verbs_init_and_alloc_context")?;
    let set_ops = private(c"verbs_set_ops")?;
    let uninit = private(c"verbs_uninit_context")?;
    // Added in rdma-core 49, together with the 4-byte longer ibv_port_attr;
    // every later private node has both.
    let port_attr_size = if layout.private == 34
        && sym(handle, c"ibv_wr_opcode_str", Some(&private_node)).is_null()
    {
        52
    } else {
        56
    };
    let to_qp_ex = sym(handle, c"ibv_qp_to_qp_ex", None);
    if to_qp_ex.is_null() {
        return Err(format!("{path} has no ibv_qp_to_qp_ex"));
    }
    // SAFETY: ibv_qp_to_qp_ex has had this signature since it was added.
    let to_qp_ex: QpToQpExFn = unsafe { std::mem::transmute(to_qp_ex) };
    let qp_comp_mask_off = probe_qp_comp_mask(to_qp_ex)?;
    check_layout(release, qp_comp_mask_off, port_attr_size).map_err(|e| format!("{path}: {e}"))?;

    // SAFETY: each symbol was found under the private node of this layout,
    // whose signatures are those of the types (driver.h, unchanged 34..65;
    // verbs_set_ops takes that release's verbs_context_ops, which `ops` is).
    unsafe {
        Ok(Lib {
            release,
            path,
            layout,
            ops: layout.build_ops(&crate::ops::OPS),
            qp_comp_mask_off,
            port_attr_size,
            register: std::mem::transmute::<*mut c_void, RegisterFn>(register),
            init_and_alloc_context: std::mem::transmute::<*mut c_void, InitAllocFn>(init_alloc),
            set_ops: std::mem::transmute::<*mut c_void, SetOpsFn>(set_ops),
            uninit_context: std::mem::transmute::<*mut c_void, UninitFn>(uninit),
        })
    }
}
