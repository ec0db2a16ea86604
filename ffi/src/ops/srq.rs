//! Shared receive queues (basic type only).

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::mem::MaybeUninit;

use rxu_client::{srq_attr_mask, Srq};

use crate::abi::consts::srq_init;
use crate::abi::{
    IbvContext, IbvPd, IbvSrq, IbvSrqAttr, IbvSrqInitAttr, IbvSrqInitAttrEx, VerbsSrq,
};
use crate::context::state::state;
use crate::events::{self, Delivered, Kind};
use crate::guard::{self, client_err, OpResult};
use crate::log::unsupported;
use crate::objects::{domain_use, pd_of, rxu_srq, RxuSrq};

/// # Safety
/// `pd` ours and live; `attr` the caller's.
unsafe fn create(
    pd: *mut IbvPd,
    srq_context: *mut std::ffi::c_void,
    attr: &mut IbvSrqAttr,
) -> OpResult<*mut IbvSrq> {
    // SAFETY: pd is a live PD of ours (the contract).
    let ctx: *mut IbvContext = unsafe { (*pd).context };
    // SAFETY: the context of one of our PDs is ours, as state requires.
    let st = unsafe { state(ctx)? };
    let mut slot: Box<MaybeUninit<RxuSrq>> = Box::new_uninit();
    let addr = slot.as_mut_ptr();
    // SAFETY: pd is ours. The user_handle is the struct ibv_srq * that
    // SRQ async events carry.
    let srq = Srq::create(
        unsafe { pd_of(pd) },
        attr.max_wr,
        attr.max_sge,
        attr.srq_limit,
        addr as u64,
    )
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
        unsafe { create(pd, (*init).srq_context, &mut (*init).attr) }
    })
}

pub unsafe extern "C" fn create_srq_ex(
    ctx: *mut IbvContext,
    init: *mut IbvSrqInitAttrEx,
) -> *mut IbvSrq {
    guard::ptr_op("create_srq_ex", || {
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *init };
        let basic = a.comp_mask & srq_init::TYPE == 0 || a.srq_type == srq_init::TYPE_BASIC;
        if a.comp_mask & !(srq_init::TYPE | srq_init::PD) != 0 || !basic {
            unsupported("XRC and tag-matching SRQs");
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & srq_init::PD == 0 || a.pd.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the PD is ours and of this context.
        if unsafe { (*a.pd).context } != ctx {
            return Err(libc::EINVAL);
        }
        // SAFETY: a.pd is a PD of this context, which is ours (ops: whose pointers); a
        // is the caller's attributes.
        unsafe { create(a.pd, a.srq_context, &mut a.attr) }
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
