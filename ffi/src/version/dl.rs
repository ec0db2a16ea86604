//! The dynamic loader calls `detect` needs: symbols by version node, the
//! file a symbol lives in, and the `ibv_qp_to_qp_ex` probe.

use std::ffi::{c_char, c_void, CStr};

use crate::abi::{IbvQp, IbvQpEx, VerbsQpArea, VERBS_QP_EX};

pub type QpToQpExFn = unsafe extern "C" fn(*mut IbvQp) -> *mut IbvQpEx;

pub fn dlerror_text() -> String {
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
pub fn sym(handle: *mut c_void, name: &CStr, ver: Option<&CStr>) -> *mut c_void {
    // SAFETY: handle comes from dlopen; both strings are NUL-terminated.
    unsafe {
        match ver {
            Some(v) => libc::dlvsym(handle, name.as_ptr(), v.as_ptr()),
            None => libc::dlsym(handle, name.as_ptr()),
        }
    }
}

/// The path the object holding `addr` was loaded by (symlinks kept).
pub fn file_of(addr: *const c_void) -> Option<String> {
    // SAFETY: Dl_info is plain data; all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only looks the address up; info is writable.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname as *const c_char) };
    Some(name.to_string_lossy().into_owned())
}

/// The path of libibverbs behind `handle`.
pub fn library_path(handle: *mut c_void) -> Result<String, String> {
    let any = sym(handle, c"ibv_get_device_list", None);
    if any.is_null() {
        return Err("libibverbs has no ibv_get_device_list".into());
    }
    let name = file_of(any).ok_or("dladdr found no file for libibverbs")?;
    // The soname is a symlink to the file that carries the release.
    Ok(std::fs::canonicalize(&name)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or(name))
}

/// Which candidate offset `ibv_qp_to_qp_ex` reads `verbs_qp.comp_mask`
/// from: exactly one must answer.
pub fn probe_qp_comp_mask(to_qp_ex: QpToQpExFn) -> Result<usize, String> {
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
