//! `ibv_query_rt_values_ex`: the device's clock now. rxu's HCA clock is
//! CLOCK_MONOTONIC in ns (`rxu_abi::clock`), the clock completion
//! timestamps are taken with, so the value read here and a completion's
//! `ibv_wc_read_completion_ts` compare directly.

use std::ffi::c_int;

use crate::abi::consts::values;
use crate::abi::{IbvContext, IbvValuesEx};
use crate::guard;

/// As mlx5: an unknown `comp_mask` bit is EINVAL; `RAW_CLOCK` gives the
/// ticks in `raw_clock.tv_nsec` with `tv_sec` 0 (so both readings in use,
/// `tv_nsec` alone and `tv_sec * 1e9 + tv_nsec`, give the same count), and
/// `comp_mask` comes back as what was filled in.
pub unsafe extern "C" fn query_rt_values(_ctx: *mut IbvContext, v: *mut IbvValuesEx) -> c_int {
    guard::int_op("query_rt_values", || {
        if v.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's struct ibv_values_ex (checked non-NULL).
        let v = unsafe { &mut *v };
        if v.comp_mask & !values::RAW_CLOCK != 0 {
            return Err(libc::EINVAL);
        }
        let mut filled = 0;
        if v.comp_mask & values::RAW_CLOCK != 0 {
            v.raw_clock.tv_sec = 0;
            v.raw_clock.tv_nsec = rxu_abi::clock::hca_clock_ns() as libc::c_long;
            filled |= values::RAW_CLOCK;
        }
        v.comp_mask = filled;
        Ok(())
    })
}
