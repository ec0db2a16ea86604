//! The uverbs emulation of `librxu-ucma.so`, when that library is
//! preloaded (`rxu up` / `rxu env` export LD_PRELOAD): the functions it
//! exports for this provider, found with `dlsym(RTLD_DEFAULT, ...)` once.
//! Without it every call here says "not there" and the provider keeps
//! its fallbacks (docs/libibverbs-contract.md §2.4).

use std::ffi::{c_int, CStr};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

type AttachFn = unsafe extern "C" fn(c_int) -> c_int;
type PeerFn = unsafe extern "C" fn(c_int) -> c_int;
type SetAsyncFn = unsafe extern "C" fn(c_int, c_int) -> c_int;

struct Api {
    attach_cmd_fd: AttachFn,
    comp_channel_peer: PeerFn,
    set_async_fd: SetAsyncFn,
}

fn sym(name: &CStr) -> Option<usize> {
    // SAFETY: dlsym with a NUL-terminated name; NULL when absent.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}

fn api() -> Option<&'static Api> {
    static API: OnceLock<Option<Api>> = OnceLock::new();
    API.get_or_init(|| {
        let a = sym(c"rxu_uverbs_v1_attach_cmd_fd")?;
        let p = sym(c"rxu_uverbs_v1_comp_channel_peer")?;
        let s = sym(c"rxu_uverbs_v1_set_async_fd")?;
        // SAFETY: the addresses of librxu-ucma.so's exports of these
        // names, whose C types these are (ffi/ucma/src/exports.rs).
        Some(unsafe {
            Api {
                attach_cmd_fd: std::mem::transmute::<usize, AttachFn>(a),
                comp_channel_peer: std::mem::transmute::<usize, PeerFn>(p),
                set_async_fd: std::mem::transmute::<usize, SetAsyncFn>(s),
            }
        })
    })
    .as_ref()
}

/// Whether the preload is there.
pub fn available() -> bool {
    api().is_some()
}

/// Hands `cmd_fd` to the emulation; false without the preload (or if it
/// refused: the fallbacks apply then).
pub fn attach_cmd_fd(cmd_fd: RawFd) -> bool {
    // SAFETY: the emulation's function, with a plain integer.
    api().is_some_and(|a| unsafe { (a.attach_cmd_fd)(cmd_fd) } == 0)
}

/// The write end of the emulated completion channel whose application fd
/// is `channel_fd` (a new fd, ours); None if the emulation did not make it.
pub fn comp_channel_peer(channel_fd: RawFd) -> Option<OwnedFd> {
    let a = api()?;
    // SAFETY: the emulation's function, with a plain integer.
    let fd = unsafe { (a.comp_channel_peer)(channel_fd) };
    // SAFETY: a new descriptor the emulation handed over to us.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The next ASYNC_EVENT_ALLOC ioctl on `cmd_fd` (`ibv_import_device` makes
/// one after `import_context`) is to answer `async_fd`.
pub fn set_async_fd(cmd_fd: RawFd, async_fd: RawFd) -> Result<(), i32> {
    let a = api().ok_or(libc::EOPNOTSUPP)?;
    // SAFETY: the emulation's function, with plain integers.
    if unsafe { (a.set_async_fd)(cmd_fd, async_fd) } != 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    Ok(())
}
