//! Event records on a channel socket and `struct rdma_ucm_event_resp`.
//!
//! Records are postcard [`CmEventRecord`]s, one per datagram, written by
//! the daemons (tag = the device index the emulator gave in
//! AttachChannel) and by the emulator itself (tag [`LOCAL_TAG`], id = the
//! local handle) for the events it raises: ADDR_RESOLVED, ADDR_ERROR,
//! ROUTE_RESOLVED.

use std::os::fd::{AsRawFd, BorrowedFd};

use rxu_abi::proto;
use rxu_abi::proto::cm::{CmEventParam, CmEventRecord, Ece};

use crate::abi::{self, emit_ah_attr};
use crate::command::Errno;

/// The tag of records the emulator writes itself.
pub const LOCAL_TAG: u32 = u32::MAX;
/// Largest record datagram read (records are a few hundred bytes).
pub const MAX_RECORD: usize = 2048;

/// The fields of one event response.
pub struct EventResp<'a> {
    pub uid: u64,
    pub id: u32,
    pub event: u32,
    pub status: i32,
    /// UD ids get the UD parameter layout.
    pub ud: bool,
    pub param: &'a CmEventParam,
    pub ece: Ece,
}

/// `struct rdma_ucm_event_resp` (336 bytes).
pub fn event_resp(e: &EventResp<'_>) -> [u8; abi::EVENT_RESP_LEN] {
    let mut b = [0u8; abi::EVENT_RESP_LEN];
    b[0..8].copy_from_slice(&e.uid.to_ne_bytes());
    b[8..12].copy_from_slice(&e.id.to_ne_bytes());
    b[12..16].copy_from_slice(&e.event.to_ne_bytes());
    b[16..20].copy_from_slice(&e.status.to_ne_bytes());
    let p = &mut b[20..20 + 308];
    let pd = &e.param.private_data[..e.param.private_data.len().min(255)];
    if e.ud {
        p[0..4].copy_from_slice(&e.param.qp_num.to_ne_bytes());
        p[4..8].copy_from_slice(&e.param.qkey.to_ne_bytes());
        if let Some(ah) = &e.param.ah {
            emit_ah_attr(&mut p[8..40], ah);
        }
        p[40..40 + pd.len()].copy_from_slice(pd);
        p[296] = pd.len() as u8;
    } else {
        p[0..4].copy_from_slice(&e.param.qp_num.to_ne_bytes());
        p[4..8].copy_from_slice(&e.param.qkey.to_ne_bytes());
        p[8..8 + pd.len()].copy_from_slice(pd);
        p[264] = pd.len() as u8;
        p[265] = e.param.srq;
        p[266] = e.param.responder_resources;
        p[267] = e.param.initiator_depth;
        p[268] = e.param.flow_control;
        p[269] = e.param.retry_count;
        p[270] = e.param.rnr_retry_count;
    }
    b[328..332].copy_from_slice(&e.ece.vendor_id.to_ne_bytes());
    b[332..336].copy_from_slice(&e.ece.attr_mod.to_ne_bytes());
    b
}

/// Writes one record to a channel socket without blocking.
pub fn send_record(b: BorrowedFd<'_>, r: &CmEventRecord) -> Result<(), Errno> {
    let bytes = proto::encode(r).map_err(|_| libc::EINVAL)?;
    send_raw(b, &bytes)
}

/// Writes one datagram without blocking or SIGPIPE.
pub fn send_raw(b: BorrowedFd<'_>, bytes: &[u8]) -> Result<(), Errno> {
    loop {
        // SAFETY: `bytes` is a live buffer of bytes.len() bytes.
        let n = unsafe {
            libc::send(
                b.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// Receives one datagram from `fd` into `buf` (flags: 0 or MSG_DONTWAIT;
/// the fd's own O_NONBLOCK applies too). Ok(0) is end of file.
pub fn recv_raw(fd: i32, buf: &mut [u8], flags: i32) -> Result<usize, Errno> {
    // SAFETY: `buf` is a live, writable buffer of buf.len() bytes.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
    if n >= 0 {
        Ok(n as usize)
    } else {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }
}

/// A local record (ADDR_RESOLVED ...) for handle `id`.
pub fn local(id: u32, event: u32, status: i32) -> CmEventRecord {
    CmEventRecord {
        tag: LOCAL_TAG,
        id,
        event,
        status,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxu_abi::proto::AhAttr;

    #[test]
    fn conn_layout() {
        let param = CmEventParam {
            private_data: vec![7; 56],
            responder_resources: 1,
            initiator_depth: 2,
            retry_count: 7,
            rnr_retry_count: 6,
            qp_num: 0x11,
            ..Default::default()
        };
        let b = event_resp(&EventResp {
            uid: 0xabcd,
            id: 3,
            event: 4,
            status: -110,
            ud: false,
            param: &param,
            ece: Ece {
                vendor_id: 0x15b3,
                attr_mod: 9,
            },
        });
        assert_eq!(abi::u64_at(&b, 0), 0xabcd);
        assert_eq!(abi::u32_at(&b, 8), 3);
        assert_eq!(abi::u32_at(&b, 12), 4);
        assert_eq!(abi::u32_at(&b, 16) as i32, -110);
        assert_eq!(abi::u32_at(&b, 20), 0x11);
        assert_eq!(&b[28..84], &[7; 56]);
        assert_eq!(b[28 + 56], 0);
        assert_eq!(b[20 + 264], 56);
        assert_eq!(
            (b[20 + 266], b[20 + 267], b[20 + 269], b[20 + 270]),
            (1, 2, 7, 6)
        );
        assert_eq!(abi::u32_at(&b, 328), 0x15b3);
        assert_eq!(abi::u32_at(&b, 332), 9);
    }

    #[test]
    fn ud_layout() {
        let param = CmEventParam {
            private_data: vec![1, 2],
            qp_num: 0x22,
            qkey: 0x0123_4567,
            ah: Some(AhAttr {
                dgid: [5; 16],
                hop_limit: 64,
                is_global: true,
                port_num: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        let b = event_resp(&EventResp {
            uid: 1,
            id: 0,
            event: 9,
            status: 0,
            ud: true,
            param: &param,
            ece: Ece::default(),
        });
        assert_eq!(abi::u32_at(&b, 20), 0x22);
        assert_eq!(abi::u32_at(&b, 24), 0x0123_4567);
        assert_eq!(&b[28..44], &[5; 16], "ah dgid");
        assert_eq!(b[28 + 21], 64, "hop limit");
        assert_eq!(b[28 + 29], 1, "is_global");
        assert_eq!(&b[60..62], &[1, 2]);
        assert_eq!(b[20 + 296], 2);
    }
}
