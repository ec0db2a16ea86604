//! XRC on the wire: the XRCETH's place and bytes, by hand-checked packets
//! and by a property over every XRC request opcode.

use proptest::prelude::*;

use crate::wire::icrc::{self, IcrcIp};
use crate::wire::opcode::{flags, ALL_OPCODES};
use crate::wire::packet::emit_packet;
use crate::wire::{Bth, Headers, Opcode, Packet, Reth, Service, WireError, MAX_PACKET};
use crate::Psn;
use std::net::Ipv4Addr;

fn bth(op: Opcode, qpn: u32, psn: u32) -> Bth {
    Bth {
        opcode: op,
        pkey: 0xffff,
        dest_qpn: qpn,
        ack_req: true,
        psn: Psn::new(psn),
        ..Bth::default()
    }
}

/// Emits, fills the ICRC for 127.0.0.1 -> 127.0.0.2 (IP ID 0), returns
/// the bytes.
fn packet(hdr: &Headers, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_PACKET];
    let n = emit_packet(hdr, payload, &mut buf).expect("emit");
    buf.truncate(n);
    let ip = IcrcIp::v4(Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    icrc::fill_icrc(&ip, 0xc001, 4791, &mut buf).expect("icrc");
    icrc::verify(&ip, 0xc001, 4791, &buf).expect("verifies");
    buf
}

#[test]
fn xrc_send_only_bytes() {
    let hdr = Headers {
        bth: bth(Opcode::XRC_SEND_ONLY, 0x000123, 0x00abcd),
        xrceth: Some(0x00_0042),
        ..Headers::default()
    };
    let b = packet(&hdr, b"hi");
    // BTH: opcode 0xA4, SE/M/pad 2/tver 0, pkey, reserved, QPN, A + PSN.
    let want_head: [u8; 16] = [
        0xa4, 0x20, 0xff, 0xff, 0x00, 0x00, 0x01, 0x23, 0x80, 0x00, 0xab, 0xcd,
        // XRCETH: 8 reserved bits, XRC SRQ number 0x000042.
        0x00, 0x00, 0x00, 0x42,
    ];
    assert_eq!(&b[..16], &want_head);
    assert_eq!(&b[16..20], b"hi\0\0", "payload then 2 pad bytes");
    assert_eq!(b.len(), 16 + 4 + 4);
    let p = Packet::parse(&b).unwrap();
    assert_eq!(p.hdr.xrceth, Some(0x42));
    assert_eq!(p.payload, b"hi");
}

#[test]
fn xrc_write_only_puts_xrceth_before_reth() {
    let hdr = Headers {
        bth: bth(Opcode::XRC_WRITE_ONLY, 0x000777, 1),
        xrceth: Some(0xfe_dcba),
        reth: Some(Reth {
            va: 0x1122_3344_5566_7788,
            rkey: 0x99aa_bbcc,
            dma_len: 4,
        }),
        ..Headers::default()
    };
    let b = packet(&hdr, &[1, 2, 3, 4]);
    assert_eq!(b[0], 0xaa);
    assert_eq!(
        &b[12..16],
        &[0x00, 0xfe, 0xdc, 0xba],
        "XRCETH right after BTH"
    );
    assert_eq!(
        &b[16..32],
        &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0, 0, 0, 4],
        "then the RETH"
    );
    assert_eq!(&b[32..36], &[1, 2, 3, 4]);
    assert_eq!(b.len(), 12 + 4 + 16 + 4 + 4);
    // The ICRC is the one the existing code computes over these bytes.
    let ip = IcrcIp::v4(Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    let crc = icrc::icrc(&ip, 0xc001, 4791, &b[..b.len() - 4]);
    assert_eq!(&b[b.len() - 4..], &crc.to_le_bytes());
    assert_eq!(Packet::parse(&b).unwrap().hdr, hdr);
}

#[test]
fn reserved_bits_of_a_received_xrceth_are_ignored_and_big_numbers_refused() {
    let hdr = Headers {
        bth: bth(Opcode::XRC_SEND_ONLY, 1, 1),
        xrceth: Some(5),
        ..Headers::default()
    };
    let mut b = packet(&hdr, &[]);
    b[12] = 0xff;
    assert_eq!(Packet::parse(&b).unwrap().hdr.xrceth, Some(5));
    let bad = Headers {
        xrceth: Some(1 << 24),
        ..hdr
    };
    let mut buf = vec![0u8; MAX_PACKET];
    assert!(matches!(
        emit_packet(&bad, &[], &mut buf),
        Err(WireError::Inconsistent(..))
    ));
    let missing = Headers {
        xrceth: None,
        ..hdr
    };
    assert!(emit_packet(&missing, &[], &mut buf).is_err());
}

fn xrc_requests() -> Vec<Opcode> {
    ALL_OPCODES
        .iter()
        .copied()
        .filter(|o| o.service() == Service::Xrc && o.info().unwrap().has(flags::REQUEST))
        .collect()
}

proptest! {
    /// Every XRC request is its RC twin with 4 bytes inserted after the
    /// BTH: 0, then the SRQ number.
    #[test]
    fn xrc_request_is_rc_plus_xrceth(
        i in 0..xrc_requests().len(),
        srqn in 0..1u32 << 24,
        qpn in 0..1u32 << 24,
        psn in 0..1u32 << 24,
        imm in any::<u32>(),
        va in any::<u64>(),
        len in 0..64usize,
    ) {
        let op = xrc_requests()[i];
        let info = op.info().unwrap();
        let rc_op = op.on_service(Service::Rc);
        let n = if info.has(flags::PAYLOAD) { len } else { 0 };
        let payload: Vec<u8> = (0..n).map(|k| k as u8).collect();
        let mut rc = Headers {
            bth: bth(rc_op, qpn, psn),
            reth: info.has(flags::RETH).then_some(Reth { va, rkey: imm, dma_len: n as u32 }),
            atomic_eth: info.has(flags::ATOMIC_ETH).then_some(crate::wire::AtomicEth {
                va, rkey: imm, swap_add: va ^ 1, compare: va ^ 2,
            }),
            imm: info.has(flags::IMM).then_some(imm),
            ieth: info.has(flags::IETH).then_some(imm),
            ..Headers::default()
        };
        let mut a = vec![0u8; MAX_PACKET];
        let an = emit_packet(&rc, &payload, &mut a).unwrap();
        rc.bth.opcode = op;
        rc.xrceth = Some(srqn);
        let mut x = vec![0u8; MAX_PACKET];
        let xn = emit_packet(&rc, &payload, &mut x).unwrap();
        prop_assert_eq!(xn, an + 4);
        prop_assert_eq!(x[0], op.0);
        prop_assert_eq!(&x[1..12], &a[1..12]);
        prop_assert_eq!(&x[12..16], &srqn.to_be_bytes()[..]);
        prop_assert_eq!(&x[16..xn], &a[12..an]);
        let p = Packet::parse(&x[..xn]).unwrap();
        rc.bth.pad = crate::wire::pad_for(n);
        prop_assert_eq!(p.hdr, rc);
    }
}
