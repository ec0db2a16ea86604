//! Memory regions. rxud reaches registered memory through the process's
//! /proc/self/mem when an operation needs it and never pins pages: on-
//! demand paging (IBV_ACCESS_ON_DEMAND, explicit or implicit) is passed to
//! rxud as asked (see `ops::odp`).

use std::ffi::{c_int, c_void};

use rxu_client::reg_mr_iova;

use crate::abi::{IbvMr, IbvPd, VerbsMr};
use crate::guard::{self, client_err};
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
