//! `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`: walk the C list
//! under one queue lock, stop at the first bad WR and report it in
//! `*bad_wr` (the ones before it are posted, as with hardware).

use std::ffi::c_int;

use rxu_client::{wr_flags, RecvWr, SendWr, Sge, UdDest, WrOpcode as Op};

use crate::abi::{IbvQp, IbvRecvWr, IbvSendWr, IbvSrq};
use crate::guard::{self, OpResult};
use crate::log_info;
use crate::objects::{client_ah, client_qp, rxu_srq};
use crate::ops::mw::bind_of;

/// The SGE array of a WR.
///
/// # Safety
/// `sg_list` must hold `num_sge` entries (or num_sge be 0) that outlive 'a.
unsafe fn sges<'a>(sg_list: *const Sge, num_sge: c_int) -> OpResult<&'a [Sge]> {
    let n = usize::try_from(num_sge).map_err(|_| libc::EINVAL)?;
    if n == 0 {
        return Ok(&[]);
    }
    if sg_list.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-null and holding n entries that outlive 'a (the
    // contract); ibv_sge and Sge share a layout (abi::layout).
    Ok(unsafe { std::slice::from_raw_parts(sg_list, n) })
}

/// A send WR in the client library's terms.
///
/// # Safety
/// `w` must be a valid `ibv_send_wr` whose SGE array and (UD) AH are live
/// for 'a.
unsafe fn send_wr<'a>(w: &'a IbvSendWr, ud_qp: bool) -> OpResult<SendWr<'a>> {
    let opcode = Op(u32::try_from(w.opcode).map_err(|_| libc::EINVAL)?);
    // SAFETY: a valid ibv_send_wr's sg_list holds num_sge entries, live
    // for 'a (the contract).
    let sg_list = unsafe { sges(w.sg_list, w.num_sge)? };
    let mut s = SendWr {
        wr_id: w.wr_id,
        opcode,
        send_flags: w.send_flags,
        sg_list,
        ..Default::default()
    };
    let flags = opcode.info().map_or(0, |i| i.flags);
    if flags & wr_flags::IMM != 0 {
        // __be32 in the C struct; the client wants the wire word.
        s.imm_data = u32::from_be(w.imm_data);
    } else if flags & wr_flags::INV != 0 {
        s.imm_data = w.imm_data;
    }
    // Which member of the `wr` union holds the remote side.
    match opcode {
        Op::RDMA_WRITE | Op::RDMA_WRITE_WITH_IMM | Op::RDMA_READ | Op::ATOMIC_WRITE => {
            s.remote_addr = w.wr.addr_or_ah;
            s.rkey = w.rdma_rkey();
        }
        Op::ATOMIC_CMP_AND_SWP | Op::ATOMIC_FETCH_AND_ADD => {
            s.remote_addr = w.wr.addr_or_ah;
            s.compare_add = w.wr.word1;
            s.swap = w.wr.swap;
            s.rkey = w.wr.atomic_rkey as u32;
        }
        // `invalidate_rkey`, host order.
        Op::LOCAL_INV => s.imm_data = w.imm_data,
        Op::BIND_MW => {
            let mw = w.bind_mw();
            if mw.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the WR names the application's live window (made by
            // this provider, as the QP's context is ours).
            let mw_rkey = unsafe { (*mw).rkey };
            // SAFETY: bind_info.mr is the application's live MR, or null.
            s.bind = Some(unsafe { bind_of(mw_rkey, w.bind_rkey(), &w.bind_info())? });
        }
        _ => {}
    }
    if matches!(opcode, Op::LOCAL_INV | Op::BIND_MW) {
        // Local operations move no data: their SGEs are ignored, as by
        // rxe's provider.
        s.sg_list = &[];
        s.send_flags &= !rxu_client::send_flags::INLINE;
    }
    if ud_qp {
        let ah = w.ud_ah();
        if ah.is_null() {
            return Err(libc::EINVAL);
        }
        s.ud = Some(UdDest {
            // SAFETY: the application passes one of our AHs, live while
            // the WR is posted.
            ah: unsafe { client_ah(ah) },
            remote_qpn: w.ud_remote_qpn(),
            remote_qkey: w.ud_remote_qkey(),
        });
    }
    Ok(s)
}

pub unsafe extern "C" fn post_send(
    qp: *mut IbvQp,
    wr: *mut IbvSendWr,
    bad_wr: *mut *mut IbvSendWr,
) -> c_int {
    let mut cur = wr;
    let r = guard::int_op("post_send", || {
        // SAFETY: qp is ours (ops: whose pointers).
        let q = unsafe { client_qp(qp)? };
        let ud = q.qp_type() == rxu_client::QpType::Ud;
        let mut g = q.lock_sq().map_err(|e| e.errno())?;
        while !cur.is_null() {
            // SAFETY: the application's list of valid WRs.
            let w = unsafe { &*cur };
            // SAFETY: w is a valid WR of the application's list, its SGEs
            // and AH live during the call; inline WRs' SGEs point at
            // readable memory, which IBV_SEND_INLINE promises.
            unsafe { send_wr(w, ud).and_then(|s| g.push_gather(&s).map_err(|e| e.errno())) }
                .inspect_err(|e| log_info!("post_send: WR {:#x} refused (errno {e})", w.wr_id))?;
            cur = w.next;
        }
        Ok(())
    });
    if r != 0 && !bad_wr.is_null() {
        // SAFETY: the caller's out-parameter.
        unsafe { *bad_wr = cur };
    }
    r
}

/// Posts a receive list through `push`, returning where it stopped.
///
/// # Safety
/// `wr` must be a valid list of `ibv_recv_wr`.
unsafe fn post_recv_list(
    wr: *mut IbvRecvWr,
    mut push: impl FnMut(&RecvWr<'_>) -> OpResult<()>,
) -> (OpResult<()>, *mut IbvRecvWr) {
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: cur is a non-null element of the valid list (the
        // contract).
        let w = unsafe { &*cur };
        // SAFETY: a valid ibv_recv_wr's sg_list holds num_sge entries.
        let r = unsafe { sges(w.sg_list, w.num_sge) }.and_then(|sg_list| {
            push(&RecvWr {
                wr_id: w.wr_id,
                sg_list,
            })
        });
        if let Err(e) = r {
            return (Err(e), cur);
        }
        cur = w.next;
    }
    (Ok(()), cur)
}

fn finish_recv(r: c_int, stop: *mut IbvRecvWr, bad_wr: *mut *mut IbvRecvWr) -> c_int {
    if r != 0 && !bad_wr.is_null() {
        // SAFETY: the caller's out-parameter.
        unsafe { *bad_wr = stop };
    }
    r
}

pub unsafe extern "C" fn post_recv(
    qp: *mut IbvQp,
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
) -> c_int {
    let mut stop = wr;
    let r = guard::int_op("post_recv", || {
        // SAFETY: qp is ours (ops: whose pointers).
        let q = unsafe { client_qp(qp)? };
        let mut g = q.lock_rq().map_err(|e| e.errno())?;
        // SAFETY: the application's list.
        let (res, at) = unsafe { post_recv_list(wr, |w| g.push(w).map_err(|e| e.errno())) };
        stop = at;
        res
    });
    finish_recv(r, stop, bad_wr)
}

pub unsafe extern "C" fn post_srq_recv(
    srq: *mut IbvSrq,
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
) -> c_int {
    let mut stop = wr;
    let r = guard::int_op("post_srq_recv", || {
        // SAFETY: srq is ours.
        let s = unsafe { rxu_srq(srq) };
        let mut g = s.srq.lock().map_err(|e| e.errno())?;
        // SAFETY: the application's list.
        let (res, at) = unsafe { post_recv_list(wr, |w| g.push(w).map_err(|e| e.errno())) };
        stop = at;
        res
    });
    finish_recv(r, stop, bad_wr)
}
