//! Which libibverbs is running, and the layout facts that differ between
//! the rdma-core releases sharing provider ABI `IBVERBS_PRIVATE_34`
//! (39..56, docs/libibverbs-contract.md §3.3, §3.5): the offset of `verbs_qp.comp_mask`
//! (344 / 352 / 360) and the size of `ibv_port_attr` (52 / 56). Everything
//! else the provider touches is the same across them; `verbs_context` is
//! checked again in `alloc_context`.
//!
//! The private entry points are resolved here with `dlvsym` by version node
//! instead of being linked: a link-time reference would make `dlopen` of
//! the provider fail with libibverbs' bare "couldn't load driver" under any
//! other ABI, where this says what is wrong and registers nothing.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::offset_of;
use std::sync::OnceLock;

use crate::abi::{
    IbvDevice, IbvQp, IbvQpEx, VerbsContext, VerbsContextOps, VerbsDeviceOps, VerbsQpArea,
    VERBS_QP_EX,
};

/// The provider ABI this file is built for.
pub const PRIVATE_ABI: &CStr = c"IBVERBS_PRIVATE_34";
/// rdma-core releases using it.
pub const SUPPORTED: std::ops::RangeInclusive<u32> = 39..=56;

pub type RegisterFn = unsafe extern "C" fn(*const VerbsDeviceOps);
pub type InitAllocFn =
    unsafe extern "C" fn(*mut IbvDevice, c_int, usize, *mut VerbsContext, u32) -> *mut c_void;
pub type SetOpsFn = unsafe extern "C" fn(*mut VerbsContext, *const VerbsContextOps);
pub type UninitFn = unsafe extern "C" fn(*mut VerbsContext);
type QpToQpExFn = unsafe extern "C" fn(*mut IbvQp) -> *mut IbvQpEx;

/// The running library, as detected at load time.
pub struct Lib {
    /// rdma-core release from the library's file name, if it parsed.
    pub release: Option<u32>,
    pub path: String,
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
        39..=43 => Some((344, 52)),
        44 => Some((352, 52)),
        45..=48 => Some((360, 52)),
        49..=56 => Some((360, 56)),
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
        None => Err(format!(
            "rdma-core {r} is not supported (this provider knows {}..={})",
            SUPPORTED.start(),
            SUPPORTED.end()
        )),
        Some(exp) if exp != (qp_off, port) => Err(format!(
            "rdma-core {r} should have verbs_qp.comp_mask at {} and a {}-byte ibv_port_attr, \
             but the loaded library has {qp_off} and {port}",
            exp.0, exp.1
        )),
        Some(_) => Ok(()),
    }
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until
    // the next dl* call on this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown error".into();
    }
    // SAFETY: non-NULL, NUL-terminated (above).
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

/// A symbol of `handle` with version node `ver` (None: any version).
fn sym(handle: *mut c_void, name: &CStr, ver: Option<&CStr>) -> *mut c_void {
    // SAFETY: handle comes from dlopen; both strings are NUL-terminated.
    unsafe {
        match ver {
            Some(v) => libc::dlvsym(handle, name.as_ptr(), v.as_ptr()),
            None => libc::dlsym(handle, name.as_ptr()),
        }
    }
}

fn library_path(handle: *mut c_void) -> Result<String, String> {
    let any = sym(handle, c"ibv_get_device_list", None);
    if any.is_null() {
        return Err("libibverbs has no ibv_get_device_list".into());
    }
    // SAFETY: Dl_info is plain data; all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `any` is an address inside a loaded object; info is writable.
    if unsafe { libc::dladdr(any, &mut info) } == 0 || info.dli_fname.is_null() {
        return Err("dladdr found no file for libibverbs".into());
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname as *const c_char) };
    let name = name.to_string_lossy().into_owned();
    Ok(std::fs::canonicalize(&name)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or(name))
}

/// Which candidate offset `ibv_qp_to_qp_ex` reads `verbs_qp.comp_mask`
/// from: exactly one must answer.
fn probe_qp_comp_mask(to_qp_ex: QpToQpExFn) -> Result<usize, String> {
    let mut hits = Vec::new();
    for off in [344usize, 352, 360] {
        // SAFETY: VerbsQpArea is plain data (integers, pointers, Options of
        // fn pointers, pthread types), for which all-zero is valid.
        let mut area: Box<VerbsQpArea> = Box::new(unsafe { std::mem::zeroed() });
        let base = (&mut *area as *mut VerbsQpArea).cast::<u8>();
        // SAFETY: off + 4 <= 364 < size_of::<VerbsQpArea>() (384) and the
        // offset is 8-aligned, so the u32 write stays inside the box.
        unsafe { base.add(off).cast::<u32>().write(VERBS_QP_EX) };
        // SAFETY: the function only reads the u32 at its comp_mask offset
        // (at most 360) of a buffer that is 384 bytes long.
        let r = unsafe { to_qp_ex(base.cast()) };
        if !r.is_null() {
            hits.push(off);
        }
    }
    match hits[..] {
        [off] => Ok(off),
        _ => Err(format!(
            "ibv_qp_to_qp_ex answered for offsets {hits:?}; expected exactly one of 344/352/360"
        )),
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
            dlerror_text()
        ));
    }
    let path = library_path(handle)?;
    let file = path.rsplit('/').next().unwrap_or(&path);
    let release = parse_release(file);

    let private = |name: &CStr| {
        let p = sym(handle, name, Some(PRIVATE_ABI));
        if p.is_null() {
            Err(format!(
                "{path} has no {}@{} (this provider needs rdma-core {}..={})",
                name.to_string_lossy(),
                PRIVATE_ABI.to_string_lossy(),
                SUPPORTED.start(),
                SUPPORTED.end()
            ))
        } else {
            Ok(p)
        }
    };
    let register = private(c"verbs_register_driver_34")?;
    let init_alloc = private(c"_verbs_init_and_alloc_context")?;
    let set_ops = private(c"verbs_set_ops")?;
    let uninit = private(c"verbs_uninit_context")?;
    // Added in rdma-core 49, together with the 4-byte longer ibv_port_attr.
    let port_attr_size = if sym(handle, c"ibv_wr_opcode_str", Some(PRIVATE_ABI)).is_null() {
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

    // SAFETY: each symbol was found under IBVERBS_PRIVATE_34, whose
    // signatures are those of the types (driver.h, unchanged 39..master).
    unsafe {
        Ok(Lib {
            release,
            path,
            qp_comp_mask_off,
            port_attr_size,
            register: std::mem::transmute::<*mut c_void, RegisterFn>(register),
            init_and_alloc_context: std::mem::transmute::<*mut c_void, InitAllocFn>(init_alloc),
            set_ops: std::mem::transmute::<*mut c_void, SetOpsFn>(set_ops),
            uninit_context: std::mem::transmute::<*mut c_void, UninitFn>(uninit),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_from_file_name() {
        assert_eq!(parse_release("libibverbs.so.1.14.44.0"), Some(44));
        assert_eq!(parse_release("libibverbs.so.1.14.39.0"), Some(39));
        assert_eq!(parse_release("libibverbs.so.1.15.59.1"), Some(59));
        assert_eq!(parse_release("libibverbs.so.1"), None);
        assert_eq!(parse_release("libibverbs.so.1.14"), None);
        assert_eq!(parse_release("libfoo.so.1.14.44.0"), None);
    }

    #[test]
    fn layouts_per_release() {
        assert!(check_layout(Some(44), 352, 52).is_ok());
        assert!(check_layout(Some(39), 344, 52).is_ok());
        assert!(check_layout(Some(50), 360, 56).is_ok());
        assert!(check_layout(None, 360, 52).is_ok());
        assert!(check_layout(Some(44), 360, 52).is_err());
        assert!(check_layout(Some(50), 360, 52).is_err());
        assert!(check_layout(Some(57), 360, 56).is_err());
        assert!(check_layout(None, 348, 52).is_err());
    }

    #[test]
    fn probe_finds_the_offset() {
        unsafe extern "C" fn at_352(qp: *mut IbvQp) -> *mut IbvQpEx {
            // SAFETY: the probe passes a 384-byte buffer.
            let m = unsafe { qp.cast::<u8>().add(352).cast::<u32>().read() };
            if m & VERBS_QP_EX != 0 {
                qp.cast()
            } else {
                std::ptr::null_mut()
            }
        }
        assert_eq!(probe_qp_comp_mask(at_352), Ok(352));
        unsafe extern "C" fn never(_: *mut IbvQp) -> *mut IbvQpEx {
            std::ptr::null_mut()
        }
        assert!(probe_qp_comp_mask(never).is_err());
    }
}
