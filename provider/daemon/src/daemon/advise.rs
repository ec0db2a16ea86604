//! The `AdviseMr` request (`ibv_advise_mr`): checked against the session's
//! PDs here, then against the regions by the memory layer
//! (`crate::mem::advise`).

use transport::engine::Endpoint;

use crate::mem::advise::Range;
use crate::mem::DeviceMemory;
use rxu_abi::proto::{MrRange, Response, MAX_ADVISE_RANGES};

use super::objects::Objects;
use super::reply::{refuse, Handled, Reply};

pub(super) fn advise_mr(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    id: u32,
    pd: u32,
    (advice, flags): (u32, u32),
    ranges: &[MrRange],
) -> Handled {
    if !objects.session_mut(id)?.pds.contains(&pd) {
        return refuse(libc::EINVAL, format!("no PD {pd}"));
    }
    if ranges.len() > MAX_ADVISE_RANGES {
        return refuse(libc::EINVAL, "too many ranges");
    }
    let ranges: Vec<Range> = ranges
        .iter()
        .map(|r| Range {
            addr: r.addr,
            len: r.len,
            lkey: r.lkey,
        })
        .collect();
    match endpoint.memory().advise(id, pd, advice, flags, &ranges) {
        Ok(()) => Ok(Reply::ok(Response::Ok)),
        Err(e) => refuse(e.errno(), format!("advise_mr: {e}")),
    }
}
