//! The extended polling callbacks of CQs made by `ibv_create_cq_ex`
//! (`ibv_start_poll`/`next_poll`/`end_poll`, `ibv_wc_read_*`), installed
//! by `cq::create`.

use std::ffi::{c_int, c_void};

use rxu_client::Wc;
use transport::qp::wc_flags;

use crate::abi::{IbvCqEx, IbvPollCqAttr};
use crate::guard::{self, client_err, OpResult};
use crate::objects::RxuCq;

/// Sets every callback of an extended CQ. Fields rxu does not report read
/// as 0, and so do the timestamps of a CQ created without them (mlx5
/// leaves such callbacks NULL; a 0 is kinder than a crash).
pub fn install(c: &mut IbvCqEx) {
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
    c.read_completion_ts = Some(read_completion_ts);
    c.read_cvlan = Some(read_cvlan);
    c.read_flow_tag = Some(read_flow_tag);
    c.read_tm_info = Some(read_tm_info);
    c.read_completion_wallclock_ns = Some(read_completion_wallclock_ns);
}

/// # Safety
/// `cq` must be a live extended CQ of this provider.
unsafe fn rxu<'a>(cq: *mut IbvCqEx) -> &'a RxuCq {
    // SAFETY: `cq` is the ibv_cq_ex of a live RxuCq (the contract), and
    // an RxuCq is repr(C) and starts with it, so the cast gives that RxuCq.
    unsafe { &*cq.cast::<RxuCq>() }
}

/// Loads the next completion into `cur`, `status` and `wr_id`.
///
/// # Safety
/// `cq` must be a live extended CQ of this provider whose `busy` poll lock
/// the caller holds.
unsafe fn advance(cq: *mut IbvCqEx) -> OpResult<()> {
    // SAFETY: cq is a live extended CQ of ours (the contract).
    let r = unsafe { rxu(cq) };
    let mut w = [Wc::default()];
    let n = r.cq.poll(&mut w).map_err(client_err("start_poll"))?;
    if n == 0 {
        return Err(libc::ENOENT);
    }
    // SAFETY: the poller holds `busy`, so no one else touches `cur`; the
    // status/wr_id fields are the application's to read after this.
    unsafe {
        *r.poll.cur.get() = w[0];
        (*cq).status = w[0].status as c_int;
        (*cq).wr_id = w[0].wr_id;
    }
    Ok(())
}

unsafe extern "C" fn start_poll(cq: *mut IbvCqEx, attr: *mut IbvPollCqAttr) -> c_int {
    guard::int_op("start_poll", || {
        // SAFETY: attr is NULL or the caller's.
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: cq is one of ours (ops: whose pointers).
        let r = unsafe { rxu(cq) };
        r.poll.lock();
        // SAFETY: cq is ours, and `busy` is taken just above.
        let res = unsafe { advance(cq) };
        if res.is_err() {
            // No end_poll follows a failed start_poll.
            r.poll.unlock();
        }
        res
    })
}

unsafe extern "C" fn next_poll(cq: *mut IbvCqEx) -> c_int {
    // SAFETY: cq is ours (ops: whose pointers); libibverbs calls next_poll only between a
    // successful start_poll and end_poll, so `busy` is held.
    guard::int_op("next_poll", || unsafe { advance(cq) })
}

unsafe extern "C" fn end_poll(cq: *mut IbvCqEx) {
    // SAFETY: cq is one of ours (ops: whose pointers).
    guard::void_op("end_poll", || unsafe { rxu(cq) }.poll.unlock())
}

/// The current completion.
///
/// # Safety
/// Between a successful start_poll and end_poll, on one of our CQs.
unsafe fn cur<'a>(cq: *mut IbvCqEx) -> &'a Wc {
    // SAFETY: cq is one of ours and the poller holds `busy` (the
    // contract), so nothing writes `cur` while the reference lives.
    unsafe { &*rxu(cq).poll.cur.get() }
}

unsafe extern "C" fn read_opcode(cq: *mut IbvCqEx) -> c_int {
    // SAFETY: cq is ours (ops: whose pointers); libibverbs reads a completion only between
    // start_poll and end_poll, as cur requires.
    unsafe { cur(cq) }.opcode as c_int
}
unsafe extern "C" fn read_vendor_err(cq: *mut IbvCqEx) -> u32 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    unsafe { cur(cq) }.vendor_err
}
unsafe extern "C" fn read_byte_len(cq: *mut IbvCqEx) -> u32 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    unsafe { cur(cq) }.byte_len
}
/// `__be32`, except an invalidated rkey (ibv_wc_read_invalidated_rkey
/// reads it through this callback), which is host order.
unsafe extern "C" fn read_imm_data(cq: *mut IbvCqEx) -> u32 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    let w = unsafe { cur(cq) };
    if w.wc_flags & wc_flags::WITH_INV != 0 {
        w.imm_data
    } else {
        w.imm_data.to_be()
    }
}
unsafe extern "C" fn read_qp_num(cq: *mut IbvCqEx) -> u32 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    unsafe { cur(cq) }.qp_num
}
unsafe extern "C" fn read_src_qp(cq: *mut IbvCqEx) -> u32 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    unsafe { cur(cq) }.src_qp
}
unsafe extern "C" fn read_wc_flags(cq: *mut IbvCqEx) -> u32 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    unsafe { cur(cq) }.wc_flags
}
unsafe extern "C" fn read_slid(cq: *mut IbvCqEx) -> u32 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    unsafe { cur(cq) }.slid.into()
}
unsafe extern "C" fn read_sl(cq: *mut IbvCqEx) -> u8 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    unsafe { cur(cq) }.sl
}
unsafe extern "C" fn read_dlid_path_bits(cq: *mut IbvCqEx) -> u8 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    unsafe { cur(cq) }.dlid_path_bits
}
/// In HCA clock ticks: ns of CLOCK_MONOTONIC (`rxu_abi::clock`).
unsafe extern "C" fn read_completion_ts(cq: *mut IbvCqEx) -> u64 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    unsafe { cur(cq) }.completion_ts
}
/// ns since the epoch (CLOCK_REALTIME), stamped with the HCA clock's.
unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut IbvCqEx) -> u64 {
    // SAFETY: cq is ours (ops: whose pointers), read between start_poll and end_poll.
    unsafe { cur(cq) }.completion_wallclock_ns
}
unsafe extern "C" fn read_cvlan(_cq: *mut IbvCqEx) -> u16 {
    0
}
unsafe extern "C" fn read_flow_tag(_cq: *mut IbvCqEx) -> u32 {
    0
}
/// `struct ibv_wc_tm_info` { u64 tag; u32 priv; } (16 bytes), all zero.
unsafe extern "C" fn read_tm_info(_cq: *mut IbvCqEx, info: *mut c_void) {
    if !info.is_null() {
        // SAFETY: the caller passes a struct ibv_wc_tm_info.
        unsafe { std::ptr::write_bytes(info.cast::<u8>(), 0, 16) };
    }
}
