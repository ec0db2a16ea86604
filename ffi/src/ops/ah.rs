//! Address handles (client-side only: the destination travels in each UD
//! send). `ibv_create_ah_from_wc` reaches here through libibverbs'
//! `ibv_init_ah_from_wc`, which builds a global address from the GRH rxud
//! writes into UD receive buffers.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use rxu_client::Ah;

use crate::abi::{IbvAh, IbvAhAttr, IbvPd};
use crate::context::state::state;
use crate::guard::{self, client_err};
use crate::objects::{pd_of, RxuAh};
use crate::ops::convert::ah_from_c;

pub unsafe extern "C" fn create_ah(pd: *mut IbvPd, attr: *mut IbvAhAttr) -> *mut IbvAh {
    guard::ptr_op("create_ah", || {
        // SAFETY: pd ours, attr the caller's.
        let (p, a, ctx) = unsafe { (pd_of(pd), &*attr, (*pd).context) };
        // SAFETY: the PD's context is ours.
        let st = unsafe { state(ctx)? };
        let ah = Ah::new(p, ah_from_c(a)).map_err(client_err("create_ah"))?;
        let ibv = IbvAh {
            context: ctx,
            pd,
            handle: st.next_handle.fetch_add(1, Ordering::Relaxed),
        };
        Ok(Box::into_raw(Box::new(RxuAh { ibv, ah })).cast())
    })
}

pub unsafe extern "C" fn destroy_ah(ah: *mut IbvAh) -> c_int {
    guard::int_op("destroy_ah", || {
        // SAFETY: from Box::into_raw in create_ah; the application's last use.
        drop(unsafe { Box::from_raw(ah.cast::<RxuAh>()) });
        Ok(())
    })
}
