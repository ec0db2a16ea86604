//! On-demand paging: `ibv_advise_mr`. rxud reaches registered memory
//! through the process's /proc/self/mem at each access and pins nothing,
//! which is what ODP promises: IBV_ACCESS_ON_DEMAND regions (and the
//! implicit one, `ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND)`)
//! are registered without checking that the range is mapped, and an access
//! to memory that is not mapped is an access error. Advice is checked by
//! rxud (`mem::advise` there): synchronous advice with mlx5's errnos,
//! asynchronous advice as rxe answers it.

use std::ffi::c_int;

use rxu_client::Sge;

use crate::abi::{IbvPd, IbvSge};
use crate::guard::{self, client_err};
use crate::objects::pd_of;

pub unsafe extern "C" fn advise_mr(
    pd: *mut IbvPd,
    advice: c_int,
    flags: u32,
    sg_list: *mut IbvSge,
    num_sge: u32,
) -> c_int {
    guard::int_op("advise_mr", || {
        if num_sge == 0 || sg_list.is_null() {
            return Err(libc::EINVAL);
        }
        let n = usize::try_from(num_sge).map_err(|_| libc::EINVAL)?;
        // SAFETY: the caller's array of num_sge entries (non-NULL);
        // ibv_sge and Sge share a layout (abi::layout).
        let sges = unsafe { std::slice::from_raw_parts(sg_list.cast::<Sge>(), n) };
        // A negative advice is no advice the kernel knows (EOPNOTSUPP).
        let advice = u32::try_from(advice).unwrap_or(u32::MAX);
        // SAFETY: pd is one of ours (ops: whose pointers).
        let p = unsafe { pd_of(pd) };
        p.advise_mr(advice, flags, sges)
            .map_err(client_err("advise_mr"))
    })
}
