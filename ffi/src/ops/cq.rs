//! Completion queues: create/resize/destroy, poll, arm.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::mem::MaybeUninit;

use rxu_client::{CompChannel, Cq, Wc};
use transport::qp::wc_flags;

use crate::abi::{IbvCompChannel, IbvContext, IbvCq, IbvCqEx, IbvWc};
use crate::context::state;
use crate::events::{self, Delivered, Kind};
use crate::guard::{self, client_err, OpResult};
use crate::ops::cq_ex::{self, PollState};

/// A `verbs_cq` (room for `ibv_cq_ex`) with the client CQ behind it.
#[repr(C)]
pub struct RxuCq {
    /// Written by the library and the application too (counters, mutex,
    /// `status`/`wr_id` of the extended CQ), hence the cell.
    pub vcq: UnsafeCell<IbvCqEx>,
    pub cq: Cq,
    pub delivered: Delivered,
    /// The adopted channel, released on destroy.
    pub chan: Option<CompChannel>,
    pub poll: PollState,
}

/// # Safety
/// `cq` must be a live CQ made by this provider.
pub unsafe fn rxu_cq<'a>(cq: *mut IbvCq) -> &'a RxuCq {
    // SAFETY: `cq` is the ibv_cq of a live RxuCq (the contract), and
    // an RxuCq is repr(C) and starts with it, so the cast gives that RxuCq.
    unsafe { &*cq.cast::<RxuCq>() }
}

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

/// Creates the CQ object; `ex` fills the extended polling callbacks.
///
/// # Safety
/// `ctx` must be ours; `channel` NULL or a live channel.
pub unsafe fn create(
    ctx: *mut IbvContext,
    cqe: c_int,
    channel: *mut IbvCompChannel,
    comp_vector: c_int,
    ex: bool,
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
    let cq = match Cq::create(&st.client, cqe, 0, chan.as_ref(), addr as u64) {
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
    if ex {
        cq_ex::install(&mut vcq);
    }
    slot.write(RxuCq {
        vcq: UnsafeCell::new(vcq),
        cq,
        delivered: Delivered::default(),
        chan,
        poll: PollState::default(),
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
        create(ctx, cqe, channel, comp_vector, false).map(|p| p.cast())
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
