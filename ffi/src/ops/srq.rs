//! Shared receive queues: basic and XRC (`ibv_create_srq_ex` with
//! IBV_SRQT_XRC, `ibv_get_srq_num`).

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::mem::MaybeUninit;

use rxu_client::{srq_attr_mask, Srq, SrqAttr};

use crate::abi::consts::srq_init;
use crate::abi::{
    IbvContext, IbvCq, IbvPd, IbvSrq, IbvSrqAttr, IbvSrqInitAttr, IbvSrqInitAttrEx, IbvXrcd,
    VerbsSrq,
};
use crate::context::state::state;
use crate::events::{self, Delivered, Kind};
use crate::guard::{self, client_err, OpResult};
use crate::log::unsupported;
use crate::objects::{domain_use, pd_of, rxu_cq, rxu_srq, RxuSrq};
use crate::ops::xrcd::xrcd_of;

/// # Safety
/// `pd` ours and live; `attr` the caller's.
unsafe fn create(
    pd: *mut IbvPd,
    srq_context: *mut std::ffi::c_void,
    attr: &mut IbvSrqAttr,
    xrc: Option<(*mut std::ffi::c_void, *mut IbvCq)>,
) -> OpResult<*mut IbvSrq> {
    // SAFETY: pd is a live PD of ours (the contract).
    let ctx: *mut IbvContext = unsafe { (*pd).context };
    // SAFETY: the context of one of our PDs is ours, as state requires.
    let st = unsafe { state(ctx)? };
    let mut slot: Box<MaybeUninit<RxuSrq>> = Box::new_uninit();
    let addr = slot.as_mut_ptr();
    // The user_handle is the struct ibv_srq * that SRQ async events carry.
    let srq = match xrc {
        None => Srq::create(
            // SAFETY: pd is ours.
            unsafe { pd_of(pd) },
            attr.max_wr,
            attr.max_sge,
            attr.srq_limit,
            addr as u64,
        ),
        // SAFETY: pd, the domain and the CQ are ours and live (checked
        // non-null by create_srq_ex; ops: whose pointers).
        Some((x, cq)) => unsafe {
            Srq::create_xrc(
                pd_of(pd),
                xrcd_of(x)?,
                &rxu_cq(cq).cq,
                SrqAttr {
                    max_wr: attr.max_wr,
                    max_sge: attr.max_sge,
                    srq_limit: attr.srq_limit,
                },
                addr as u64,
            )
        },
    }
    .map_err(client_err("create_srq"))?;
    let granted = srq.attr();
    attr.max_wr = granted.max_wr;
    attr.max_sge = granted.max_sge;
    // SAFETY: VerbsSrq is plain data for which all-zero is valid.
    let mut v: VerbsSrq = unsafe { std::mem::zeroed() };
    v.srq.context = ctx;
    v.srq.srq_context = srq_context;
    v.srq.pd = pd;
    v.srq.handle = srq.handle();
    v.srq_type = srq_init::TYPE_BASIC;
    if let (Some((x, cq)), Some(n)) = (xrc, srq.srq_num()) {
        v.srq_type = srq_init::TYPE_XRC;
        v.xrcd = x;
        v.cq = cq;
        v.srq_num = n;
    }
    slot.write(RxuSrq {
        vsrq: UnsafeCell::new(v),
        srq,
        delivered: Delivered::default(),
        // SAFETY: pd is ours.
        domain: unsafe { domain_use(pd) },
    });
    let p = Box::into_raw(slot).cast::<RxuSrq>();
    // SAFETY: the fresh SRQ's own mutex and cond. ibv_create_srq
    // initialises them again, which is harmless on unused objects.
    unsafe {
        let s = (*p).vsrq.get();
        events::init_sync(&raw mut (*s).srq.mutex, &raw mut (*s).srq.cond);
    }
    st.live.add(p as usize, Kind::Srq);
    Ok(p.cast())
}

pub unsafe extern "C" fn create_srq(pd: *mut IbvPd, init: *mut IbvSrqInitAttr) -> *mut IbvSrq {
    guard::ptr_op("create_srq", || {
        // SAFETY: pd ours, init the caller's.
        unsafe { create(pd, (*init).srq_context, &mut (*init).attr, None) }
    })
}

pub unsafe extern "C" fn create_srq_ex(
    ctx: *mut IbvContext,
    init: *mut IbvSrqInitAttrEx,
) -> *mut IbvSrq {
    guard::ptr_op("create_srq_ex", || {
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *init };
        let known = srq_init::TYPE | srq_init::PD | srq_init::XRCD | srq_init::CQ;
        let ty = if a.comp_mask & srq_init::TYPE == 0 {
            srq_init::TYPE_BASIC
        } else {
            a.srq_type
        };
        if a.comp_mask & !known != 0 || !matches!(ty, srq_init::TYPE_BASIC | srq_init::TYPE_XRC) {
            unsupported("tag-matching SRQs");
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & srq_init::PD == 0 || a.pd.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the PD is ours and of this context.
        if unsafe { (*a.pd).context } != ctx {
            return Err(libc::EINVAL);
        }
        let xrc = if ty == srq_init::TYPE_XRC {
            // An XRC SRQ needs its domain and its CQ, both of this context.
            let both = srq_init::XRCD | srq_init::CQ;
            if a.comp_mask & both != both || a.xrcd.is_null() || a.cq.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: non-null objects the application passes are ours.
            if unsafe { (*a.cq).context != ctx || (*a.xrcd.cast::<IbvXrcd>()).context != ctx } {
                return Err(libc::EINVAL);
            }
            Some((a.xrcd, a.cq))
        } else {
            None
        };
        // SAFETY: a.pd is a PD of this context, which is ours (ops: whose pointers); a
        // is the caller's attributes.
        unsafe { create(a.pd, a.srq_context, &mut a.attr, xrc) }
    })
}

/// `ibv_get_srq_num`: the number XRC initiators name an XRC SRQ by
/// (EINVAL for a basic SRQ, which has none).
pub unsafe extern "C" fn get_srq_num(srq: *mut IbvSrq, num: *mut u32) -> c_int {
    guard::int_op("get_srq_num", || {
        if num.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: srq ours (ops: whose pointers).
        let n = unsafe { rxu_srq(srq) }.srq.srq_num().ok_or(libc::EINVAL)?;
        // SAFETY: the caller's out-parameter, checked non-null.
        unsafe { *num = n };
        Ok(())
    })
}

pub unsafe extern "C" fn modify_srq(srq: *mut IbvSrq, attr: *mut IbvSrqAttr, mask: c_int) -> c_int {
    guard::int_op("modify_srq", || {
        let m = mask as u32;
        if m & !(srq_attr_mask::MAX_WR | srq_attr_mask::LIMIT) != 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: srq ours, attr the caller's.
        let (r, a) = unsafe { (rxu_srq(srq), &*attr) };
        r.srq
            .modify(m, a.max_wr, a.srq_limit)
            .map_err(client_err("modify_srq"))
    })
}

pub unsafe extern "C" fn query_srq(srq: *mut IbvSrq, attr: *mut IbvSrqAttr) -> c_int {
    guard::int_op("query_srq", || {
        // SAFETY: srq ours.
        let r = unsafe { rxu_srq(srq) };
        let q = r.srq.query().map_err(client_err("query_srq"))?;
        // SAFETY: the caller's struct.
        unsafe {
            *attr = IbvSrqAttr {
                max_wr: q.max_wr,
                max_sge: q.max_sge,
                srq_limit: q.srq_limit,
            }
        };
        Ok(())
    })
}

pub unsafe extern "C" fn destroy_srq(srq: *mut IbvSrq) -> c_int {
    guard::int_op("destroy_srq", || {
        // SAFETY: srq ours; the application's last use but for errors.
        let (r, st) = unsafe { (rxu_srq(srq), state((*srq).context)?) };
        r.srq
            .clone()
            .destroy()
            .map_err(|(_, e)| client_err("destroy_srq")(e))?;
        st.live.remove(srq as usize);
        // SAFETY: the SRQ's mutex/cond; ibv_ack_async_event updates
        // events_completed under it.
        unsafe {
            events::wait_acked(
                "destroy_srq",
                &raw mut (*srq).mutex,
                &raw mut (*srq).cond,
                || (*srq).events_completed >= events::load(&r.delivered.async_),
            );
            drop(Box::from_raw(srq.cast::<RxuSrq>()));
        }
        Ok(())
    })
}
