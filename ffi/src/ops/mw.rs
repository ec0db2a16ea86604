//! Memory windows: alloc, dealloc, and `ibv_bind_mw` (type 1), which is
//! a BIND_MW work request on the QP, as in rxe's provider: the window's
//! rkey in the `ibv_mw` moves to the new key when the request is posted,
//! and an application that gets an error completion undoes that itself.

use std::ffi::c_int;

use rxu_client::{Mw, MwBind, SendWr};

use crate::abi::{IbvMw, IbvMwBind, IbvMwBindInfo, IbvPd, IbvQp};
use crate::guard::{self, client_err, OpResult};
use crate::objects::{client_qp, pd_of, RxuMw};
use transport::verbs::access::ZERO_BASED;

/// `ibv_inc_rkey`: the next key of a window (the low 8 bits wrap).
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// A bind as the client library takes it.
///
/// # Safety
/// `info.mr`, if not null, must point at a live `ibv_mr`.
pub unsafe fn bind_of(mw_rkey: u32, new_rkey: u32, info: &IbvMwBindInfo) -> OpResult<MwBind> {
    let mr_lkey = if info.mr.is_null() {
        if info.length != 0 {
            return Err(libc::EINVAL);
        }
        0
    } else {
        // SAFETY: a live ibv_mr (the contract).
        unsafe { (*info.mr).lkey }
    };
    Ok(MwBind {
        mw_rkey,
        new_rkey,
        mr_lkey,
        addr: info.addr,
        len: info.length,
        access: info.mw_access_flags,
    })
}

pub unsafe extern "C" fn alloc_mw(pd: *mut IbvPd, mw_type: c_int) -> *mut IbvMw {
    guard::ptr_op("alloc_mw", || {
        // SAFETY: pd is one of ours (ops: whose pointers).
        let p = unsafe { pd_of(pd) };
        let ty = u32::try_from(mw_type).map_err(|_| libc::EINVAL)?;
        let mw = Mw::alloc_raw(p, ty).map_err(client_err("alloc_mw"))?;
        let ibv = IbvMw {
            // SAFETY: pd is live.
            context: unsafe { (*pd).context },
            pd,
            rkey: mw.rkey(),
            handle: mw.handle(),
            mw_type,
        };
        let b = Box::new(RxuMw { ibv, mw: Some(mw) });
        Ok(Box::into_raw(b).cast())
    })
}

pub unsafe extern "C" fn dealloc_mw(mw: *mut IbvMw) -> c_int {
    guard::int_op("dealloc_mw", || {
        let r = mw.cast::<RxuMw>();
        // SAFETY: mw is one of ours (ops: whose pointers); the
        // application's last use.
        let slot = unsafe { &mut (*r).mw };
        let m = slot.take().ok_or(libc::EINVAL)?;
        if let Err((m, e)) = m.dealloc() {
            *slot = Some(m);
            return Err(client_err("dealloc_mw")(e));
        }
        // SAFETY: from Box::into_raw in alloc_mw.
        drop(unsafe { Box::from_raw(r) });
        Ok(())
    })
}

/// `ibv_bind_mw` (libibverbs has checked the type is 1 and the region's
/// PD): a zero-based type 1 window is EINVAL, as on rxe.
pub unsafe extern "C" fn bind_mw(qp: *mut IbvQp, mw: *mut IbvMw, bind: *mut IbvMwBind) -> c_int {
    guard::int_op("bind_mw", || {
        if mw.is_null() || bind.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the application's live bind request and window (ours,
        // as its context's ops are).
        let (b, ibv) = unsafe { (&*bind, &mut *mw) };
        if b.bind_info.mw_access_flags & ZERO_BASED != 0 {
            return Err(libc::EINVAL);
        }
        let new_rkey = inc_rkey(ibv.rkey);
        // SAFETY: bind_info.mr is the application's live MR, or null.
        let mwb = unsafe { bind_of(ibv.rkey, new_rkey, &b.bind_info)? };
        // SAFETY: qp is ours (ops: whose pointers).
        let q = unsafe { client_qp(qp)? };
        let wr = SendWr {
            send_flags: b.send_flags,
            ..SendWr::bind_mw(b.wr_id, mwb)
        };
        q.post_send(std::slice::from_ref(&wr))
            .map_err(|e| e.error.errno())?;
        ibv.rkey = new_rkey;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_wraps_the_low_byte() {
        assert_eq!(inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(inc_rkey(0xffff_ffff), 0xffff_ff00);
    }
}
