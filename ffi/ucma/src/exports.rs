//! The C functions the rxu provider (`librxu-rdmav<N>.so`) looks up with
//! `dlsym(RTLD_DEFAULT, ...)` when this library is preloaded, to reach the
//! uverbs emulation ([`crate::uverbs`]). Each returns -1 with errno set
//! on failure. Names carry a version: a provider that finds none of them
//! keeps its fallback (channels adopted at create_cq).

use std::ffi::c_int;
use std::os::fd::IntoRawFd;

use crate::interpose::uverbs;

fn fail(e: i32) -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
    -1
}

/// `cmd_fd` is the cmd_fd of an rxu context: completion channels created
/// on it are emulated from now on, until it is closed.
#[no_mangle]
pub extern "C" fn rxu_uverbs_v1_attach_cmd_fd(cmd_fd: c_int) -> c_int {
    match uverbs().attach_cmd_fd(cmd_fd) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// A new fd (close-on-exec, the caller's to close) for the write end of
/// the completion channel whose application fd is `channel_fd`; ENOENT if
/// the emulation did not make that channel.
#[no_mangle]
pub extern "C" fn rxu_uverbs_v1_comp_channel_peer(channel_fd: c_int) -> c_int {
    match uverbs().channel_peer(channel_fd) {
        Ok(fd) => fd.into_raw_fd(),
        Err(e) => fail(e),
    }
}

/// The next ASYNC_EVENT_ALLOC ioctl on `cmd_fd` (`ibv_import_device` makes
/// one after the provider's import_context) answers `async_fd`.
#[no_mangle]
pub extern "C" fn rxu_uverbs_v1_set_async_fd(cmd_fd: c_int, async_fd: c_int) -> c_int {
    match uverbs().set_async_fd(cmd_fd, async_fd) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}
