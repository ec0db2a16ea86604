//! XRC target QPs (IBV_QPT_XRC_RECV): made in a domain
//! (`ibv_create_qp_ex` with IBV_QP_INIT_ATTR_XRCD) or opened by number
//! (`ibv_open_qp`). They have no PD, CQs, SRQ or queues of their own.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::sync::Mutex;

use rxu_client::{Qp, QpType};

use crate::abi::consts::{qp_init_attr_mask, qp_open_attr};
use crate::abi::{IbvContext, IbvQp, IbvQpInitAttrEx, IbvQpOpenAttr, VerbsQpArea, VERBS_QP_XRCD};
use crate::context::state::state;
use crate::events::{self, Delivered, Kind};
use crate::guard::{self, client_err, OpResult};
use crate::objects::wr_batch::Builder;
use crate::objects::RxuQp;
use crate::ops::convert::cap_to_c;
use crate::ops::xrcd::xrcd_of;

/// An XRC target QP: made in the domain `a.xrcd` (IBV_QP_INIT_ATTR_XRCD
/// required; a PD, CQs and caps are ignored, as by libibverbs' command).
///
/// # Safety
/// `ctx` ours; `a` the caller's attributes, its domain ours.
pub(super) unsafe fn create_xrc_target(
    ctx: *mut IbvContext,
    a: &mut IbvQpInitAttrEx,
) -> OpResult<*mut IbvQp> {
    if a.comp_mask & qp_init_attr_mask::XRCD == 0 || a.xrcd.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: a non-null domain the application passes is ours.
    let x = unsafe { xrcd_of(a.xrcd)? };
    a.cap = cap_to_c(&Default::default());
    // SAFETY: ctx is ours (the contract).
    unsafe {
        target_qp(ctx, a.qp_context, a.xrcd, |h| {
            Qp::create_xrc_target(x, h).map_err(client_err("create_qp"))
        })
    }
}

/// `ibv_open_qp`: an XRC target QP of a domain of ours, by number (NUM,
/// XRCD and TYPE required, the type XRC_RECV: EINVAL otherwise).
pub unsafe extern "C" fn open_qp(ctx: *mut IbvContext, attr: *mut c_void) -> *mut c_void {
    guard::ptr_op("open_qp", || {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's ibv_qp_open_attr.
        let a = unsafe { &*attr.cast::<IbvQpOpenAttr>() };
        let need = qp_open_attr::NUM | qp_open_attr::XRCD | qp_open_attr::TYPE;
        if a.comp_mask & !(need | qp_open_attr::CONTEXT) != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & need != need || a.xrcd.is_null() || a.qp_type != QpType::XrcRecv as c_int {
            return Err(libc::EINVAL);
        }
        // SAFETY: a non-null domain the application passes is ours.
        let x = unsafe { xrcd_of(a.xrcd)? };
        let qp_context = if a.comp_mask & qp_open_attr::CONTEXT != 0 {
            a.qp_context
        } else {
            std::ptr::null_mut()
        };
        let qpn = a.qp_num;
        // SAFETY: ctx is ours (ops: whose pointers).
        let qp = unsafe {
            target_qp(ctx, qp_context, a.xrcd, |h| {
                Qp::open_xrc_target(x, qpn, h).map_err(client_err("open_qp"))
            })?
        };
        Ok(qp.cast())
    })
}

/// An `ibv_qp` for an XRC target QP `make` makes (given the user handle,
/// the struct's address): no PD, CQs or SRQ; `verbs_qp.xrcd` is `xrcd`.
///
/// # Safety
/// `ctx` ours.
unsafe fn target_qp(
    ctx: *mut IbvContext,
    qp_context: *mut c_void,
    xrcd: *mut c_void,
    make: impl FnOnce(u64) -> OpResult<Qp>,
) -> OpResult<*mut IbvQp> {
    // SAFETY: ctx is ours (the contract), as state requires.
    let st = unsafe { state(ctx)? };
    let mut slot: Box<MaybeUninit<RxuQp>> = Box::new_uninit();
    let addr = slot.as_mut_ptr();
    let qp = make(addr as u64)?;
    // SAFETY: VerbsQpArea is plain data for which all-zero is valid.
    let mut area: VerbsQpArea = unsafe { std::mem::zeroed() };
    let b = &mut area.qp_ex.qp_base;
    b.context = ctx;
    b.qp_context = qp_context;
    b.handle = qp.qpn();
    b.qp_num = qp.qpn();
    b.state = 0; // IBV_QPS_RESET
    b.qp_type = QpType::XrcRecv as c_int;
    slot.write(RxuQp {
        area: UnsafeCell::new(area),
        qp: Some(qp),
        sq_sig_all: false,
        delivered: Delivered::default(),
        builder: Mutex::new(Builder::default()),
        domain: None,
    });
    let p = Box::into_raw(slot).cast::<RxuQp>();
    // SAFETY: p is the fresh QP; its base lies at offset 0, and the
    // comp_mask offset is the library's (inside the area, version.rs),
    // the xrcd pointer 8 bytes after it (verbs_qp).
    unsafe {
        let base = (*p).area.get();
        events::init_sync(
            &raw mut (*base).qp_ex.qp_base.mutex,
            &raw mut (*base).qp_ex.qp_base.cond,
        );
        let cm = base.cast::<u8>().add(st.lib.qp_comp_mask_off);
        cm.cast::<u32>().write(VERBS_QP_XRCD);
        cm.add(8).cast::<*mut c_void>().write_unaligned(xrcd);
    }
    st.live.add(p as usize, Kind::Qp);
    Ok(p.cast())
}
