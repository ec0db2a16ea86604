//! `rxu decode` end to end: the built binary on real and constructed
//! captures, checking output lines and exit status.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;

fn vectors() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../transport/tests/vectors/reference"
    ))
    .to_path_buf()
}

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rxu-decode-{}-{name}", std::process::id()))
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn rxu_decode(file: &Path) -> Run {
    let o = Command::new(env!("CARGO_BIN_EXE_rxu"))
        .arg("decode")
        .arg(file)
        .output()
        .expect("run rxu");
    Run {
        code: o.status.code().expect("exited"),
        stdout: String::from_utf8(o.stdout).expect("utf-8"),
        stderr: String::from_utf8(o.stderr).expect("utf-8"),
    }
}

/// Frames of a vector capture (all Ethernet).
fn frames(name: &str) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(vectors().join(name)).expect("vector file");
    let mut r = PcapReader::new(f).expect("pcap");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.expect("packet").data.into_owned());
    }
    out
}

/// The rxe READ request and the ConnectX CNP, IP header onwards.
fn read_request_ip() -> Vec<u8> {
    frames("rxe_rc_read_request_ipv4.pcap")[0][14..].to_vec()
}
fn cnp_ip() -> Vec<u8> {
    frames("mlx_cx4lx_cnp_ipv4.pcap")[0][14..].to_vec()
}

/// A DNS-looking UDP packet: IP + UDP but not RoCE.
fn dns_ip() -> Vec<u8> {
    let mut ip = read_request_ip();
    ip[22..24].copy_from_slice(&53u16.to_be_bytes());
    ip
}

fn write_pcap(name: &str, datalink: DataLink, frames: &[Vec<u8>]) -> PathBuf {
    let header = PcapHeader {
        datalink,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).expect("writer");
    for f in frames {
        let p = PcapPacket::new(Duration::from_secs(1), f.len() as u32, f);
        w.write_packet(&p).expect("write");
    }
    let path = tmp(name);
    std::fs::write(&path, w.into_writer()).expect("write file");
    path
}

fn roce_lines(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|w| w.starts_with("RoCEv"))
        })
        .collect()
}

#[test]
fn verified_vectors_exit_0() {
    let r = rxu_decode(&vectors().join("all_hw_and_rxe_verified.pcap"));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let lines = roce_lines(&r.stdout);
    assert_eq!(lines.len(), 5, "{}", r.stdout);
    assert!(lines.iter().all(|l| l.ends_with("icrc=ok")), "{}", r.stdout);
    assert!(lines[0].contains("CNP qpn=0x000118"));
    assert!(lines[1].contains("RC_ACKNOWLEDGE") && lines[1].contains("aeth(ack credit=0 msn=1"));
    assert!(lines[4].contains("reth(va=0x7fee260fb000 rkey=0x000002b8 len=65536)"));
    assert!(r.stdout.contains(
        "summary: 5 frames: 3 RoCEv2, 2 RoCEv1, 0 other (skipped); 0 bad ICRC, 0 malformed"
    ));
}

#[test]
fn every_vector_file_decodes_clean() {
    for e in std::fs::read_dir(vectors()).expect("vectors dir") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "pcap") {
            let r = rxu_decode(&p);
            assert_eq!(r.code, 0, "{}: {}{}", p.display(), r.stdout, r.stderr);
            assert!(!r.stdout.contains("BAD") && !r.stdout.contains("MALFORMED"));
        }
    }
}

#[test]
fn one_flipped_byte_exits_1() {
    let mut bytes = std::fs::read(vectors().join("all_hw_and_rxe_verified.pcap")).expect("read");
    // First frame (the CNP): global header 24, record header 16, Ethernet 14,
    // IPv4 20, UDP 8; byte 10 of the BTH is in the PSN.
    bytes[24 + 16 + 14 + 20 + 8 + 10] ^= 0x01;
    let path = tmp("flipped.pcap");
    std::fs::write(&path, &bytes).expect("write");
    let r = rxu_decode(&path);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let lines = roce_lines(&r.stdout);
    assert_eq!(lines.len(), 5);
    assert!(
        lines[0].contains("psn=256 ") && lines[0].contains("icrc=BAD"),
        "{}",
        lines[0]
    );
    assert!(lines[1..].iter().all(|l| l.ends_with("icrc=ok")));
    assert!(r.stdout.contains("1 bad ICRC"));
}

#[test]
fn linux_cooked_sll_and_sll2() {
    let mut sll = vec![0u8, 0, 0, 1, 0, 6, 0, 0x0c, 0x29, 0x89, 0xa2, 0xe5, 0, 0];
    sll.extend_from_slice(&0x0800u16.to_be_bytes());
    let frame = |ip: Vec<u8>| [sll.clone(), ip].concat();
    let path = write_pcap(
        "sll.pcap",
        DataLink::LINUX_SLL,
        &[frame(read_request_ip()), frame(dns_ip())],
    );
    let r = rxu_decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(roce_lines(&r.stdout).len(), 1);
    assert!(r.stdout.contains("RC_RDMA_READ_REQUEST"));
    assert!(r
        .stdout
        .contains("2 frames: 1 RoCEv2, 0 RoCEv1, 1 other (skipped)"));

    let mut sll2 = 0x0800u16.to_be_bytes().to_vec();
    sll2.resize(20, 0);
    let path = write_pcap(
        "sll2.pcap",
        DataLink::LINUX_SLL2,
        &[[sll2, cnp_ip()].concat()],
    );
    let r = rxu_decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(roce_lines(&r.stdout)[0].contains("CNP"));
}

#[test]
fn stacked_vlan_tags_and_raw_ip() {
    let mut eth = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    eth.extend_from_slice(&[0x88, 0xa8, 0x00, 0x64]); // 802.1ad, VID 100
    eth.extend_from_slice(&[0x81, 0x00, 0x60, 0x05]); // 802.1Q, PCP 3, VID 5
    eth.extend_from_slice(&[0x08, 0x00]);
    let qinq = [eth, cnp_ip()].concat();
    let path = write_pcap("vlan.pcap", DataLink::ETHERNET, std::slice::from_ref(&qinq));
    let r = rxu_decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(roce_lines(&r.stdout)[0].contains("10.0.17.1:0 -> 10.0.18.1:4791 CNP"));

    let path = write_pcap("raw.pcap", DataLink::RAW, &[read_request_ip(), cnp_ip()]);
    let r = rxu_decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(roce_lines(&r.stdout).len(), 2);

    // The same VLAN frame with a corrupted ICRC fails.
    let mut bad = qinq;
    let last = bad.len() - 1;
    bad[last] ^= 0x80;
    let path = write_pcap("vlan-bad.pcap", DataLink::ETHERNET, &[bad]);
    assert_eq!(rxu_decode(&path).code, 1);
}

#[test]
fn pcapng_with_two_link_types() {
    let mut w = PcapNgWriter::new(Vec::new()).expect("writer");
    for lt in [DataLink::ETHERNET, DataLink::RAW] {
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: lt,
            snaplen: 0,
            options: vec![],
        })
        .expect("idb");
    }
    let eth = frames("mlx_rc_ack_ipv6_vlan.pcap").remove(0);
    for (iface, data) in [(0u32, eth), (1, read_request_ip()), (1, dns_ip())] {
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: iface,
            timestamp: Duration::from_secs(1),
            original_len: data.len() as u32,
            data: Cow::Owned(data),
            options: vec![],
        })
        .expect("epb");
    }
    let path = tmp("two.pcapng");
    std::fs::write(&path, w.into_inner()).expect("write");
    let r = rxu_decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let lines = roce_lines(&r.stdout);
    assert_eq!(lines.len(), 2, "{}", r.stdout);
    assert!(lines[0].contains("[2000:11:237:0:9a03:9bff:fe99:5142]:49570"));
    assert!(lines[1].contains("RC_RDMA_READ_REQUEST"));
    assert!(r.stdout.contains("3 frames: 2 RoCEv2, 0 RoCEv1, 1 other"));
}

#[test]
fn snapped_roce_packet_is_malformed() {
    let mut ip = read_request_ip();
    ip.truncate(40); // as with a small tcpdump -s
    let path = write_pcap("snapped.pcap", DataLink::RAW, &[ip]);
    let r = rxu_decode(&path);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout.contains("MALFORMED: truncated packet"),
        "{}",
        r.stdout
    );
}

#[test]
fn truncated_capture_warns_but_reports() {
    let path = write_pcap("cut.pcap", DataLink::RAW, &[read_request_ip(), cnp_ip()]);
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..bytes.len() - 10]).expect("write");
    let r = rxu_decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(roce_lines(&r.stdout).len(), 1);
    assert!(r.stdout.contains("capture truncated"));
    assert!(r.stderr.contains("warning"));
}

#[test]
fn unreadable_files_exit_2() {
    let r = rxu_decode(&tmp("does-not-exist.pcap"));
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("does-not-exist.pcap"), "{}", r.stderr);

    let garbage = tmp("garbage.pcap");
    std::fs::write(&garbage, b"this is not a capture file at all").expect("write");
    let r = rxu_decode(&garbage);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("not a pcap or pcapng file"),
        "{}",
        r.stderr
    );

    let empty = tmp("empty.pcap");
    std::fs::write(&empty, b"").expect("write");
    assert_eq!(rxu_decode(&empty).code, 2);

    // A pcap magic with a cut-off header.
    let short = tmp("short.pcap");
    std::fs::write(&short, [0xd4, 0xc3, 0xb2, 0xa1, 2, 0]).expect("write");
    let r = rxu_decode(&short);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);

    // A directory.
    assert_eq!(rxu_decode(&vectors()).code, 2);
}

/// A UDP GSO datagram as a capture on `lo` shows it: one IPv4 frame with
/// three RoCE packets (two of 4 KiB, a shorter last one) whose ICRCs were
/// computed for the datagrams they become (own lengths, IP ID + index).
fn gso_frame(corrupt: bool) -> Vec<u8> {
    use std::net::Ipv4Addr;
    use transport::wire::icrc::{fill_icrc, IcrcIp};
    use transport::wire::ip::{Ipv4Header, UdpHeader};
    use transport::wire::packet::emit_packet;
    use transport::wire::{Bth, Headers, Opcode};
    use transport::Psn;
    let (src, dst) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    let first_id = 0x1234u16;
    let mut body = Vec::new();
    for (k, (op, len)) in [
        (Opcode::RC_WRITE_MIDDLE, 4096),
        (Opcode::RC_WRITE_MIDDLE, 4096),
        (Opcode::RC_WRITE_LAST, 1000),
    ]
    .into_iter()
    .enumerate()
    {
        let hdr = Headers {
            bth: Bth {
                opcode: op,
                dest_qpn: 0x11,
                psn: Psn::new(500 + k as u32),
                ..Bth::default()
            },
            ..Headers::default()
        };
        let payload: Vec<u8> = (0..len).map(|i| (i * 3 + k) as u8).collect();
        let mut pkt = vec![0u8; 4200];
        let n = emit_packet(&hdr, &payload, &mut pkt).expect("emit");
        pkt.truncate(n);
        let ip = IcrcIp::V4 {
            src,
            dst,
            id: first_id + k as u16,
            flags_frag: 0x4000,
        };
        fill_icrc(&ip, 4791, 4791, &mut pkt).expect("icrc");
        body.extend_from_slice(&pkt);
    }
    if corrupt {
        body[5000] ^= 1;
    }
    let mut v4 = Ipv4Header::roce(src, dst, body.len(), 0, 64);
    v4.id = first_id;
    let mut frame = vec![0u8; 28];
    v4.emit(&mut frame[..20]).expect("ip");
    UdpHeader {
        src_port: 4791,
        dst_port: 4791,
        len: (8 + body.len()) as u16,
        checksum: 0,
    }
    .emit(&mut frame[20..28])
    .expect("udp");
    frame.extend_from_slice(&body);
    frame
}

#[test]
fn gso_datagram_captured_before_segmentation_is_split() {
    let path = write_pcap("gso.pcap", DataLink::IPV4, &[gso_frame(false)]);
    let r = rxu_decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let lines = roce_lines(&r.stdout);
    assert_eq!(lines.len(), 3, "{}", r.stdout);
    for (k, (l, psn)) in lines.iter().zip([500, 501, 502]).enumerate() {
        assert!(l.trim_start().starts_with(&format!("1.{k} ")), "{l}");
        assert!(l.contains(&format!("psn={psn} ")), "{l}");
        assert!(l.ends_with("icrc=ok"), "{l}");
    }
    assert!(lines[2].contains("RC_RDMA_WRITE_LAST") && lines[2].contains("len=1000"));
    // A flipped bit in the second packet: no split verifies, the frame is
    // reported as it is and the run fails.
    let path = write_pcap("gso-bad.pcap", DataLink::IPV4, &[gso_frame(true)]);
    let r = rxu_decode(&path);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(roce_lines(&r.stdout).len(), 1, "{}", r.stdout);
}

/// A RoCEv2 UD SEND_ONLY from 10.0.0.1 to `dest_qpn` at 10.0.0.2 with
/// `payload`, IP header onwards, valid ICRC.
fn ud_send_ip(dest_qpn: u32, qkey: u32, payload: &[u8]) -> Vec<u8> {
    use std::net::Ipv4Addr;
    use transport::wire::icrc::{fill_icrc, IcrcIp};
    use transport::wire::ip::{Ipv4Header, UdpHeader, IPV4_DF};
    use transport::wire::packet::emit_packet;
    use transport::wire::{Bth, Deth, Headers, Opcode};
    use transport::Psn;
    let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let hdr = Headers {
        bth: Bth {
            opcode: Opcode::UD_SEND_ONLY,
            dest_qpn,
            psn: Psn::new(3),
            ..Bth::default()
        },
        deth: Some(Deth { qkey, src_qpn: 1 }),
        ..Headers::default()
    };
    let mut pkt = vec![0u8; 512];
    let n = emit_packet(&hdr, payload, &mut pkt).expect("emit");
    pkt.truncate(n);
    let ip = IcrcIp::V4 {
        src,
        dst,
        id: 0,
        flags_frag: IPV4_DF,
    };
    fill_icrc(&ip, 49152, 4791, &mut pkt).expect("icrc");
    let mut frame = vec![0u8; 28];
    Ipv4Header::roce(src, dst, pkt.len(), 0, 64)
        .emit(&mut frame[..20])
        .expect("ip");
    UdpHeader {
        src_port: 49152,
        dst_port: 4791,
        len: (8 + pkt.len()) as u16,
        checksum: 0,
    }
    .emit(&mut frame[20..28])
    .expect("udp");
    frame.extend_from_slice(&pkt);
    frame
}

#[test]
fn cm_mads_to_qp1_are_named() {
    use rxu_cm::wire::*;
    let mut private_data = [0u8; REQ_PRIVATE];
    CmaHeader {
        src_port: 40000,
        src: "10.0.0.1".parse().unwrap(),
        dst: "10.0.0.2".parse().unwrap(),
    }
    .emit(&mut private_data)
    .unwrap();
    let req = CmMad {
        tid: 0x1122_3344,
        attr_mod: 0,
        msg: CmMsg::Req(Box::new(Req {
            local_comm_id: 0x1122_3344,
            vendor_id: 0,
            service_id: service_id(0x0106, 7174),
            local_ca_guid: 0x0200_00ff_fe00_0001,
            local_qkey: 0,
            local_qpn: 0x11,
            responder_resources: 1,
            local_eecn: 0,
            initiator_depth: 1,
            remote_eecn: 0,
            remote_cm_response_timeout: 20,
            transport_type: 0,
            flow_control: true,
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
            private_data,
        })),
    };
    let rej = CmMad {
        tid: 0x1122_3344,
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
    let mad = |m: &CmMad| {
        let mut b = [0u8; MAD_LEN];
        emit(m, &mut b);
        b
    };
    // A performance-management MAD to QP1: not CM.
    let mut perf = mad(&rej);
    perf[1] = 0x04;
    let path = write_pcap(
        "cm.pcap",
        DataLink::RAW,
        &[
            ud_send_ip(GSI_QPN, GSI_QKEY, &mad(&req)),
            ud_send_ip(GSI_QPN, GSI_QKEY, &mad(&rej)),
            ud_send_ip(GSI_QPN, GSI_QKEY, &perf),
            // The same bytes to an application's UD QP: not decoded as CM.
            ud_send_ip(0x22, 0x0123_4567, &mad(&req)),
        ],
    );
    let r = rxu_decode(&path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let lines = roce_lines(&r.stdout);
    assert_eq!(lines.len(), 4, "{}", r.stdout);
    assert!(lines.iter().all(|l| l.ends_with("icrc=ok")), "{}", r.stdout);
    assert!(
        lines[0].contains(
            "UD_SEND_ONLY qpn=0x000001 psn=3 ackreq=0 se=0 m=0 pad=0 len=256 \
             deth(qkey=0x80010000 srcqp=0x000001) CM REQ lcid=0x11223344 \
             sid=0x0000000001061c06 (TCP port 7174) qpn=0x000011 psn=0x000abc"
        ),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains(
            "CM REJ lcid=0x00000000 rcid=0x11223344 rejected=REQ reason=8 (invalid service ID)"
        ),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].contains("CM ? (management class 0x04 is not CM (0x07)) icrc=ok"),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].contains("qpn=0x000022") && !lines[3].contains(" CM "),
        "{}",
        lines[3]
    );
}
