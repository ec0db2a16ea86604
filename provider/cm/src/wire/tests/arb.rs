//! Arbitrary CM messages for the property tests: every field drawn from a
//! byte source and masked to its documented width, so that a round trip
//! must give the value back unchanged.

use proptest::prelude::*;

use crate::wire::*;

/// Reads values off random bytes (zeros once they run out).
pub struct Src<'a>(&'a [u8]);

impl Src<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn bits(&mut self, width: u32) -> u32 {
        self.u32() & ((1u64 << width) - 1) as u32
    }
    fn bits8(&mut self, width: u32) -> u8 {
        self.bits(width) as u8
    }
    fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }
}

fn path(s: &mut Src<'_>) -> ReqPath {
    ReqPath {
        local_lid: s.u16(),
        remote_lid: s.u16(),
        local_gid: s.take(),
        remote_gid: s.take(),
        flow_label: s.bits(20),
        packet_rate: s.bits8(6),
        traffic_class: s.u8(),
        hop_limit: s.u8(),
        sl: s.bits8(4),
        subnet_local: s.bool(),
        local_ack_timeout: s.bits8(5),
    }
}

/// Message number `kind % 9` built from `bytes`.
pub fn msg(kind: u8, bytes: &[u8]) -> CmMsg {
    let s = &mut Src(bytes);
    match kind % 9 {
        0 => CmMsg::Req(Box::new(Req {
            local_comm_id: s.u32(),
            vendor_id: s.bits(24),
            service_id: s.u64(),
            local_ca_guid: s.u64(),
            local_qkey: s.u32(),
            local_qpn: s.bits(24),
            responder_resources: s.u8(),
            local_eecn: s.bits(24),
            initiator_depth: s.u8(),
            remote_eecn: s.bits(24),
            remote_cm_response_timeout: s.bits8(5),
            transport_type: s.bits8(2),
            flow_control: s.bool(),
            starting_psn: s.bits(24),
            local_cm_response_timeout: s.bits8(5),
            retry_count: s.bits8(3),
            pkey: s.u16(),
            path_mtu: s.bits8(4),
            rdc_exists: s.bool(),
            rnr_retry_count: s.bits8(3),
            max_cm_retries: s.bits8(4),
            srq: s.bool(),
            extended_transport: s.bits8(3),
            primary: path(s),
            alternate: path(s),
            private_data: s.take(),
        })),
        1 => CmMsg::Rep(Box::new(Rep {
            local_comm_id: s.u32(),
            remote_comm_id: s.u32(),
            local_qkey: s.u32(),
            local_qpn: s.bits(24),
            local_eecn: s.bits(24),
            starting_psn: s.bits(24),
            vendor_id: s.bits(24),
            responder_resources: s.u8(),
            initiator_depth: s.u8(),
            target_ack_delay: s.bits8(5),
            failover_accepted: s.bits8(2),
            flow_control: s.bool(),
            rnr_retry_count: s.bits8(3),
            srq: s.bool(),
            local_ca_guid: s.u64(),
            private_data: s.take(),
        })),
        2 => CmMsg::Rtu(Box::new(Rtu {
            local_comm_id: s.u32(),
            remote_comm_id: s.u32(),
            private_data: s.take(),
        })),
        3 => CmMsg::Rej(Box::new(Rej {
            local_comm_id: s.u32(),
            remote_comm_id: s.u32(),
            msg_rejected: s.bits8(2),
            reject_info_len: s.bits8(7),
            reason: s.u16(),
            ari: s.take(),
            private_data: s.take(),
        })),
        4 => CmMsg::Mra(Box::new(Mra {
            local_comm_id: s.u32(),
            remote_comm_id: s.u32(),
            msg_mraed: s.bits8(2),
            service_timeout: s.bits8(5),
            private_data: s.take(),
        })),
        5 => CmMsg::Dreq(Box::new(Dreq {
            local_comm_id: s.u32(),
            remote_comm_id: s.u32(),
            remote_qpn: s.bits(24),
            private_data: s.take(),
        })),
        6 => CmMsg::Drep(Box::new(Drep {
            local_comm_id: s.u32(),
            remote_comm_id: s.u32(),
            private_data: s.take(),
        })),
        7 => CmMsg::SidrReq(Box::new(SidrReq {
            request_id: s.u32(),
            pkey: s.u16(),
            service_id: s.u64(),
            private_data: s.take(),
        })),
        _ => CmMsg::SidrRep(Box::new(SidrRep {
            request_id: s.u32(),
            status: s.u8(),
            add_info_len: s.u8(),
            vendor_id: s.bits(24),
            qpn: s.bits(24),
            service_id: s.u64(),
            qkey: s.u32(),
            add_info: s.take(),
            private_data: s.take(),
        })),
    }
}

/// Any CM MAD whose fields fit their widths.
pub fn mad() -> impl Strategy<Value = CmMad> {
    (
        any::<u8>(),
        any::<u64>(),
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 600),
    )
        .prop_map(|(kind, tid, attr_mod, bytes)| CmMad {
            tid,
            attr_mod,
            msg: msg(kind, &bytes),
        })
}
