//! `alloc_context`: connects to the device's rxud, sets up the context
//! state and installs the ops table. [`init`] and [`install`] are shared
//! with `import_context` (`super::import`).

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::AtomicU32;

use rxu_client::Context;

use crate::abi::{IbvDevice, VerbsContext};
use crate::channel::{self, ChannelMode, Channels};
use crate::context::close::teardown;
use crate::context::state::{CtxState, RxuContext};
use crate::device::ibdev_name;
use crate::events::Live;
use crate::guard::{self, OpResult};
use crate::version::{self, Lib};
use crate::{log_err, log_info, preload};

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

pub unsafe extern "C" fn alloc_context(
    dev: *mut IbvDevice,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut VerbsContext {
    guard::ptr_op("alloc_context", || {
        let Some(lib) = version::lib() else {
            // SAFETY: the library handed us ownership of cmd_fd.
            unsafe { libc::close(cmd_fd) };
            return Err(libc::ENOSYS);
        };
        // SAFETY: dev and cmd_fd are what the library passed to
        // alloc_context, as init requires.
        let rctx = unsafe { init(lib, dev, cmd_fd)? };
        // SAFETY: rctx is the fresh, initialised allocation, not handed
        // out yet, as open requires.
        match unsafe { open(rctx, dev, lib) } {
            // SAFETY: rctx is a live RxuContext of this library.
            Ok(()) => Ok(unsafe { RxuContext::vctx(rctx, lib.layout.context_off) }),
            Err(e) => {
                // SAFETY: rctx is live and nothing else has seen it, as
                // teardown requires.
                unsafe { teardown(rctx, lib) };
                Err(e)
            }
        }
    })
}

/// The library's allocation of a context for `dev` on `cmd_fd` (which it
/// owns from here on, and closes if this fails).
///
/// # Safety
/// `dev` must be a live rxu device; `cmd_fd` an fd the library hands over.
pub unsafe fn init(lib: &Lib, dev: *mut IbvDevice, cmd_fd: c_int) -> OpResult<*mut RxuContext> {
    // SAFETY: the C macro verbs_init_and_alloc_context passes the
    // member's offset disguised as a pointer; the library calloc()s
    // alloc_size bytes and initialises its verbs_context at that offset,
    // which ends with the RxuContext's public context (vctx_offset).
    let base = unsafe {
        (lib.init_and_alloc_context)(
            dev,
            cmd_fd,
            size_of::<RxuContext>(),
            RxuContext::vctx_offset(lib.layout.context_off) as *mut VerbsContext,
            0,
        )
    };
    if base.is_null() {
        // The library closed cmd_fd and set errno.
        return Err(errno());
    }
    Ok(base.cast::<RxuContext>())
}

/// Checks the library's view of the context, connects to rxud, installs
/// the ops and the fds.
///
/// # Safety
/// `rctx` must be a fresh RxuContext from `_verbs_init_and_alloc_context`,
/// not yet handed to the application.
unsafe fn open(rctx: *mut RxuContext, dev: *mut IbvDevice, lib: &'static Lib) -> OpResult<()> {
    // SAFETY: dev is the live device being opened.
    let name = unsafe { ibdev_name(dev) };
    let client = Context::open(&name).map_err(|e| {
        log_err!("cannot open {name}: {e}");
        e.errno()
    })?;
    // SAFETY: rctx is live and only ours until returned (the contract).
    let cmd_fd = unsafe { (*rctx).tail.context.cmd_fd };
    // SAFETY: the context's cmd_fd, open for the whole call.
    let fd = unsafe { BorrowedFd::borrow_raw(cmd_fd) };
    if let Err(e) = client.bind_cmd_fd(fd) {
        // Only ibv_import_device needs it.
        log_info!("{name}: the daemon does not know this context's cmd_fd ({e})");
    }
    // SAFETY: as this function's contract.
    unsafe { install(rctx, dev, lib, client) }
}

/// Installs the state around an open client connection: checks the
/// library's view of the context, picks the channel mode, sets the ops
/// and the fds.
///
/// # Safety
/// As [`open`].
pub unsafe fn install(
    rctx: *mut RxuContext,
    dev: *mut IbvDevice,
    lib: &'static Lib,
    client: Context,
) -> OpResult<()> {
    // SAFETY: rctx is live and only ours until returned (the contract).
    let tail = unsafe { &mut (*rctx).tail };
    let ctx = &mut tail.context;
    let want = lib.layout.verbs_context_size();
    if tail.sz != want || ctx.abi_compat as usize != usize::MAX || ctx.device != dev {
        log_err!(
            "{}: verbs_context is {} bytes (rdma-core {}..={} have {want}); \
             refusing to open the device",
            lib.path,
            tail.sz,
            lib.layout.releases.start(),
            lib.layout.releases.end()
        );
        return Err(libc::EPROTO);
    }
    let name = client.device_name().to_owned();
    let async_fd = client.async_fd().ok_or(libc::EPROTO)?;
    // The library owns (and closes) context.async_fd; we keep ours.
    // SAFETY: fcntl on a valid fd we own.
    let lib_async = unsafe { libc::fcntl(async_fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if lib_async < 0 {
        return Err(errno());
    }
    let mode = channel::choose_mode(ctx.cmd_fd, preload::attach_cmd_fd);
    if mode == ChannelMode::Refuse {
        if let Err(e) = channel::make_cmd_fd_read_only(ctx.cmd_fd) {
            // SAFETY: lib_async is ours, not yet handed out.
            unsafe { libc::close(lib_async) };
            return Err(e);
        }
    }
    log_info!("{name}: opened (completion channels: {mode:?})");
    let st = Box::new(CtxState {
        client,
        lib,
        channels: Channels::new(mode),
        live: Live::default(),
        next_handle: AtomicU32::new(1),
    });
    // SAFETY: rctx is live; the state is freed in teardown.
    unsafe { (*rctx).state = Box::into_raw(st) };
    // SAFETY: the library initialised its verbs_context in rctx; lib.ops is
    // this release's verbs_context_ops, living as long as the library.
    unsafe {
        (lib.set_ops)(
            RxuContext::vctx(rctx, lib.layout.context_off),
            lib.ops.as_ptr(),
        )
    };
    tail.context.async_fd = lib_async;
    tail.context.num_comp_vectors = 1;
    Ok(())
}
