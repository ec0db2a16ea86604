//! Queue pairs: create (plain and `_ex`), modify, query, destroy.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::sync::Mutex;

use rxu_client::{qp_attr_mask as mask, Qp, QpInit};

use crate::abi::consts::{qp_init_attr_mask, send_ops};
use crate::abi::{
    IbvContext, IbvGid, IbvPd, IbvQp, IbvQpAttr, IbvQpInitAttr, IbvQpInitAttrEx, VerbsQpArea,
    VERBS_QP_EX,
};
use crate::context::state::{state, CtxState};
use crate::events::{self, Delivered, Kind};
use crate::guard::{self, client_err, OpResult};
use crate::log::unsupported;
use crate::objects::wr_batch::Builder;
use crate::objects::{client_qp, domain_use, pd_of, rxu_cq, rxu_qp, rxu_srq, RxuQp};
use crate::ops::convert::{cap_from_c, cap_to_c, qp_attr_from_c, qp_attr_to_c, qp_type_from_c};
use crate::ops::qp_ex;

/// The send opcodes the `ibv_wr_*` interface offers on this library.
fn supported_send_ops(st: &CtxState) -> u64 {
    let mut s = send_ops::RDMA_WRITE
        | send_ops::RDMA_WRITE_WITH_IMM
        | send_ops::SEND
        | send_ops::SEND_WITH_IMM
        | send_ops::RDMA_READ
        | send_ops::ATOMIC_CMP_AND_SWP
        | send_ops::ATOMIC_FETCH_AND_ADD
        | send_ops::LOCAL_INV
        | send_ops::BIND_MW
        | send_ops::SEND_WITH_INV;
    if st.lib.has_atomic_write() {
        s |= send_ops::ATOMIC_WRITE;
    }
    s
}

/// Creates a QP from the fields `ibv_qp_init_attr` and `_ex` share.
/// `send_ops`: Some for a QP with the `ibv_wr_*` interface.
///
/// # Safety
/// `ctx`, `pd` ours; `a` the caller's attributes (its CQs/SRQ ours).
unsafe fn create(
    ctx: *mut IbvContext,
    pd: *mut IbvPd,
    a: &mut IbvQpInitAttr,
    send_ops: Option<u64>,
) -> OpResult<*mut IbvQp> {
    // SAFETY: ctx is ours (the contract), as state requires.
    let st = unsafe { state(ctx)? };
    let qp_type = qp_type_from_c(a.qp_type)
        .inspect_err(|_| unsupported("QP types other than RC, UC and UD"))?;
    if a.send_cq.is_null() || a.recv_cq.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: CQs and the SRQ were made by this provider.
    let (send_cq, recv_cq, srq) = unsafe {
        (
            &rxu_cq(a.send_cq).cq,
            &rxu_cq(a.recv_cq).cq,
            (!a.srq.is_null()).then(|| &rxu_srq(a.srq).srq),
        )
    };
    let mut slot: Box<MaybeUninit<RxuQp>> = Box::new_uninit();
    let addr = slot.as_mut_ptr();
    let init = QpInit {
        qp_type,
        send_cq,
        recv_cq,
        srq,
        cap: cap_from_c(&a.cap),
        sq_sig_all: a.sq_sig_all != 0,
        // The kernel's user_handle: QP async events carry the struct
        // ibv_qp * itself.
        user_handle: addr as u64,
    };
    // SAFETY: pd is ours.
    let qp = Qp::create(unsafe { pd_of(pd) }, &init).map_err(client_err("create_qp"))?;
    // SAFETY: VerbsQpArea is plain data for which all-zero is valid.
    let mut area: VerbsQpArea = unsafe { std::mem::zeroed() };
    let b = &mut area.qp_ex.qp_base;
    b.context = ctx;
    b.qp_context = a.qp_context;
    b.pd = pd;
    b.send_cq = a.send_cq;
    b.recv_cq = a.recv_cq;
    b.srq = a.srq;
    b.handle = qp.qpn();
    b.qp_num = qp.qpn();
    b.state = 0; // IBV_QPS_RESET
    b.qp_type = a.qp_type;
    if send_ops.is_some() {
        qp_ex::install(&mut area, st.lib);
    }
    a.cap = cap_to_c(&qp.cap());
    slot.write(RxuQp {
        area: UnsafeCell::new(area),
        qp: Some(qp),
        sq_sig_all: a.sq_sig_all != 0,
        delivered: Delivered::default(),
        builder: Mutex::new(Builder::default()),
        // SAFETY: pd is ours.
        domain: unsafe { domain_use(pd) },
    });
    let p = Box::into_raw(slot).cast::<RxuQp>();
    // SAFETY: p is the fresh QP; its base lies at offset 0 and the
    // comp_mask offset is the library's (inside the area, version.rs).
    unsafe {
        let base = (*p).area.get();
        events::init_sync(
            &raw mut (*base).qp_ex.qp_base.mutex,
            &raw mut (*base).qp_ex.qp_base.cond,
        );
        if send_ops.is_some() {
            base.cast::<u8>()
                .add(st.lib.qp_comp_mask_off)
                .cast::<u32>()
                .write(VERBS_QP_EX);
        }
    }
    st.live.add(p as usize, Kind::Qp);
    Ok(p.cast())
}

pub unsafe extern "C" fn create_qp(pd: *mut IbvPd, attr: *mut IbvQpInitAttr) -> *mut IbvQp {
    guard::ptr_op("create_qp", || {
        // SAFETY: pd is ours and live; attr is the caller's.
        unsafe { create((*pd).context, pd, &mut *attr, None) }
    })
}

pub unsafe extern "C" fn create_qp_ex(
    ctx: *mut IbvContext,
    attr: *mut IbvQpInitAttrEx,
) -> *mut IbvQp {
    guard::ptr_op("create_qp_ex", || {
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        let known = qp_init_attr_mask::PD
            | qp_init_attr_mask::CREATE_FLAGS
            | qp_init_attr_mask::SEND_OPS_FLAGS;
        if a.comp_mask & !known != 0 {
            unsupported("create_qp_ex with XRC, TSO, RSS or an indirection table");
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & qp_init_attr_mask::PD == 0 || a.pd.is_null() {
            return Err(libc::EINVAL);
        }
        if a.comp_mask & qp_init_attr_mask::CREATE_FLAGS != 0 && a.create_flags != 0 {
            unsupported("create_qp_ex create_flags");
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: ctx is ours (ops: whose pointers).
        let st = unsafe { state(ctx)? };
        let ops = if a.comp_mask & qp_init_attr_mask::SEND_OPS_FLAGS != 0 {
            if a.send_ops_flags & !supported_send_ops(st) != 0 {
                unsupported("ibv_wr_* opcodes other than send/write/read/atomics");
                return Err(libc::EOPNOTSUPP);
            }
            Some(a.send_ops_flags)
        } else {
            None
        };
        // ibv_qp_init_attr is the first part of ibv_qp_init_attr_ex.
        let base = attr.cast::<IbvQpInitAttr>();
        // SAFETY: ctx is ours (ops: whose pointers) and a.pd the caller's, of this context;
        // attr is the caller's ibv_qp_init_attr_ex, whose prefix has the
        // layout of ibv_qp_init_attr (abi::layout).
        unsafe { create(ctx, a.pd, &mut *base, ops) }
    })
}

pub unsafe extern "C" fn modify_qp(
    qp: *mut IbvQp,
    attr: *mut IbvQpAttr,
    attr_mask: c_int,
) -> c_int {
    guard::int_op("modify_qp", || {
        let m = attr_mask as u32;
        if m & (mask::ALT_PATH | mask::PATH_MIG_STATE) != 0 {
            unsupported("modify_qp with alternate paths (APM)");
            return Err(libc::EOPNOTSUPP);
        }
        if m >> 21 != 0 {
            unsupported("modify_qp attributes beyond IBV_QP_DEST_QPN (rate limit, ...)");
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: qp is ours; attr the caller's.
        let (q, a) = unsafe { (client_qp(qp)?, &*attr) };
        let qa = qp_attr_from_c(a, m)?;
        q.modify(&qa, m).map_err(client_err("modify_qp"))
    })
}

pub unsafe extern "C" fn query_qp(
    qp: *mut IbvQp,
    attr: *mut IbvQpAttr,
    attr_mask: c_int,
    init_attr: *mut IbvQpInitAttr,
) -> c_int {
    guard::int_op("query_qp", || {
        // SAFETY: qp is ours (ops: whose pointers).
        let r = unsafe { rxu_qp(qp) };
        let q = r.qp.as_ref().ok_or(libc::EINVAL)?;
        let (qa, cap) = q.query(attr_mask as u32).map_err(client_err("query_qp"))?;
        // SAFETY: attr and init_attr are the caller's; qp is live.
        unsafe {
            *attr = qp_attr_to_c(&qa, &cap);
            if !init_attr.is_null() {
                *init_attr = IbvQpInitAttr {
                    qp_context: (*qp).qp_context,
                    send_cq: (*qp).send_cq,
                    recv_cq: (*qp).recv_cq,
                    srq: (*qp).srq,
                    cap: cap_to_c(&cap),
                    qp_type: (*qp).qp_type,
                    sq_sig_all: c_int::from(r.sq_sig_all),
                };
            }
        }
        Ok(())
    })
}

/// `ibv_attach_mcast`: a UD QP receives a multicast group (RoCEv2: the
/// IPv4 group of an IPv4-mapped GID). librdmacm calls it on
/// MULTICAST_JOIN.
pub unsafe extern "C" fn attach_mcast(qp: *mut IbvQp, gid: *const IbvGid, lid: u16) -> c_int {
    guard::int_op("attach_mcast", || {
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: qp is ours; gid the caller's, checked non-null.
        let (q, g) = unsafe { (client_qp(qp)?, (*gid).raw) };
        let r = q.attach_mcast(&g, lid).map_err(client_err("attach_mcast"));
        if r == Err(libc::EOPNOTSUPP) {
            unsupported("attach_mcast to an IPv6 group (rxu joins IPv4 groups)");
        }
        r
    })
}

/// `ibv_detach_mcast`.
pub unsafe extern "C" fn detach_mcast(qp: *mut IbvQp, gid: *const IbvGid, lid: u16) -> c_int {
    guard::int_op("detach_mcast", || {
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: qp is ours; gid the caller's, checked non-null.
        let (q, g) = unsafe { (client_qp(qp)?, (*gid).raw) };
        q.detach_mcast(&g, lid).map_err(client_err("detach_mcast"))
    })
}

pub unsafe extern "C" fn destroy_qp(qp: *mut IbvQp) -> c_int {
    guard::int_op("destroy_qp", || {
        let r = qp.cast::<RxuQp>();
        // SAFETY: qp is ours; the application's last use but for errors.
        let (st, slot) = unsafe { (state((*qp).context)?, &mut (*r).qp) };
        let q = slot.take().ok_or(libc::EINVAL)?;
        if let Err((q, e)) = q.destroy() {
            *slot = Some(q);
            return Err(client_err("destroy_qp")(e));
        }
        st.live.remove(qp as usize);
        // SAFETY: the QP's own mutex/cond (initialised in create);
        // ibv_ack_async_event updates events_completed under it.
        unsafe {
            let d = &(*r).delivered;
            events::wait_acked(
                "destroy_qp",
                &raw mut (*qp).mutex,
                &raw mut (*qp).cond,
                || (*qp).events_completed >= events::load(&d.async_),
            );
            libc::pthread_mutex_destroy(&raw mut (*qp).mutex);
            libc::pthread_cond_destroy(&raw mut (*qp).cond);
            drop(Box::from_raw(r));
        }
        Ok(())
    })
}
