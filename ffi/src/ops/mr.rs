//! Memory regions. rxud reaches registered memory through the process's
//! /proc/self/mem when an operation needs it and never pins pages: on-
//! demand paging (IBV_ACCESS_ON_DEMAND, explicit or implicit) is passed to
//! rxud as asked (see `ops::odp`).

use std::ffi::{c_int, c_void};

use rxu_client::reg_mr_iova;

use crate::abi::consts::rereg;
use crate::abi::{IbvMr, IbvPd, VerbsMr};
use crate::guard::{self, client_err, set_errno};
use crate::objects::{pd_of, RxuMr};

pub unsafe extern "C" fn reg_mr(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut IbvMr {
    guard::ptr_op("reg_mr", || {
        // SAFETY: pd is one of ours (ops: whose pointers).
        let p = unsafe { pd_of(pd) };
        let acc = access as u32;
        // SAFETY: the C caller registers its own memory, as with any NIC:
        // rxud may write it behind the program's back until dereg.
        let mr = unsafe { reg_mr_iova(p, addr.cast(), length, hca_va, acc) }
            .map_err(client_err("reg_mr"))?;
        let vmr = VerbsMr {
            ibv_mr: IbvMr {
                // SAFETY: pd is live.
                context: unsafe { (*pd).context },
                pd,
                addr,
                length,
                handle: mr.handle(),
                lkey: mr.lkey(),
                rkey: mr.rkey(),
            },
            mr_type: 0,
            access,
        };
        let b = Box::new(RxuMr { vmr, mr: Some(mr) });
        Ok(Box::into_raw(b).cast())
    })
}

/// `ibv_rereg_mr`: libibverbs has checked the flags' arguments and
/// updates `addr`, `length` and `pd` of the `ibv_mr` after a success; a
/// failure returns the errno and sets it, as the kernel's command would
/// (libibverbs then reports IBV_REREG_MR_ERR_CMD).
pub unsafe extern "C" fn rereg_mr(
    vmr: *mut VerbsMr,
    flags: c_int,
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let r = guard::int_op("rereg_mr", || {
        let f = flags as u32;
        if f & !rereg::ALL != 0 || f == 0 {
            return Err(libc::EINVAL);
        }
        let r = vmr.cast::<RxuMr>();
        // SAFETY: vmr is one of ours (ops: whose pointers).
        let rm = unsafe { &mut *r };
        let mr = rm.mr.as_mut().ok_or(libc::EINVAL)?;
        let new_pd = if f & rereg::CHANGE_PD != 0 {
            if pd.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: a PD of this context (ops: whose pointers).
            Some(unsafe { pd_of(pd) })
        } else {
            None
        };
        let range = (f & rereg::CHANGE_TRANSLATION != 0).then_some((addr.cast::<u8>(), length));
        let acc = (f & rereg::CHANGE_ACCESS != 0).then_some(access as u32);
        // SAFETY: the C caller registers its own memory, as with reg_mr.
        unsafe { mr.rereg(new_pd, range, acc) }.map_err(client_err("rereg_mr"))?;
        rm.vmr.ibv_mr.lkey = mr.lkey();
        rm.vmr.ibv_mr.rkey = mr.rkey();
        if f & rereg::CHANGE_ACCESS != 0 {
            rm.vmr.access = access;
        }
        Ok(())
    });
    if r != 0 {
        set_errno(r);
    }
    r
}

pub unsafe extern "C" fn dereg_mr(vmr: *mut VerbsMr) -> c_int {
    guard::int_op("dereg_mr", || {
        let r = vmr.cast::<RxuMr>();
        // SAFETY: vmr is one of ours; the application's last use.
        let slot = unsafe { &mut (*r).mr };
        let mr = slot.take().ok_or(libc::EINVAL)?;
        if let Err((mr, e)) = mr.dereg() {
            *slot = Some(mr);
            return Err(client_err("dereg_mr")(e));
        }
        // SAFETY: from Box::into_raw in reg_mr.
        drop(unsafe { Box::from_raw(r) });
        Ok(())
    })
}
