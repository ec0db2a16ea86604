//! Building the CM messages the engine sends (all reserved and unused
//! fields zero, private data zero padded).

use crate::wire::{
    msg_ref, CmMad, CmMsg, Drep, Dreq, Mra, Rej, Rtu, SidrRep, DREP_PRIVATE, DREQ_PRIVATE,
    MRA_PRIVATE, REJ_ARI, REJ_PRIVATE, RTU_PRIVATE, SIDR_REP_INFO, SIDR_REP_PRIVATE,
};

/// `N` bytes holding `data` (the caller checked its length).
pub(crate) fn padded<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = data.len().min(N);
    a[..n].copy_from_slice(&data[..n]);
    a
}

pub(crate) fn mad(tid: u64, msg: CmMsg) -> CmMad {
    CmMad {
        tid,
        attr_mod: 0,
        msg,
    }
}

pub(crate) fn rtu(tid: u64, local: u32, remote: u32) -> CmMad {
    mad(
        tid,
        CmMsg::Rtu(Box::new(Rtu {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: [0; RTU_PRIVATE],
        })),
    )
}

pub(crate) struct RejParts<'a> {
    pub local: u32,
    pub remote: u32,
    pub msg_rejected: u8,
    pub reason: u16,
    pub ari: &'a [u8],
    pub private_data: &'a [u8],
}

pub(crate) fn rej(tid: u64, p: RejParts<'_>) -> CmMad {
    mad(
        tid,
        CmMsg::Rej(Box::new(Rej {
            local_comm_id: p.local,
            remote_comm_id: p.remote,
            msg_rejected: p.msg_rejected,
            reject_info_len: p.ari.len().min(REJ_ARI) as u8,
            reason: p.reason,
            ari: padded::<REJ_ARI>(p.ari),
            private_data: padded::<REJ_PRIVATE>(p.private_data),
        })),
    )
}

pub(crate) fn mra(tid: u64, local: u32, remote: u32, mraed: u8, service_timeout: u8) -> CmMad {
    debug_assert!(mraed <= msg_ref::OTHER);
    mad(
        tid,
        CmMsg::Mra(Box::new(Mra {
            local_comm_id: local,
            remote_comm_id: remote,
            msg_mraed: mraed,
            service_timeout,
            private_data: [0; MRA_PRIVATE],
        })),
    )
}

pub(crate) fn dreq(tid: u64, local: u32, remote: u32, remote_qpn: u32) -> CmMad {
    mad(
        tid,
        CmMsg::Dreq(Box::new(Dreq {
            local_comm_id: local,
            remote_comm_id: remote,
            remote_qpn,
            private_data: [0; DREQ_PRIVATE],
        })),
    )
}

pub(crate) fn drep(tid: u64, local: u32, remote: u32) -> CmMad {
    mad(
        tid,
        CmMsg::Drep(Box::new(Drep {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: [0; DREP_PRIVATE],
        })),
    )
}

pub(crate) struct SidrRepParts<'a> {
    pub request_id: u32,
    pub status: u8,
    pub qpn: u32,
    pub qkey: u32,
    pub service_id: u64,
    pub vendor_id: u32,
    pub private_data: &'a [u8],
}

pub(crate) fn sidr_rep(tid: u64, p: SidrRepParts<'_>) -> CmMad {
    mad(
        tid,
        CmMsg::SidrRep(Box::new(SidrRep {
            request_id: p.request_id,
            status: p.status,
            add_info_len: 0,
            vendor_id: p.vendor_id,
            qpn: p.qpn,
            service_id: p.service_id,
            qkey: p.qkey,
            add_info: [0; SIDR_REP_INFO],
            private_data: padded::<SIDR_REP_PRIVATE>(p.private_data),
        })),
    )
}
