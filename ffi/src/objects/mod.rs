//! The provider's objects: each verbs object this provider makes is a
//! `repr(C)` struct that starts with the C object libibverbs and the
//! application see and holds the client library's object behind it. The
//! casts here turn the C pointer an op receives back into that struct;
//! why such a pointer is always one of ours is argued once, in
//! `crate::ops` ("Whose pointers").
//!
//! This module knows nothing of the ops: they create, use and free these
//! objects, and the event hooks read their counters.

pub mod cq_poll;
pub mod domain;
pub mod wr_batch;

use std::cell::UnsafeCell;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;

use rxu_client::{Ah, CompChannel, Cq, Mr, Mw, Pd, Qp, Srq};

use crate::abi::{
    IbvAh, IbvCq, IbvCqEx, IbvMw, IbvPd, IbvQp, IbvSrq, VerbsMr, VerbsQpArea, VerbsSrq,
};
use crate::events::Delivered;
use crate::guard::OpResult;
use cq_poll::PollState;
use domain::{DomainUse, ParentDomain};
use wr_batch::Builder;

/// An `ibv_pd` with the client PD behind it: a protection domain, or a
/// parent domain standing for one.
#[repr(C)]
pub struct RxuPd {
    pub ibv: IbvPd,
    /// For a parent domain: the PD it was made from, with its allocator.
    pub pd: Pd,
    /// Parent domains made from this PD.
    pub parents: AtomicU32,
    /// Set for a parent domain.
    pub parent: Option<ParentDomain>,
}

/// The client PD of one of our `ibv_pd`s (for a parent domain, the PD it
/// stands for, placing rings with its allocator).
///
/// # Safety
/// `pd` must be a live PD made by [`alloc_pd`](crate::ops::pd::alloc_pd)
/// or a parent domain made by this provider.
pub unsafe fn pd_of<'a>(pd: *mut IbvPd) -> &'a Pd {
    // SAFETY: this function's contract is rxu_pd's.
    unsafe { &rxu_pd(pd).pd }
}

/// # Safety
/// As [`pd_of`].
pub unsafe fn rxu_pd<'a>(pd: *mut IbvPd) -> &'a RxuPd {
    // SAFETY: `pd` is the ibv_pd of a live RxuPd (the contract), and
    // an RxuPd is repr(C) and starts with it, so the cast gives that RxuPd.
    unsafe { &*pd.cast::<RxuPd>() }
}

/// A use of the parent domain `pd` by a new object (None for a plain PD).
///
/// # Safety
/// As [`pd_of`].
pub unsafe fn domain_use(pd: *mut IbvPd) -> Option<DomainUse> {
    // SAFETY: this function's contract is rxu_pd's.
    let p = unsafe { rxu_pd(pd) };
    p.parent.as_ref().map(|d| DomainUse::new(&d.users))
}

/// An `ibv_ah` with the client AH behind it.
#[repr(C)]
pub struct RxuAh {
    pub ibv: IbvAh,
    pub ah: Ah,
}

/// # Safety
/// `ah` must be a live AH made by this provider.
pub unsafe fn client_ah<'a>(ah: *mut IbvAh) -> &'a Ah {
    // SAFETY: `ah` is the ibv_ah of a live RxuAh (the contract), and
    // an RxuAh is repr(C) and starts with it, so the cast gives that RxuAh.
    unsafe { &(*ah.cast::<RxuAh>()).ah }
}

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
    /// The parent domain it was created on (`IBV_CQ_INIT_ATTR_MASK_PD`).
    pub domain: Option<DomainUse>,
}

/// # Safety
/// `cq` must be a live CQ made by this provider.
pub unsafe fn rxu_cq<'a>(cq: *mut IbvCq) -> &'a RxuCq {
    // SAFETY: `cq` is the ibv_cq of a live RxuCq (the contract), and
    // an RxuCq is repr(C) and starts with it, so the cast gives that RxuCq.
    unsafe { &*cq.cast::<RxuCq>() }
}

/// A `verbs_qp` (sized for any supported library) with the client QP.
#[repr(C)]
pub struct RxuQp {
    /// Written by the library (`state`, `events_completed`, mutex) and by
    /// the application (`wr_id`/`wr_flags` of `ibv_qp_ex`), hence the cell.
    pub area: UnsafeCell<VerbsQpArea>,
    /// Taken out while destroying; put back if that fails.
    pub qp: Option<Qp>,
    pub sq_sig_all: bool,
    pub delivered: Delivered,
    /// Work requests of an `ibv_wr_start` batch.
    pub builder: Mutex<Builder>,
    /// The parent domain it was created on. Declared after `qp` so the
    /// rings are given back before the domain's count drops.
    pub domain: Option<DomainUse>,
}

/// # Safety
/// `qp` must be a live QP made by this provider.
pub unsafe fn rxu_qp<'a>(qp: *mut IbvQp) -> &'a RxuQp {
    // SAFETY: `qp` is the ibv_qp of a live RxuQp (the contract), and an
    // RxuQp is repr(C) and starts with it, so the cast gives that RxuQp.
    unsafe { &*qp.cast::<RxuQp>() }
}

/// # Safety
/// As [`rxu_qp`].
pub unsafe fn client_qp<'a>(qp: *mut IbvQp) -> OpResult<&'a Qp> {
    // SAFETY: this function's contract is rxu_qp's.
    unsafe { rxu_qp(qp) }.qp.as_ref().ok_or(libc::EINVAL)
}

/// A `verbs_srq` with the client SRQ behind it.
#[repr(C)]
pub struct RxuSrq {
    /// Written by the library too (`events_completed`, mutex).
    pub vsrq: UnsafeCell<VerbsSrq>,
    pub srq: Srq,
    pub delivered: Delivered,
    /// The parent domain it was created on.
    pub domain: Option<DomainUse>,
}

/// # Safety
/// `srq` must be a live SRQ made by this provider.
pub unsafe fn rxu_srq<'a>(srq: *mut IbvSrq) -> &'a RxuSrq {
    // SAFETY: `srq` is the ibv_srq of a live RxuSrq (the contract), and
    // an RxuSrq is repr(C) and starts with it, so the cast gives that RxuSrq.
    unsafe { &*srq.cast::<RxuSrq>() }
}

/// A `verbs_mr` (what `ibv_dereg_mr` expects) with the client MR behind it.
#[repr(C)]
pub struct RxuMr {
    pub vmr: VerbsMr,
    /// Taken out while deregistering; put back if that fails.
    pub mr: Option<Mr>,
}

/// An `ibv_mw` with the client MW behind it.
#[repr(C)]
pub struct RxuMw {
    pub ibv: IbvMw,
    /// Taken out while deallocating; put back if that fails.
    pub mw: Option<Mw>,
}
