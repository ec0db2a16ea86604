//! Golden bytes: each message built with distinct values in every field,
//! emitted, and compared with a whole 256-byte MAD written by hand from
//! the IBA tables (MAD offset = CM offset + 24). Every byte not set below
//! must be zero. The hand-written MAD must also parse back to the value.
// Binary literals are grouped by field, not by nibble.
#![allow(clippy::unusual_byte_groupings)]

use crate::wire::*;

fn seq<const N: usize>(start: u8) -> [u8; N] {
    std::array::from_fn(|i| start.wrapping_add(i as u8))
}

/// A MAD header for `attr`, TID 0x0102030405060708, attr_mod 0x30000000.
fn header(attr: u8) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    m[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    m[8..16].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    m[16..18].copy_from_slice(&[0, attr]);
    m[20..24].copy_from_slice(&[0x30, 0, 0, 0]);
    m
}

fn mad(msg: CmMsg) -> CmMad {
    CmMad {
        tid: 0x0102_0304_0506_0708,
        attr_mod: 0x3000_0000,
        msg,
    }
}

fn check(value: CmMad, want: [u8; MAD_LEN]) {
    let mut out = [0xeeu8; MAD_LEN];
    emit(&value, &mut out);
    for (i, (o, w)) in out.iter().zip(want.iter()).enumerate() {
        assert_eq!(
            o,
            w,
            "MAD byte {i} (CM {}): emitted 0x{o:02x}, want 0x{w:02x}",
            i as isize - 24
        );
    }
    assert_eq!(parse(&want).unwrap(), value);
}

fn put(m: &mut [u8], at: usize, b: &[u8]) {
    m[at..at + b.len()].copy_from_slice(b);
}

#[test]
fn req() {
    let req = Req {
        local_comm_id: 0x1122_3344,
        vendor_id: 0x0015b3,
        service_id: 0x0000_0000_0106_1c06,
        local_ca_guid: 0x0102_0304_0506_0708,
        local_qkey: 0x0a0b_0c0d,
        local_qpn: 0x12_3456,
        responder_resources: 0x7a,
        local_eecn: 0x65_4321,
        initiator_depth: 0x5b,
        remote_eecn: 0xab_cdef,
        remote_cm_response_timeout: 20,
        transport_type: 3,
        flow_control: true,
        starting_psn: 0xfe_dcba,
        local_cm_response_timeout: 22,
        retry_count: 5,
        pkey: 0x8001,
        path_mtu: 3,
        rdc_exists: true,
        rnr_retry_count: 6,
        max_cm_retries: 15,
        srq: false,
        extended_transport: 5,
        primary: ReqPath {
            local_lid: 0xfffe,
            remote_lid: 0xfffd,
            local_gid: seq(0x20),
            remote_gid: seq(0x40),
            flow_label: 0xabcde,
            packet_rate: 0x2a,
            traffic_class: 0x88,
            hop_limit: 64,
            sl: 0xb,
            subnet_local: true,
            local_ack_timeout: 19,
        },
        alternate: ReqPath {
            local_lid: 0x0102,
            remote_lid: 0x0304,
            local_gid: seq(0x60),
            remote_gid: seq(0x80),
            flow_label: 0x12345,
            packet_rate: 0x15,
            traffic_class: 0x99,
            hop_limit: 0x77,
            sl: 0x5,
            subnet_local: false,
            local_ack_timeout: 31,
        },
        private_data: seq(0xa0),
    };
    let mut m = header(0x10);
    put(&mut m, 24, &[0x11, 0x22, 0x33, 0x44]); // CM 0 local comm ID
    put(&mut m, 29, &[0x00, 0x15, 0xb3]); // CM 5 vendor ID (24)
    put(&mut m, 32, &[0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06]); // CM 8 service ID
    put(&mut m, 40, &[1, 2, 3, 4, 5, 6, 7, 8]); // CM 16 CA GUID
    put(&mut m, 52, &[0x0a, 0x0b, 0x0c, 0x0d]); // CM 28 Q_Key
    put(&mut m, 56, &[0x12, 0x34, 0x56, 0x7a]); // CM 32 QPN (24), CM 35 resp. res.
    put(&mut m, 60, &[0x65, 0x43, 0x21, 0x5b]); // CM 36 local EECN, CM 39 init. depth
    put(&mut m, 64, &[0xab, 0xcd, 0xef]); // CM 40 remote EECN
    m[67] = 0b10100_11_1; // CM 43: remote CM resp. timeout 20, transport 3, flow ctrl
    put(&mut m, 68, &[0xfe, 0xdc, 0xba]); // CM 44 starting PSN
    m[71] = 0b10110_101; // CM 47: local CM resp. timeout 22, retry count 5
    put(&mut m, 72, &[0x80, 0x01]); // CM 48 P_Key
    m[74] = 0b0011_1_110; // CM 50: MTU 3, RDC exists, RNR retry 6
    m[75] = 0b1111_0_101; // CM 51: max CM retries 15, SRQ 0, ext. transport 5
                          // Primary path, CM 52.
    put(&mut m, 76, &[0xff, 0xfe, 0xff, 0xfd]);
    put(&mut m, 80, &seq::<16>(0x20)); // CM 56 primary local GID
    put(&mut m, 96, &seq::<16>(0x40)); // CM 72 primary remote GID
    put(&mut m, 112, &[0xab, 0xcd, 0xe0]); // CM 88 flow label (20)
    m[115] = 0x2a; // CM 91 packet rate (low 6 bits)
    put(&mut m, 116, &[0x88, 64]); // CM 92 traffic class, CM 93 hop limit
    m[118] = 0b1011_1_000; // CM 94: SL 11, subnet local
    m[119] = 0b10011_000; // CM 95: local ACK timeout 19
                          // Alternate path, CM 96.
    put(&mut m, 120, &[0x01, 0x02, 0x03, 0x04]);
    put(&mut m, 124, &seq::<16>(0x60)); // CM 100
    put(&mut m, 140, &seq::<16>(0x80)); // CM 116
    put(&mut m, 156, &[0x12, 0x34, 0x50]); // CM 132 flow label
    m[159] = 0x15; // CM 135 packet rate
    put(&mut m, 160, &[0x99, 0x77]); // CM 136, 137
    m[162] = 0b0101_0_000; // CM 138 SL 5
    m[163] = 0b11111_000; // CM 139 local ACK timeout 31
    put(&mut m, 164, &seq::<92>(0xa0)); // CM 140 private data
    check(mad(CmMsg::Req(Box::new(req))), m);
}

#[test]
fn rep() {
    let rep = Rep {
        local_comm_id: 0x0102_0304,
        remote_comm_id: 0x0506_0708,
        local_qkey: 0x1111_2222,
        local_qpn: 0xab_cdef,
        local_eecn: 0x12_3456,
        starting_psn: 0x65_4321,
        vendor_id: 0xa1_b2c3,
        responder_resources: 0x10,
        initiator_depth: 0x20,
        target_ack_delay: 15,
        failover_accepted: 2,
        flow_control: true,
        rnr_retry_count: 7,
        srq: true,
        local_ca_guid: 0xf0e0_d0c0_b0a0_9080,
        private_data: seq(0x30),
    };
    let mut m = header(0x13);
    put(&mut m, 24, &[1, 2, 3, 4, 5, 6, 7, 8]); // CM 0, 4 comm IDs
    put(&mut m, 32, &[0x11, 0x11, 0x22, 0x22]); // CM 8 Q_Key
    put(&mut m, 36, &[0xab, 0xcd, 0xef, 0xa1]); // CM 12 QPN, CM 15 vendor H
    put(&mut m, 40, &[0x12, 0x34, 0x56, 0xb2]); // CM 16 EECN, CM 19 vendor M
    put(&mut m, 44, &[0x65, 0x43, 0x21, 0xc3]); // CM 20 starting PSN, CM 23 vendor L
    put(&mut m, 48, &[0x10, 0x20]); // CM 24 resp. res., CM 25 init. depth
    m[50] = 0b01111_10_1; // CM 26: target ACK delay 15, failover 2, flow ctrl
    m[51] = 0b111_1_0000; // CM 27: RNR retry 7, SRQ
    put(
        &mut m,
        52,
        &[0xf0, 0xe0, 0xd0, 0xc0, 0xb0, 0xa0, 0x90, 0x80],
    ); // CM 28 GUID
    put(&mut m, 60, &seq::<196>(0x30)); // CM 36 private data
    check(mad(CmMsg::Rep(Box::new(rep))), m);
}

#[test]
fn rtu_drep() {
    let mut m = header(0x14);
    put(&mut m, 24, &[1, 2, 3, 4, 5, 6, 7, 8]);
    put(&mut m, 32, &seq::<224>(9)); // CM 8 private data
    let rtu = Rtu {
        local_comm_id: 0x0102_0304,
        remote_comm_id: 0x0506_0708,
        private_data: seq(9),
    };
    check(mad(CmMsg::Rtu(Box::new(rtu))), m);
    m[17] = 0x16;
    let drep = Drep {
        local_comm_id: 0x0102_0304,
        remote_comm_id: 0x0506_0708,
        private_data: seq(9),
    };
    check(mad(CmMsg::Drep(Box::new(drep))), m);
}

#[test]
fn rej() {
    let rej = Rej {
        local_comm_id: 0,
        remote_comm_id: 0xdead_beef,
        msg_rejected: msg_ref::REQ,
        reject_info_len: 8,
        reason: rej_reason::INVALID_SERVICE_ID,
        ari: seq(0x40),
        private_data: seq(0x90),
    };
    let mut m = header(0x12);
    put(&mut m, 28, &[0xde, 0xad, 0xbe, 0xef]);
    m[32] = 0; // CM 8: message rejected REQ (top 2 bits)
    m[33] = 8 << 1; // CM 9: reject info length (top 7 bits)
    put(&mut m, 34, &[0, 8]); // CM 10 reason
    put(&mut m, 36, &seq::<72>(0x40)); // CM 12 ARI
    put(&mut m, 108, &seq::<148>(0x90)); // CM 84 private data
    check(mad(CmMsg::Rej(Box::new(rej.clone()))), m);

    let other = Rej {
        msg_rejected: msg_ref::OTHER,
        reject_info_len: 0x7f,
        reason: 0x1234,
        ..rej
    };
    m[32] = 0b10 << 6;
    m[33] = 0xfe;
    put(&mut m, 34, &[0x12, 0x34]);
    check(mad(CmMsg::Rej(Box::new(other))), m);
}

#[test]
fn mra() {
    let mra = Mra {
        local_comm_id: 0x0102_0304,
        remote_comm_id: 0x0506_0708,
        msg_mraed: msg_ref::REP,
        service_timeout: 24,
        private_data: seq(0x11),
    };
    let mut m = header(0x11);
    put(&mut m, 24, &[1, 2, 3, 4, 5, 6, 7, 8]);
    m[32] = 0b01 << 6; // CM 8 message MRAed
    m[33] = 24 << 3; // CM 9 service timeout (5)
    put(&mut m, 34, &seq::<222>(0x11)); // CM 10 private data
    check(mad(CmMsg::Mra(Box::new(mra))), m);
}

#[test]
fn dreq() {
    let dreq = Dreq {
        local_comm_id: 0x0102_0304,
        remote_comm_id: 0x0506_0708,
        remote_qpn: 0xab_cdef,
        private_data: seq(0x11),
    };
    let mut m = header(0x15);
    put(&mut m, 24, &[1, 2, 3, 4, 5, 6, 7, 8]);
    put(&mut m, 32, &[0xab, 0xcd, 0xef]); // CM 8 remote QPN (24)
    put(&mut m, 36, &seq::<220>(0x11)); // CM 12 private data
    check(mad(CmMsg::Dreq(Box::new(dreq))), m);
}

#[test]
fn sidr() {
    let req = SidrReq {
        request_id: 0x0102_0304,
        pkey: 0xffff,
        service_id: 0x0000_0000_0111_4853,
        private_data: seq(0x21),
    };
    let mut m = header(0x17);
    put(&mut m, 24, &[1, 2, 3, 4, 0xff, 0xff]); // CM 0 request ID, CM 4 P_Key
    put(&mut m, 32, &[0, 0, 0, 0, 0x01, 0x11, 0x48, 0x53]); // CM 8 service ID
    put(&mut m, 40, &seq::<216>(0x21)); // CM 16 private data
    check(mad(CmMsg::SidrReq(Box::new(req))), m);

    let rep = SidrRep {
        request_id: 0x0102_0304,
        status: sidr_status::NO_QP,
        add_info_len: 0x48,
        vendor_id: 0xa1_b2c3,
        qpn: 0x12_3456,
        service_id: 0x0000_0000_0111_4853,
        qkey: 0x0123_4567,
        add_info: seq(0x31),
        private_data: seq(0x41),
    };
    let mut m = header(0x18);
    put(&mut m, 24, &[1, 2, 3, 4, 3, 0x48]); // CM 4 status, CM 5 add. info length
    put(&mut m, 30, &[0xa1, 0xb2]); // CM 6 vendor ID H (16)
    put(&mut m, 32, &[0x12, 0x34, 0x56, 0xc3]); // CM 8 QPN, CM 11 vendor ID L
    put(&mut m, 36, &[0, 0, 0, 0, 0x01, 0x11, 0x48, 0x53]); // CM 12 service ID
    put(&mut m, 44, &[0x01, 0x23, 0x45, 0x67]); // CM 20 Q_Key
    put(&mut m, 48, &seq::<72>(0x31)); // CM 24 additional info
    put(&mut m, 120, &seq::<136>(0x41)); // CM 96 private data
    check(mad(CmMsg::SidrRep(Box::new(rep))), m);
}

#[test]
fn emit_masks_fields_to_their_widths() {
    let dreq = Dreq {
        local_comm_id: 1,
        remote_comm_id: 2,
        remote_qpn: 0xff00_0001,
        private_data: [0; DREQ_PRIVATE],
    };
    let mut out = [0u8; MAD_LEN];
    emit(&mad(CmMsg::Dreq(Box::new(dreq))), &mut out);
    assert_eq!(
        &out[32..36],
        &[0, 0, 1, 0],
        "QPN keeps 24 bits, byte CM 11 stays 0"
    );
}

#[test]
fn summaries() {
    let mut req = Req {
        local_comm_id: 0x1122_3344,
        vendor_id: 0,
        service_id: service_id(0x0106, 7174),
        local_ca_guid: 0,
        local_qkey: 0,
        local_qpn: 0x11,
        responder_resources: 0,
        local_eecn: 0,
        initiator_depth: 0,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_type: 0,
        flow_control: false,
        starting_psn: 0xabc,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport: 0,
        primary: ReqPath::default(),
        alternate: ReqPath::default(),
        private_data: [0; REQ_PRIVATE],
    };
    let m = CmMad {
        tid: 0x10,
        attr_mod: 0,
        msg: CmMsg::Req(Box::new(req.clone())),
    };
    assert_eq!(
        m.summary().to_string(),
        "REQ lcid=0x11223344 sid=0x0000000001061c06 (TCP port 7174) qpn=0x000011 \
         psn=0x000abc tid=0x0000000000000010"
    );
    req.service_id = 0x1234_0000_0000_0001;
    let m = CmMad {
        msg: CmMsg::Req(Box::new(req)),
        ..m
    };
    assert!(m
        .summary()
        .to_string()
        .contains("sid=0x1234000000000001 qpn"));
    let rej = CmMad {
        tid: 1,
        attr_mod: 0,
        msg: CmMsg::Rej(Box::new(Rej {
            local_comm_id: 0,
            remote_comm_id: 0x1122_3344,
            msg_rejected: msg_ref::REQ,
            reject_info_len: 0,
            reason: rej_reason::INVALID_SERVICE_ID,
            ari: [0; REJ_ARI],
            private_data: [0; REJ_PRIVATE],
        })),
    };
    assert_eq!(rej.msg.name(), "REJ");
    assert_eq!(rej.msg.attr_id(), AttrId::Rej);
    assert!(rej.summary().to_string().starts_with(
        "REJ lcid=0x00000000 rcid=0x11223344 rejected=REQ reason=8 (invalid service ID)"
    ));
    assert_eq!(rej_reason_name(35), "vendor option not supported");
    assert_eq!(rej_reason_name(34), "unknown reason");
}
