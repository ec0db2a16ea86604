//! The `ibv_wr_*` interface of QPs made with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
//!
//! Builder calls between `wr_start` and `wr_complete` are collected
//! (opcode and fields, SGEs and inline bytes copied at call time, as the
//! verbs API allows the caller to reuse them at once) and posted by
//! `wr_complete` under one queue lock. Errors in builder calls are kept and
//! returned by `wr_complete`, which then posts nothing. `wr_complete`
//! checks for room first, so a full queue posts nothing either; a WR the
//! client library refuses later leaves the ones before it posted (the
//! application learns it from the return value, as with ibv_post_send).

use std::ffi::{c_int, c_void};
use std::sync::MutexGuard;

use rxu_client::{send_flags, SendWr, Sge, UdDest, WrOpcode as Op};

use crate::abi::{IbvAh, IbvDataBuf, IbvMw, IbvMwBindInfo, IbvQpEx, VerbsQpArea, WrFlushFn};
use crate::guard::{self, OpResult};
use crate::log::unsupported;
use crate::objects::wr_batch::{push_inline, push_sges, Builder, Pending};
use crate::objects::{client_ah, RxuQp};
use crate::ops::mw::bind_of;
use crate::version::Lib;

/// Sets the `ibv_qp_ex` callbacks (and `wr_flush`/`wr_atomic_write` only
/// where the running library's struct has them).
pub fn install(area: &mut VerbsQpArea, lib: &Lib) {
    let x = &mut area.qp_ex;
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_send_inv = Some(wr_send_inv);
    x.wr_send_tso = Some(wr_send_tso);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    if lib.has_atomic_write() {
        x.wr_atomic_write = Some(wr_atomic_write);
    }
    if lib.has_flush() {
        let f: WrFlushFn = wr_flush;
        area.tail[0] = f as usize as u64;
    }
}

/// The QP and its batch.
///
/// # Safety
/// `qpx` must be the `ibv_qp_ex` of a live QP of this provider. Every
/// `wr_*` callback below gets one: [`install`] puts them only in our QPs
/// (see `ops`, "Whose pointers").
unsafe fn batch<'a>(qpx: *mut IbvQpEx) -> (&'a RxuQp, MutexGuard<'a, Builder>) {
    // SAFETY: `qpx` is the ibv_qp_ex of a live RxuQp (the contract), and
    // an RxuQp is repr(C) and starts with it, so the cast gives that RxuQp.
    let r = unsafe { &*qpx.cast::<RxuQp>() };
    (r, r.builder.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Starts a WR of `opcode` with the `wr_id`/`wr_flags` the caller set.
///
/// # Safety
/// As [`batch`].
unsafe fn begin(qpx: *mut IbvQpEx, opcode: Op, f: impl FnOnce(&mut Pending)) {
    guard::void_op("ibv_wr_*", || {
        // SAFETY: `qpx` is a live ibv_qp_ex (the contract); wr_id and
        // wr_flags are the application's to set before each builder call,
        // read here.
        let (wr_id, flags) = unsafe { ((*qpx).wr_id, (*qpx).wr_flags) };
        // SAFETY: this function's contract is batch's.
        let (_, mut b) = unsafe { batch(qpx) };
        let at = b.sges.len();
        let mut p = Pending {
            wr_id,
            opcode,
            flags,
            imm: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            sges: at..at,
            inline: None,
            ud: None,
            bind: None,
        };
        f(&mut p);
        b.wrs.push(p);
    })
}

/// Applies a setter to the last WR.
///
/// # Safety
/// As [`batch`].
unsafe fn set(qpx: *mut IbvQpEx, f: impl FnOnce(&mut Builder) -> OpResult<()>) {
    guard::void_op("ibv_wr_set_*", || {
        // SAFETY: this function's contract is batch's.
        let (_, mut b) = unsafe { batch(qpx) };
        if let Err(e) = f(&mut b) {
            b.fail(e);
        }
    })
}

/// # Safety
/// As [`batch`].
unsafe fn refuse(qpx: *mut IbvQpEx, what: &'static str) {
    unsupported(what);
    // SAFETY: this function's contract is set's.
    unsafe { set(qpx, |_| Err(libc::EOPNOTSUPP)) };
}

unsafe extern "C" fn wr_start(qpx: *mut IbvQpEx) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    guard::void_op("wr_start", || unsafe { batch(qpx) }.1.clear())
}

unsafe extern "C" fn wr_abort(qpx: *mut IbvQpEx) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    guard::void_op("wr_abort", || unsafe { batch(qpx) }.1.clear())
}

unsafe extern "C" fn wr_complete(qpx: *mut IbvQpEx) -> c_int {
    guard::int_op("wr_complete", || {
        // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
        let (r, mut b) = unsafe { batch(qpx) };
        let res = post_batch(r, &b);
        b.clear();
        res
    })
}

fn post_batch(r: &RxuQp, b: &Builder) -> OpResult<()> {
    if let Some(e) = b.err {
        return Err(e);
    }
    let q = r.qp.as_ref().ok_or(libc::EINVAL)?;
    let mut g = q.lock_sq().map_err(|e| e.errno())?;
    if (g.free_slots().map_err(|e| e.errno())? as usize) < b.wrs.len() {
        return Err(libc::ENOMEM);
    }
    for p in &b.wrs {
        let ud = p.ud.map(|(ah, qpn, qkey)| UdDest {
            // SAFETY: set_ud_addr was given one of our AHs, which the
            // application keeps alive while WRs use it.
            ah: unsafe { client_ah(ah as *mut IbvAh) },
            remote_qpn: qpn,
            remote_qkey: qkey,
        });
        let inline = p.inline.clone().map(|i| &b.inline[i]);
        let mut flags = p.flags;
        if inline.is_none() {
            // The SGEs were given by set_sge*: IBV_SEND_INLINE is
            // meaningless there (only set_inline_data* sends inline).
            flags &= !send_flags::INLINE;
        }
        let wr = SendWr {
            wr_id: p.wr_id,
            opcode: p.opcode,
            send_flags: flags,
            sg_list: &b.sges[p.sges.clone()],
            inline_data: inline,
            imm_data: p.imm,
            remote_addr: p.remote_addr,
            rkey: p.rkey,
            compare_add: p.compare_add,
            swap: p.swap,
            ud,
            flush: 0,
            bind: p.bind,
        };
        g.push(&wr).map_err(|e| e.errno())?;
    }
    Ok(())
}

unsafe extern "C" fn wr_send(qpx: *mut IbvQpEx) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { begin(qpx, Op::SEND, |_| {}) }
}
unsafe extern "C" fn wr_send_imm(qpx: *mut IbvQpEx, imm: u32) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires. `imm` is __be32.
    unsafe { begin(qpx, Op::SEND_WITH_IMM, |p| p.imm = u32::from_be(imm)) }
}
unsafe extern "C" fn wr_send_inv(qpx: *mut IbvQpEx, rkey: u32) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { begin(qpx, Op::SEND_WITH_INV, |p| p.imm = rkey) }
}
unsafe extern "C" fn wr_rdma_write(qpx: *mut IbvQpEx, rkey: u32, addr: u64) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe {
        begin(qpx, Op::RDMA_WRITE, |p| {
            (p.rkey, p.remote_addr) = (rkey, addr)
        })
    }
}
unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut IbvQpEx, rkey: u32, addr: u64, imm: u32) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe {
        begin(qpx, Op::RDMA_WRITE_WITH_IMM, |p| {
            (p.rkey, p.remote_addr, p.imm) = (rkey, addr, u32::from_be(imm))
        })
    }
}
unsafe extern "C" fn wr_rdma_read(qpx: *mut IbvQpEx, rkey: u32, addr: u64) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe {
        begin(qpx, Op::RDMA_READ, |p| {
            (p.rkey, p.remote_addr) = (rkey, addr)
        })
    }
}
unsafe extern "C" fn wr_atomic_cmp_swp(
    qpx: *mut IbvQpEx,
    rkey: u32,
    addr: u64,
    cmp: u64,
    swap: u64,
) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe {
        begin(qpx, Op::ATOMIC_CMP_AND_SWP, |p| {
            (p.rkey, p.remote_addr, p.compare_add, p.swap) = (rkey, addr, cmp, swap)
        })
    }
}
unsafe extern "C" fn wr_atomic_fetch_add(qpx: *mut IbvQpEx, rkey: u32, addr: u64, add: u64) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe {
        begin(qpx, Op::ATOMIC_FETCH_AND_ADD, |p| {
            (p.rkey, p.remote_addr, p.compare_add) = (rkey, addr, add)
        })
    }
}
/// The 8 bytes at `data` are the value to write (copied now).
unsafe extern "C" fn wr_atomic_write(qpx: *mut IbvQpEx, rkey: u32, addr: u64, data: *const c_void) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe {
        begin(qpx, Op::ATOMIC_WRITE, |p| {
            (p.rkey, p.remote_addr) = (rkey, addr)
        })
    };
    if data.is_null() {
        // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
        return unsafe { set(qpx, |_| Err(libc::EINVAL)) };
    }
    // SAFETY: the caller passes 8 readable bytes.
    let v = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), 8) };
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { set(qpx, |b| push_inline(b, &[v])) };
}

unsafe extern "C" fn wr_set_sge(qpx: *mut IbvQpEx, lkey: u32, addr: u64, length: u32) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { set(qpx, |b| push_sges(b, &[Sge { addr, length, lkey }])) }
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut IbvQpEx, n: usize, list: *const Sge) {
    if n > 0 && list.is_null() {
        // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
        return unsafe { set(qpx, |_| Err(libc::EINVAL)) };
    }
    let sl: &[Sge] = if n == 0 {
        &[]
    } else {
        // SAFETY: the caller passes n SGEs (ibv_sge has Sge's layout).
        unsafe { std::slice::from_raw_parts(list, n) }
    };
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { set(qpx, |b| push_sges(b, sl)) }
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut IbvQpEx, addr: *mut c_void, length: usize) {
    if length > 0 && addr.is_null() {
        // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
        return unsafe { set(qpx, |_| Err(libc::EINVAL)) };
    }
    let d: &[u8] = if length == 0 {
        &[]
    } else {
        // SAFETY: the caller passes `length` readable bytes.
        unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), length) }
    };
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { set(qpx, |b| push_inline(b, &[d])) }
}

unsafe extern "C" fn wr_set_inline_data_list(qpx: *mut IbvQpEx, n: usize, list: *const IbvDataBuf) {
    if n > 0 && list.is_null() {
        // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
        return unsafe { set(qpx, |_| Err(libc::EINVAL)) };
    }
    let bufs: &[IbvDataBuf] = if n == 0 {
        &[]
    } else {
        // SAFETY: the caller passes n buffers.
        unsafe { std::slice::from_raw_parts(list, n) }
    };
    let mut parts = Vec::with_capacity(bufs.len());
    for d in bufs {
        if d.length == 0 {
            continue;
        }
        if d.addr.is_null() {
            // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
            return unsafe { set(qpx, |_| Err(libc::EINVAL)) };
        }
        // SAFETY: each buffer holds `length` readable bytes.
        parts.push(unsafe { std::slice::from_raw_parts(d.addr.cast::<u8>(), d.length) });
    }
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { set(qpx, |b| push_inline(b, &parts)) }
}

unsafe extern "C" fn wr_set_ud_addr(qpx: *mut IbvQpEx, ah: *mut IbvAh, qpn: u32, qkey: u32) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe {
        set(qpx, |b| {
            if ah.is_null() {
                return Err(libc::EINVAL);
            }
            if let Some(p) = b.last() {
                p.ud = Some((ah as usize, qpn, qkey));
            }
            Ok(())
        })
    }
}

/// BIND_MW of `mw` to `info`, the window's key becoming `rkey`.
unsafe extern "C" fn wr_bind_mw(
    qpx: *mut IbvQpEx,
    mw: *mut IbvMw,
    rkey: u32,
    info: *const IbvMwBindInfo,
) {
    if mw.is_null() || info.is_null() {
        // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
        return unsafe { set(qpx, |_| Err(libc::EINVAL)) };
    }
    // SAFETY: the application's live window and bind description; the
    // region in it, if any, is live too.
    let b = unsafe { bind_of((*mw).rkey, rkey, &*info) };
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { begin(qpx, Op::BIND_MW, |p| p.bind = b.ok()) };
    if b.is_err() {
        // SAFETY: as above.
        unsafe { set(qpx, |_| Err(libc::EINVAL)) };
    }
}
unsafe extern "C" fn wr_local_inv(qpx: *mut IbvQpEx, rkey: u32) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { begin(qpx, Op::LOCAL_INV, |p| p.imm = rkey) }
}
unsafe extern "C" fn wr_send_tso(qpx: *mut IbvQpEx, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { refuse(qpx, "ibv_wr_send_tso") }
}
unsafe extern "C" fn wr_set_xrc_srqn(qpx: *mut IbvQpEx, _srqn: u32) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { refuse(qpx, "ibv_wr_set_xrc_srqn (XRC)") }
}
unsafe extern "C" fn wr_flush(
    qpx: *mut IbvQpEx,
    _rkey: u32,
    _addr: u64,
    _len: usize,
    _t: u8,
    _l: u8,
) {
    // SAFETY: qpx is our QP's (ops: whose pointers), as batch requires.
    unsafe { refuse(qpx, "ibv_wr_flush") }
}
