//! Every op's body runs inside one of these: errors become the C return
//! convention (an errno value, or NULL with `errno` set), and a panic — a
//! bug, never an expected path — is logged and reported as EIO instead of
//! unwinding into C.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Result of an op body: an errno value on failure.
pub type OpResult<T> = Result<T, c_int>;

pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

fn panicked(op: &str) -> c_int {
    crate::log_err!("{op}: internal error (panic); failing the call with EIO");
    libc::EIO
}

/// For ops returning 0 or a positive errno.
pub fn int_op(op: &str, f: impl FnOnce() -> OpResult<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e,
        Err(_) => panicked(op),
    }
}

/// For ops returning a count (>= 0) or a negative errno.
pub fn count_op(op: &str, f: impl FnOnce() -> OpResult<c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => -e,
        Err(_) => -panicked(op),
    }
}

/// For ops returning an object pointer, NULL with errno on failure.
pub fn ptr_op<T>(op: &str, f: impl FnOnce() -> OpResult<*mut T>) -> *mut T {
    let e = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(p)) => return p,
        Ok(Err(e)) => e,
        Err(_) => panicked(op),
    };
    set_errno(e);
    std::ptr::null_mut()
}

/// For ops returning nothing.
pub fn void_op(op: &str, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        panicked(op);
    }
}

/// Maps a client library error to its errno, logging it at info level.
pub fn client_err(op: &str) -> impl Fn(rxu_client::Error) -> c_int + '_ {
    move |e| {
        crate::log_info!("{op}: {e}");
        e.errno()
    }
}
