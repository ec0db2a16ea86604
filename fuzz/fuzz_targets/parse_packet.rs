//! Feeds arbitrary bytes to every wire parser and the ICRC functions. Any
//! panic is a bug. Also checks that whatever parses survives emit -> parse.
#![no_main]

use std::net::Ipv4Addr;

use libfuzzer_sys::fuzz_target;
use transport::wire::icrc::{self, IcrcIp};
use transport::wire::ip::{IpHeader, IpUdp, Ipv4Header, Ipv6Header, UdpHeader, IPV4_DF};
use transport::wire::packet::emit_packet;
use transport::wire::{pad_for, Bth, Headers, Packet, MAX_PACKET};

fuzz_target!(|data: &[u8]| {
    // As a UDP payload (what the engine receives).
    let _ = Bth::parse(data);
    let _ = Headers::parse(data);
    if let Ok(p) = Packet::parse(data) {
        // Re-emitting the parsed packet must parse back to the same thing.
        let mut buf = vec![0u8; MAX_PACKET];
        let n = emit_packet(&p.hdr, p.payload, &mut buf).expect("parsed packet re-emits");
        let q = Packet::parse(&buf[..n]).expect("re-emitted packet parses");
        // emit derives the pad count from the payload length; the parser
        // accepts any pad count that fits.
        let mut want = p.hdr;
        want.bth.pad = pad_for(p.payload.len());
        assert_eq!(want, q.hdr);
        assert_eq!(p.payload, q.payload);
    }
    let a = Ipv4Addr::new(10, 0, 0, 1);
    let b = Ipv4Addr::new(10, 0, 0, 2);
    let _ = icrc::verify(&IcrcIp::v4(a, b), 49152, 4791, data);
    let _ = icrc::verify_v4_unknown_id(a, b, IPV4_DF, 49152, 4791, data);
    let _ = icrc::icrc(
        &IcrcIp::v6(a.to_ipv6_mapped(), b.to_ipv6_mapped()),
        1,
        4791,
        data,
    );
    let mut m = data.to_vec();
    if icrc::fill_icrc(&IcrcIp::v4(a, b), 1, 4791, &mut m).is_ok() {
        icrc::verify(&IcrcIp::v4(a, b), 1, 4791, &m).expect("filled ICRC verifies");
    }

    // As a captured IP packet (what `rxu decode` sees) or a RoCE v1 GRH frame.
    let _ = IpHeader::parse(data);
    let _ = Ipv4Header::parse(data);
    let _ = Ipv6Header::parse(data);
    let _ = UdpHeader::parse(data);
    if let Ok(p) = IpUdp::parse(data) {
        let _ = icrc::icrc_ip_packet(&p);
        let _ = Packet::parse(p.payload);
        let mut grh = [0u8; 40];
        p.ip.write_grh(&mut grh).expect("40 bytes hold any GRH");
    }
    let _ = icrc::verify_ip_packet(data);
    let _ = icrc::verify_roce_v1(data);
});
