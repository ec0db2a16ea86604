//! `import_context`, the device op behind `ibv_import_device(cmd_fd)`: a
//! second context on the open file of another context's `cmd_fd` (a
//! `dup` of it, or a copy passed over SCM_RIGHTS from another process),
//! sharing its PDs and MRs (`ibv_import_pd` / `ibv_import_mr`, in
//! `crate::ops::import`).
//!
//! libibverbs matches the fd's node numbers against each device's `dev`
//! file and calls the first device that matches; every rxu device has
//! /dev/null's numbers, so that is any rxu device. The daemons know which
//! context opened that file (every context tells its daemon its cmd_fd):
//! the one passed is asked first, then the other rxu devices, and the
//! context is made for the device whose daemon knows the file.
//!
//! After this op libibverbs asks the device for an async event fd
//! (ASYNC_EVENT_ALLOC ioctl on cmd_fd). Only the uverbs emulation of
//! `librxu-ucma.so` can answer that: without it, EOPNOTSUPP here.

use std::ffi::c_int;
use std::os::fd::BorrowedFd;

use rxu_client::{Context, Error};

use crate::abi::{IbvDevice, VerbsContext};
use crate::context::close::teardown;
use crate::context::open::{init, install};
use crate::context::state::RxuContext;
use crate::device::{devices, ibdev_name};
use crate::guard::{self, OpResult};
use crate::version::{self, Lib};
use crate::{log_info, preload};

/// The device among `first` and the other rxu devices whose daemon knows
/// `cmd_fd`'s open file, with a connection that imported it.
fn find(first: *mut IbvDevice, cmd_fd: BorrowedFd<'_>) -> OpResult<(*mut IbvDevice, Context)> {
    let mut candidates = vec![first];
    candidates.extend(devices().into_iter().filter(|&d| d != first));
    for dev in candidates {
        // SAFETY: libibverbs holds every device in its list (and `first`
        // is the device it passed) while ibv_import_device runs.
        let name = unsafe { ibdev_name(dev) };
        let client = match Context::open(&name) {
            Ok(c) => c,
            Err(e) => {
                log_info!("import_context: {name}: {e}");
                continue;
            }
        };
        match client.import_context(cmd_fd) {
            Ok(()) => return Ok((dev, client)),
            Err(Error::Daemon { errno, .. }) if errno == libc::ENOENT => {}
            Err(e) => {
                log_info!("import_context: {name}: {e}");
                return Err(e.errno());
            }
        }
    }
    log_info!("import_context: no rxu device has a context on fd {cmd_fd:?}");
    Err(libc::ENODEV)
}

pub unsafe extern "C" fn import_context(dev: *mut IbvDevice, cmd_fd: c_int) -> *mut VerbsContext {
    guard::ptr_op("import_context", || {
        let lib = version::lib().ok_or(libc::ENOSYS)?;
        if !preload::available() {
            log_info!("import_context: needs librxu-ucma.so preloaded (rxu env)");
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: the application's fd, open for the whole call (the
        // library checked it with fstat).
        let fd = unsafe { BorrowedFd::borrow_raw(cmd_fd) };
        let (dev, client) = find(dev, fd)?;
        // SAFETY: dev is a live rxu device; cmd_fd is the caller's, which
        // the context owns from here on (and closes), as with a kernel
        // provider's import.
        let rctx = unsafe { init(lib, dev, cmd_fd)? };
        // SAFETY: rctx is fresh and not handed out.
        match unsafe { finish(rctx, dev, lib, client) } {
            // SAFETY: rctx is a live RxuContext of this library.
            Ok(()) => Ok(unsafe { RxuContext::vctx(rctx, lib.layout.context_off) }),
            Err(e) => {
                // SAFETY: rctx is live and nothing else has seen it.
                unsafe { teardown(rctx, lib) };
                Err(e)
            }
        }
    })
}

/// As `open`, then the async fd libibverbs is about to ask for.
///
/// # Safety
/// As [`install`].
unsafe fn finish(
    rctx: *mut RxuContext,
    dev: *mut IbvDevice,
    lib: &'static Lib,
    client: Context,
) -> OpResult<()> {
    // SAFETY: as this function's contract.
    unsafe { install(rctx, dev, lib, client)? };
    // SAFETY: rctx is live and ours until returned.
    let ctx = unsafe { &(*rctx).tail.context };
    preload::set_async_fd(ctx.cmd_fd, ctx.async_fd)
}
