//! Completion queues: create (plain and `_ex`), resize, destroy, poll, arm.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::mem::MaybeUninit;

use rxu_client::{Cq, CqOptions, Wc};
use transport::qp::wc_flags;

use crate::abi::consts::{cq_init, wc_ex};
use crate::abi::{IbvCompChannel, IbvContext, IbvCq, IbvCqEx, IbvCqInitAttrEx, IbvPd, IbvWc};
use crate::context::state::state;
use crate::events::{self, Delivered, Kind};
use crate::guard::{self, client_err, OpResult};
use crate::log::unsupported;
use crate::objects::cq_poll::PollState;
use crate::objects::{domain_use, pd_of, rxu_cq, rxu_pd, RxuCq};
use crate::ops::cq_ex;

/// Converts a client completion to `struct ibv_wc`.
pub fn wc_to_c(w: &Wc) -> IbvWc {
    IbvWc {
        wr_id: w.wr_id,
        status: w.status as c_int,
        opcode: w.opcode as c_int,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        // __be32 in memory; an invalidated rkey is host order.
        imm_data: if w.wc_flags & wc_flags::WITH_INV != 0 {
            w.imm_data
        } else {
            w.imm_data.to_be()
        },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags as c_int,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

/// What `ibv_create_cq_ex` adds to `ibv_create_cq`.
#[derive(Clone, Copy, Default)]
struct Extended {
    /// Fill the extended polling callbacks (an `ibv_cq_ex`).
    ex: bool,
    /// Entries carry completion timestamps.
    timestamps: bool,
    /// The parent domain it is created on (`IBV_CQ_INIT_ATTR_MASK_PD`),
    /// checked to be one.
    domain: Option<*mut IbvPd>,
}

/// Creates the CQ object.
///
/// # Safety
/// `ctx` must be ours; `channel` NULL or a live channel.
unsafe fn create(
    ctx: *mut IbvContext,
    cqe: c_int,
    channel: *mut IbvCompChannel,
    comp_vector: c_int,
    x: Extended,
) -> OpResult<*mut RxuCq> {
    // SAFETY: ctx is ours (the contract), as state requires.
    let st = unsafe { state(ctx)? };
    let cqe = u32::try_from(cqe).map_err(|_| libc::EINVAL)?;
    // num_comp_vectors is 1.
    if comp_vector != 0 {
        return Err(libc::EINVAL);
    }
    let chan = if channel.is_null() {
        None
    } else {
        // SAFETY: ctx is ours and channel a live, non-null channel (the
        // contract), as attach requires.
        Some(unsafe { st.channels.attach(ctx, channel)? })
    };
    let mut slot: Box<MaybeUninit<RxuCq>> = Box::new_uninit();
    let addr = slot.as_mut_ptr();
    // The kernel's user_handle: channel records and CQ_ERR events carry
    // the struct ibv_cq * itself, which is what libibverbs reads back.
    // SAFETY: a parent domain of ours (create_cq_ex checked it).
    let domain = x.domain.map(|d| unsafe { (pd_of(d), domain_use(d)) });
    let opts = CqOptions {
        cqe,
        comp_vector: 0,
        channel: chan.as_ref(),
        user_handle: addr as u64,
        timestamps: x.timestamps,
        rings: domain.as_ref().and_then(|(p, _)| p.ring_alloc()),
    };
    let cq = match Cq::create_with(&st.client, &opts) {
        Ok(cq) => cq,
        Err(e) => {
            if let Some(ch) = &chan {
                st.channels.detach(ch);
            }
            return Err(client_err("create_cq")(e));
        }
    };
    // SAFETY: IbvCqEx is plain data (pointers, integers, Options of fn
    // pointers, pthread types) for which all-zero is valid.
    let mut vcq: IbvCqEx = unsafe { std::mem::zeroed() };
    vcq.cq.context = ctx;
    vcq.cq.channel = channel;
    vcq.cq.handle = cq.handle();
    vcq.cq.cqe = c_int::try_from(cq.cqe()).unwrap_or(c_int::MAX);
    if x.ex {
        cq_ex::install(&mut vcq);
    }
    slot.write(RxuCq {
        vcq: UnsafeCell::new(vcq),
        cq,
        delivered: Delivered::default(),
        chan,
        poll: PollState::default(),
        domain: domain.and_then(|(_, u)| u),
    });
    let p = Box::into_raw(slot).cast::<RxuCq>();
    st.live.add(p as usize, Kind::Cq);
    // The mutex and cond are initialised by the library (verbs_init_cq).
    Ok(p)
}

pub unsafe extern "C" fn create_cq(
    ctx: *mut IbvContext,
    cqe: c_int,
    channel: *mut IbvCompChannel,
    comp_vector: c_int,
) -> *mut IbvCq {
    // SAFETY: arguments from libibverbs.
    guard::ptr_op("create_cq", || unsafe {
        create(ctx, cqe, channel, comp_vector, Extended::default()).map(|p| p.cast())
    })
}

pub unsafe extern "C" fn create_cq_ex(
    ctx: *mut IbvContext,
    attr: *mut IbvCqInitAttrEx,
) -> *mut IbvCqEx {
    guard::ptr_op("create_cq_ex", || {
        // SAFETY: libibverbs passes the caller's attributes.
        let a = unsafe { &*attr };
        if a.comp_mask & !(cq_init::MASK_FLAGS | cq_init::MASK_PD) != 0 {
            unsupported("create_cq_ex with an unknown comp_mask");
            return Err(libc::EOPNOTSUPP);
        }
        let domain = if a.comp_mask & cq_init::MASK_PD != 0 {
            // As mlx5: it must be a parent domain (of this context).
            let d = a.parent_domain;
            // SAFETY: a PD of this application, so one of ours (ops: whose
            // pointers).
            if d.is_null() || unsafe { rxu_pd(d).parent.is_none() || (*d).context != ctx } {
                return Err(libc::EINVAL);
            }
            Some(d)
        } else {
            None
        };
        let flags = if a.comp_mask & cq_init::MASK_FLAGS != 0 {
            a.flags
        } else {
            0
        };
        // IGNORE_OVERRUN is refused as rxe refuses it: rxu does raise
        // IBV_EVENT_CQ_ERR on an overrun, so it would not be honoured.
        if flags & !cq_init::FLAG_SINGLE_THREADED != 0 {
            unsupported("create_cq_ex flags");
            return Err(libc::EOPNOTSUPP);
        }
        if a.wc_flags & !wc_ex::SUPPORTED != 0 {
            unsupported("create_cq_ex wc_flags (cvlan, flow tag, tag matching)");
            return Err(libc::EOPNOTSUPP);
        }
        let cqe = c_int::try_from(a.cqe).map_err(|_| libc::EINVAL)?;
        let comp_vector = c_int::try_from(a.comp_vector).map_err(|_| libc::EINVAL)?;
        let x = Extended {
            ex: true,
            timestamps: a.wc_flags & wc_ex::TIMESTAMPS != 0,
            domain,
        };
        // SAFETY: ctx is ours, the channel is the caller's.
        let p = unsafe { create(ctx, cqe, a.channel, comp_vector, x)? };
        Ok(p.cast())
    })
}

pub unsafe extern "C" fn destroy_cq(cq: *mut IbvCq) -> c_int {
    guard::int_op("destroy_cq", || {
        // SAFETY: cq is one of ours (ops: whose pointers).
        let r = unsafe { rxu_cq(cq) };
        // SAFETY: cq is live; its context is ours.
        let st = unsafe { state((*cq).context)? };
        // rxud stops signalling it; its unread channel records are purged.
        r.cq.clone()
            .destroy()
            .map_err(|(_, e)| client_err("destroy_cq")(e))?;
        st.live.remove(cq as usize);
        let c = cq;
        // SAFETY: the library's mutex/cond of this CQ; the counters are
        // what ibv_ack_cq_events/ibv_ack_async_event update under it.
        unsafe {
            events::wait_acked(
                "destroy_cq",
                &raw mut (*c).mutex,
                &raw mut (*c).cond,
                || {
                    (*c).comp_events_completed >= events::load(&r.delivered.comp)
                        && (*c).async_events_completed >= events::load(&r.delivered.async_)
                },
            )
        };
        if let Some(ch) = &r.chan {
            st.channels.detach(ch);
        }
        // SAFETY: from Box::into_raw in create; the application's last use.
        drop(unsafe { Box::from_raw(cq.cast::<RxuCq>()) });
        Ok(())
    })
}

pub unsafe extern "C" fn resize_cq(cq: *mut IbvCq, cqe: c_int) -> c_int {
    guard::int_op("resize_cq", || {
        let want = u32::try_from(cqe).map_err(|_| libc::EINVAL)?;
        // SAFETY: cq is one of ours (ops: whose pointers).
        let r = unsafe { rxu_cq(cq) };
        let got = r.cq.resize(want).map_err(client_err("resize_cq"))?;
        // SAFETY: cq is live; the application owns no concurrent writer.
        unsafe { (*cq).cqe = c_int::try_from(got).unwrap_or(c_int::MAX) };
        Ok(())
    })
}

/// Completions moved per client call.
const BATCH: usize = 16;

pub unsafe extern "C" fn poll_cq(cq: *mut IbvCq, num_entries: c_int, wc: *mut IbvWc) -> c_int {
    guard::count_op("poll_cq", || {
        let n = usize::try_from(num_entries).map_err(|_| libc::EINVAL)?;
        if n > 0 && wc.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: cq is one of ours (ops: whose pointers).
        let r = unsafe { rxu_cq(cq) };
        if n == 0 {
            return Ok(0);
        }
        // Busy pollers mostly find nothing: look for one completion before
        // setting up a batch.
        let mut one = [Wc::default()];
        if r.cq.poll(&mut one).map_err(client_err("poll_cq"))? == 0 {
            return Ok(0);
        }
        // SAFETY: the caller's array holds num_entries (>= 1) entries.
        unsafe { wc.write(wc_to_c(&one[0])) };
        let mut done = 1usize;
        let mut buf = [Wc::default(); BATCH];
        while done < n {
            let want = (n - done).min(BATCH);
            // One completion is already out: a failure now (the device
            // just went) is reported by the next call.
            let Ok(got) = r.cq.poll(&mut buf[..want]) else {
                break;
            };
            for (i, w) in buf[..got].iter().enumerate() {
                // SAFETY: the caller's array holds num_entries entries, and
                // done + i < n <= num_entries.
                unsafe { wc.add(done + i).write(wc_to_c(w)) };
            }
            done += got;
            if got < want {
                break;
            }
        }
        Ok(done as c_int)
    })
}

pub unsafe extern "C" fn req_notify_cq(cq: *mut IbvCq, solicited_only: c_int) -> c_int {
    guard::int_op("req_notify_cq", || {
        // SAFETY: cq is one of ours (ops: whose pointers).
        let r = unsafe { rxu_cq(cq) };
        r.cq.req_notify(solicited_only != 0)
            .map_err(client_err("req_notify_cq"))
    })
}
