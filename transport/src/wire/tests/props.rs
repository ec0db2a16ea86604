//! emit -> parse round trips for every opcode, ICRC of emitted packets,
//! and "random bytes never panic" for every parser.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use crate::wire::icrc::{self, IcrcIp};
use crate::wire::ip::{IpHeader, IpUdp, Ipv4Header, Ipv6Header, UdpHeader};
use crate::wire::opcode::{flags, ALL_OPCODES};
use crate::wire::packet::emit_packet;
use crate::wire::{
    pad_for, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Feth, Headers, Opcode, Packet, Reth,
    MAX_PACKET, MAX_PAYLOAD,
};
use crate::Psn;

/// Random values for every field any opcode may carry.
#[derive(Clone, Debug)]
struct Fields {
    se: bool,
    mig_req: bool,
    pkey: u16,
    fecn: bool,
    becn: bool,
    dest_qpn: u32,
    ack_req: bool,
    psn: u32,
    reth: (u64, u32, u32),
    atomic: (u64, u32, u64, u64),
    aeth: (u8, u32),
    atomic_ack: u64,
    deth: (u32, u32),
    feth: (u8, u8),
    imm: u32,
    ieth: u32,
    xrc_srqn: u32,
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        (any::<bool>(), any::<bool>(), any::<u16>(), any::<bool>()),
        (any::<bool>(), 0..1u32 << 24, any::<bool>(), 0..1u32 << 24),
        (any::<(u64, u32, u32)>(), any::<(u64, u32, u64, u64)>()),
        (any::<u8>(), 0..1u32 << 24, any::<u64>()),
        (any::<u32>(), 0..1u32 << 24, 0..16u8, 0..4u8),
        (any::<u32>(), any::<u32>(), 0..1u32 << 24),
    )
        .prop_map(|(a, b, c, d, e, f)| Fields {
            se: a.0,
            mig_req: a.1,
            pkey: a.2,
            fecn: a.3,
            becn: b.0,
            dest_qpn: b.1,
            ack_req: b.2,
            psn: b.3,
            reth: c.0,
            atomic: c.1,
            aeth: (d.0, d.1),
            atomic_ack: d.2,
            deth: (e.0, e.1),
            feth: (e.2, e.3),
            imm: f.0,
            ieth: f.1,
            xrc_srqn: f.2,
        })
}

/// Headers for `op` with exactly the extension headers it needs.
fn headers(op: Opcode, f: &Fields) -> Headers {
    let info = op.info().expect("table opcode");
    let on = |flag: u32| info.has(flag);
    Headers {
        bth: Bth {
            opcode: op,
            se: f.se,
            mig_req: f.mig_req,
            pad: 0,
            tver: 0,
            pkey: f.pkey,
            fecn: f.fecn,
            becn: f.becn,
            dest_qpn: f.dest_qpn,
            ack_req: f.ack_req,
            psn: Psn::new(f.psn),
        },
        deth: on(flags::DETH).then_some(Deth {
            qkey: f.deth.0,
            src_qpn: f.deth.1,
        }),
        xrceth: on(flags::XRCETH).then_some(f.xrc_srqn),
        feth: on(flags::FETH).then_some(Feth {
            plt: f.feth.0,
            sel: f.feth.1,
        }),
        reth: on(flags::RETH).then_some(Reth {
            va: f.reth.0,
            rkey: f.reth.1,
            dma_len: f.reth.2,
        }),
        atomic_eth: on(flags::ATOMIC_ETH).then_some(AtomicEth {
            va: f.atomic.0,
            rkey: f.atomic.1,
            swap_add: f.atomic.2,
            compare: f.atomic.3,
        }),
        aeth: on(flags::AETH).then_some(Aeth {
            syndrome: f.aeth.0,
            msn: f.aeth.1,
        }),
        atomic_ack: on(flags::ATOMIC_ACK_ETH).then_some(AtomicAckEth { orig: f.atomic_ack }),
        imm: on(flags::IMM).then_some(f.imm),
        ieth: on(flags::IETH).then_some(f.ieth),
    }
}

/// Payload bytes `op` may carry: up to the path MTU, 16 for a CNP, else 0.
fn max_payload(op: Opcode) -> usize {
    let info = op.info().expect("table opcode");
    if info.has(flags::PAYLOAD) {
        MAX_PAYLOAD
    } else if info.has(flags::CNP) {
        16
    } else {
        0
    }
}

fn icrc_ip() -> impl Strategy<Value = IcrcIp> {
    prop_oneof![
        (any::<u32>(), any::<u32>(), any::<u16>(), any::<u16>()).prop_map(|(s, d, id, ff)| {
            IcrcIp::V4 {
                src: Ipv4Addr::from(s),
                dst: Ipv4Addr::from(d),
                id,
                flags_frag: ff,
            }
        }),
        (any::<u128>(), any::<u128>()).prop_map(|(s, d)| IcrcIp::V6 {
            src: Ipv6Addr::from(s),
            dst: Ipv6Addr::from(d),
        }),
    ]
}

/// Emits `op` with `payload`, fills the ICRC, parses it back and checks
/// every field and the ICRC.
fn round_trip(op: Opcode, f: &Fields, payload: &[u8], ip: &IcrcIp, sport: u16) {
    let hdr = headers(op, f);
    let mut buf = vec![0u8; MAX_PACKET];
    let n = emit_packet(&hdr, payload, &mut buf).expect("emit");
    let pkt = &mut buf[..n];
    icrc::fill_icrc(ip, sport, 4791, pkt).expect("fill");
    let p = Packet::parse(pkt).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    let mut want = hdr;
    want.bth.pad = pad_for(payload.len());
    assert_eq!(p.hdr, want, "{op:?}");
    assert_eq!(p.payload, payload, "{op:?}");
    assert_eq!(p.icrc, icrc::icrc(ip, sport, 4791, &pkt[..n - 4]));
    icrc::verify(ip, sport, 4791, pkt).expect("verify");
    if let IcrcIp::V4 {
        src,
        dst,
        id,
        flags_frag,
    } = *ip
    {
        assert_eq!(
            icrc::verify_v4_unknown_id(src, dst, flags_frag, sport, 4791, pkt),
            Ok(id)
        );
    }
    // The same packet behind real IP and UDP headers verifies as a capture.
    let mut frame = vec![0u8; 40 + 8 + n];
    let iph = match *ip {
        IcrcIp::V4 {
            src,
            dst,
            id,
            flags_frag,
        } => IpHeader::V4(Ipv4Header {
            id,
            flags_frag,
            ..Ipv4Header::roce(src, dst, n, f.pkey as u8, 64)
        }),
        IcrcIp::V6 { src, dst } => IpHeader::V6(Ipv6Header {
            flow_label: f.dest_qpn & 0xf_ffff,
            ..Ipv6Header::roce(src, dst, n, f.psn as u8, 1)
        }),
    };
    iph.emit(&mut frame).expect("ip");
    let hl = iph.len();
    let udp = UdpHeader {
        src_port: sport,
        dst_port: 4791,
        len: (8 + n) as u16,
        checksum: f.pkey,
    };
    udp.emit(&mut frame[hl..]).expect("udp");
    frame[hl + 8..hl + 8 + n].copy_from_slice(pkt);
    frame.truncate(hl + 8 + n);
    let cap = icrc::verify_ip_packet(&frame).expect("capture verifies");
    assert_eq!(cap.payload, &pkt[..]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every opcode in the table, each case with fresh field values.
    #[test]
    fn every_opcode_round_trips(
        f in fields(),
        len_seed in 0..=MAX_PAYLOAD,
        byte in any::<u8>(),
        ip in icrc_ip(),
        sport in any::<u16>(),
    ) {
        for &op in ALL_OPCODES {
            let len = len_seed.min(max_payload(op));
            let payload: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
            round_trip(op, &f, &payload, &ip, sport);
        }
    }

    /// Payload lengths across the whole range, including every pad count.
    #[test]
    fn payload_lengths_round_trip(
        op in prop::sample::select(ALL_OPCODES),
        f in fields(),
        payload in prop::collection::vec(any::<u8>(), 0..=MAX_PAYLOAD),
        ip in icrc_ip(),
    ) {
        let len = payload.len().min(max_payload(op));
        round_trip(op, &f, &payload[..len], &ip, 0xc000);
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn random_bytes_never_panic(
        b in prop::collection::vec(any::<u8>(), 0..600),
        ip in icrc_ip(),
    ) {
        exercise_parsers(&b, &ip);
    }

    /// Valid packets, then truncated and with bytes overwritten: reaches the
    /// deeper parser paths random bytes rarely get to.
    #[test]
    fn mutated_packets_never_panic(
        op in prop::sample::select(ALL_OPCODES),
        f in fields(),
        len in 0..200usize,
        cut in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        ip in icrc_ip(),
    ) {
        let payload = vec![0xa5u8; len.min(max_payload(op))];
        let mut buf = vec![0u8; 48 + MAX_PACKET];
        let iph = IpHeader::V4(Ipv4Header::roce(
            Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 0, 0, 64));
        let n = emit_packet(&headers(op, &f), &payload, &mut buf[28..]).expect("emit");
        let iph = match iph {
            IpHeader::V4(h) => IpHeader::V4(Ipv4Header { total_len: (28 + n) as u16, ..h }),
            other => other,
        };
        iph.emit(&mut buf).expect("ip");
        UdpHeader { src_port: 1, dst_port: 4791, len: (8 + n) as u16, checksum: 0 }
            .emit(&mut buf[20..]).expect("udp");
        buf.truncate(28 + n);
        for (at, v) in edits {
            let i = at.index(buf.len());
            buf[i] = v;
        }
        let keep = cut.index(buf.len() + 1);
        buf.truncate(keep);
        exercise_parsers(&buf, &ip);
        exercise_parsers(buf.get(28..).unwrap_or_default(), &ip);
    }
}

fn exercise_parsers(b: &[u8], ip: &IcrcIp) {
    let _ = Packet::parse(b);
    let _ = Headers::parse(b);
    let _ = Bth::parse(b);
    let _ = IpHeader::parse(b);
    let _ = Ipv4Header::parse(b);
    let _ = Ipv6Header::parse(b);
    let _ = UdpHeader::parse(b);
    if let Ok(p) = IpUdp::parse(b) {
        let _ = icrc::icrc_ip_packet(&p);
        let _ = Packet::parse(p.payload);
    }
    let _ = icrc::verify_ip_packet(b);
    let _ = icrc::verify_roce_v1(b);
    let _ = icrc::icrc_roce_v1(b);
    let _ = icrc::icrc(ip, 1, 2, b);
    let _ = icrc::verify(ip, 1, 2, b);
    let _ = icrc::verify_v4_unknown_id(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 0x4000, 1, 2, b);
    let mut m = b.to_vec();
    let _ = icrc::fill_icrc(ip, 1, 2, &mut m);
}
