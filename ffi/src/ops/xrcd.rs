//! XRC domains: `ibv_open_xrcd` / `ibv_close_xrcd`.

use std::ffi::{c_int, c_void};
use std::os::fd::BorrowedFd;

use rxu_client::Xrcd;

use crate::abi::consts::xrcd_init;
use crate::abi::{IbvContext, IbvXrcd, IbvXrcdInitAttr, VerbsXrcd};
use crate::context::state::state;
use crate::guard::{self, client_err, OpResult};
use crate::objects::RxuXrcd;

/// `ibv_open_xrcd`: FD and OFLAGS are required (as the kernel's command
/// requires them); fd -1 makes a domain of this process alone, a file's
/// fd the domain every process opening that file shares.
pub unsafe extern "C" fn open_xrcd(ctx: *mut IbvContext, attr: *mut c_void) -> *mut c_void {
    guard::ptr_op("open_xrcd", || {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's ibv_xrcd_init_attr.
        let a = unsafe { &*attr.cast::<IbvXrcdInitAttr>() };
        let need = xrcd_init::FD | xrcd_init::OFLAGS;
        if a.comp_mask & !need != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & need != need {
            return Err(libc::EINVAL);
        }
        // SAFETY: ctx is ours (ops: whose pointers).
        let st = unsafe { state(ctx)? };
        let file = match a.fd {
            -1 => None,
            fd if fd < 0 => return Err(libc::EBADF),
            // SAFETY: the application's open fd, borrowed for this call
            // (the daemon gets its own copy through SCM_RIGHTS).
            fd => Some(unsafe { BorrowedFd::borrow_raw(fd) }),
        };
        let x = Xrcd::open(&st.client, file, a.oflags as u32).map_err(client_err("open_xrcd"))?;
        let handle = x.handle();
        let p = Box::into_raw(Box::new(RxuXrcd {
            vx: VerbsXrcd {
                xrcd: IbvXrcd { context: ctx },
                comp_mask: 0,
                handle,
            },
            xrcd: Some(x),
        }));
        Ok(p.cast())
    })
}

pub unsafe extern "C" fn close_xrcd(x: *mut c_void) -> c_int {
    guard::int_op("close_xrcd", || {
        let p = x.cast::<RxuXrcd>();
        // SAFETY: x is ours and live (the contract): the application's
        // last use but for errors.
        let slot = unsafe { &mut (*p).xrcd };
        let inner = slot.take().ok_or(libc::EINVAL)?;
        if let Err((back, e)) = inner.close() {
            *slot = Some(back);
            return Err(client_err("close_xrcd")(e));
        }
        // SAFETY: made by Box::into_raw in open_xrcd; closed, so no longer used.
        drop(unsafe { Box::from_raw(p) });
        Ok(())
    })
}

/// The client domain of one of our `ibv_xrcd`s.
///
/// # Safety
/// `x` must be a live XRC domain made by [`open_xrcd`].
pub unsafe fn xrcd_of<'a>(x: *mut c_void) -> OpResult<&'a Xrcd> {
    // SAFETY: the contract.
    unsafe { crate::objects::rxu_xrcd(x.cast::<IbvXrcd>()) }
        .xrcd
        .as_ref()
        .ok_or(libc::EINVAL)
}
