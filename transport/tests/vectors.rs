//! Every real packet in transport/tests/vectors/reference decodes and its ICRC verifies;
//! flipping any covered bit breaks verification, flipping a masked field
//! does not; unknown IPv4 IDs of kernel rxe captures are recovered.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use transport::wire::icrc::{self, IcrcIp};
use transport::wire::ip::{IpHeader, IpUdp, IPV4_DF};
use transport::wire::{Opcode, Packet, WireError, ICRC_LEN};

fn vectors_dir() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/reference"
    ))
    .to_path_buf()
}

/// Link type and frames of a classic pcap file (either byte order).
fn read_pcap(path: &Path) -> (u32, Vec<Vec<u8>>) {
    let d = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(d.len() >= 24, "{}: short pcap", path.display());
    let le = match d[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => panic!("{}: not a classic pcap", path.display()),
    };
    let u32at = |b: &[u8], at: usize| {
        let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let linktype = u32at(&d, 20);
    let mut frames = Vec::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32at(&d, off + 8) as usize;
        let start = off + 16;
        assert!(start + incl <= d.len(), "{}: truncated", path.display());
        frames.push(d[start..start + incl].to_vec());
        off = start + incl;
    }
    (linktype, frames)
}

/// What follows the Ethernet header (and any VLAN tags): EtherType, offset.
fn ethertype(frame: &[u8]) -> (u16, usize) {
    let mut at = 12;
    loop {
        let et = u16::from_be_bytes([frame[at], frame[at + 1]]);
        if et == 0x8100 || et == 0x88a8 {
            at += 4;
        } else {
            return (et, at + 2);
        }
    }
}

enum Roce {
    V2(usize),
    V1(usize),
}

fn classify(frame: &[u8]) -> Option<Roce> {
    match ethertype(frame) {
        (0x0800 | 0x86dd, at) => Some(Roce::V2(at)),
        (0x8915, at) => Some(Roce::V1(at)),
        _ => None,
    }
}

/// All Ethernet pcaps of the vectors directory: (file name, frames).
fn ethernet_captures() -> Vec<(String, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    let dir = vectors_dir();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    names.sort();
    for p in names {
        let (lt, frames) = read_pcap(&p);
        if lt == 1 {
            out.push((
                p.file_name().unwrap().to_string_lossy().into_owned(),
                frames,
            ));
        } else {
            // Only the native-IB ERF sample (link type 197) is not Ethernet.
            assert_eq!(lt, 197, "{}", p.display());
        }
    }
    out
}

fn check_v2(ip_packet: &[u8]) -> Result<Opcode, WireError> {
    let p = icrc::verify_ip_packet(ip_packet)?;
    if !p.is_roce_v2() {
        return Err(WireError::NotRoce("port"));
    }
    Ok(Packet::parse(p.payload)?.opcode())
}

fn check_v1(grh_on: &[u8]) -> Result<Opcode, WireError> {
    icrc::verify_roce_v1(grh_on)?;
    let ib = grh_on.get(icrc::ROCE_V1_GRH_LEN..).unwrap_or_default();
    Ok(Packet::parse(ib)?.opcode())
}

#[test]
fn every_real_packet_decodes_and_verifies() {
    let mut total = 0;
    let mut v1 = 0;
    let mut per_file = Vec::new();
    for (name, frames) in ethernet_captures() {
        let mut ops = BTreeSet::new();
        for (i, f) in frames.iter().enumerate() {
            let r = match classify(f).expect("every frame is RoCE") {
                Roce::V2(at) => check_v2(&f[at..]),
                Roce::V1(at) => {
                    v1 += 1;
                    check_v1(&f[at..])
                }
            };
            let op = r.unwrap_or_else(|e| panic!("{name} frame {}: {e}", i + 1));
            ops.insert(op.0);
            total += 1;
        }
        per_file.push((name, ops));
    }
    assert_eq!(total, 74, "frames in the vector set");
    assert_eq!(v1, 4);
    // The opcodes the README lists for the kernel rxe captures.
    let expect = |name: &str, ops: &[u8]| {
        let got = &per_file.iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(
            got,
            &ops.iter().copied().collect::<BTreeSet<u8>>(),
            "{name}"
        );
    };
    expect("rxe-kernel-zoo-nak-access.pcap", &[0x0a, 0x11]);
    expect("rxe-kernel-zoo-nak-len.pcap", &[0x04, 0x11]);
    expect(
        "rxe-kernel-zoo-read-atomic.pcap",
        &[0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x12, 0x13, 0x14],
    );
    expect("rxe-kernel-zoo-rnr-nak.pcap", &[0x04, 0x11]);
    expect(
        "rxe-kernel-zoo-send-imm.pcap",
        &[0x00, 0x01, 0x03, 0x04, 0x05, 0x11],
    );
    expect("rxe-kernel-zoo-send-inv.pcap", &[0x17, 0x11]);
    expect(
        "rxe-kernel-zoo-uc.pcap",
        // The README's "0x20-0x2b" is a range; 0x23 and 0x29 are not in it.
        &[0x20, 0x21, 0x22, 0x24, 0x25, 0x26, 0x27, 0x28, 0x2a, 0x2b],
    );
    expect("rxe-kernel-zoo-ud-imm.pcap", &[0x64, 0x65]);
    expect(
        "rxe-kernel-zoo-write-imm.pcap",
        &[0x06, 0x07, 0x08, 0x09, 0x0b, 0x11],
    );
    expect("mlx_cx4lx_cnp_ipv4.pcap", &[0x81]);
}

/// Offsets (from the IP header) of bytes the ICRC masks, and the bit mask.
fn masked_v2(ip: &IpHeader, bth_at: usize) -> Vec<(usize, u8)> {
    let mut m = match ip {
        IpHeader::V4(_) => vec![
            (1, 0xff),
            (8, 0xff),
            (10, 0xff),
            (11, 0xff),
            (26, 0xff),
            (27, 0xff),
        ],
        IpHeader::V6(_) => vec![
            (0, 0x0f),
            (1, 0xff),
            (2, 0xff),
            (3, 0xff),
            (7, 0xff),
            (46, 0xff),
            (47, 0xff),
        ],
    };
    m.push((bth_at + 4, 0xff));
    m
}

fn mask_at(masked: &[(usize, u8)], i: usize) -> u8 {
    masked.iter().find(|(o, _)| *o == i).map_or(0, |(_, m)| *m)
}

#[test]
fn flipping_any_covered_bit_fails_and_masked_bits_do_not() {
    let mut covered_flips = 0u64;
    let mut masked_flips = 0u64;
    for (name, frames) in ethernet_captures() {
        for (n, f) in frames.iter().enumerate() {
            let (at, v1) = match classify(f).unwrap() {
                Roce::V2(at) => (at, false),
                Roce::V1(at) => (at, true),
            };
            let mut pkt = f[at..].to_vec();
            let (len, masked) = if v1 {
                let grh_masks = vec![
                    (0, 0x0f),
                    (1, 0xff),
                    (2, 0xff),
                    (3, 0xff),
                    (7, 0xff),
                    (44, 0xff),
                ];
                (pkt.len(), grh_masks)
            } else {
                let p = IpUdp::parse(&pkt).unwrap();
                let len = p.ip_bytes.len() + p.udp.len as usize;
                (len, masked_v2(&p.ip, p.ip_bytes.len() + 8))
            };
            let check = |b: &[u8]| if v1 { check_v1(b) } else { check_v2(b) };
            for i in 0..len {
                let m = mask_at(&masked, i);
                for bit in 0..8 {
                    let flip = 1u8 << bit;
                    pkt[i] ^= flip;
                    let r = check(&pkt);
                    if m & flip != 0 {
                        assert!(
                            r.is_ok(),
                            "{name} #{} byte {i} bit {bit} is masked: {r:?}",
                            n + 1
                        );
                        masked_flips += 1;
                    } else {
                        assert!(
                            r.is_err(),
                            "{name} #{} byte {i} bit {bit} is covered",
                            n + 1
                        );
                        covered_flips += 1;
                    }
                    pkt[i] ^= flip;
                }
            }
            // Whole masked fields set to arbitrary values still verify.
            for &(i, m) in &masked {
                pkt[i] ^= m;
            }
            check(&pkt).unwrap_or_else(|e| panic!("{name} #{}: all masks: {e}", n + 1));
        }
    }
    assert!(covered_flips > 150_000, "{covered_flips}");
    assert!(masked_flips > 2_000, "{masked_flips}");
}

/// Kernel rxe picks IPv4 IDs the receiver cannot see; recover them from the
/// ICRC alone, and reject corrupted payloads.
#[test]
fn unknown_ipv4_ids_of_rxe_captures_are_recovered() {
    let mut nonzero = 0;
    let mut frames_seen = 0;
    for (name, frames) in ethernet_captures() {
        for (n, f) in frames.iter().enumerate() {
            let Some(Roce::V2(at)) = classify(f) else {
                continue;
            };
            let p = IpUdp::parse(&f[at..]).unwrap();
            let IpHeader::V4(h) = p.ip else { continue };
            assert_eq!(h.flags_frag, IPV4_DF, "{name}");
            let (s, d, sp, dp) = (h.src, h.dst, p.udp.src_port, p.udp.dst_port);
            let got = icrc::verify_v4_unknown_id(s, d, IPV4_DF, sp, dp, p.payload);
            assert_eq!(got, Ok(h.id), "{name} #{}", n + 1);
            nonzero += usize::from(h.id != 0);
            frames_seen += 1;
            // With the ID zeroed the plain verify fails (the ID is covered),
            // yet the unknown-ID verify still finds the real one.
            let zero = IcrcIp::v4(s, d);
            assert!(icrc::verify(&zero, sp, dp, p.payload).is_err());
            // Every single-bit corruption of the IB part is rejected.
            let mut ib = p.payload.to_vec();
            for i in 0..ib.len() {
                if i == 4 {
                    continue; // masked BTH byte
                }
                for bit in 0..8 {
                    ib[i] ^= 1 << bit;
                    let r = icrc::verify_v4_unknown_id(s, d, IPV4_DF, sp, dp, &ib);
                    assert!(
                        matches!(r, Err(WireError::BadIcrc { .. })),
                        "{name} #{} byte {i} bit {bit}: {r:?}",
                        n + 1
                    );
                    ib[i] ^= 1 << bit;
                }
            }
            // A whole payload byte replaced (the usual corruption) too.
            let mid = ib.len() - ICRC_LEN - 1;
            ib[mid] = !ib[mid];
            assert!(icrc::verify_v4_unknown_id(s, d, IPV4_DF, sp, dp, &ib).is_err());
        }
    }
    assert!(frames_seen >= 64, "{frames_seen}");
    assert!(nonzero >= 64, "{nonzero}");
}

/// The engine's view: recompute from addresses and ports and compare with
/// the ICRC the hardware or kernel put on the wire.
#[test]
fn engine_api_reproduces_wire_icrcs() {
    for (name, frames) in ethernet_captures() {
        for f in &frames {
            let Some(Roce::V2(at)) = classify(f) else {
                continue;
            };
            let p = IpUdp::parse(&f[at..]).unwrap();
            let ip = IcrcIp::from_header(&p.ip);
            let mut pkt = p.payload.to_vec();
            let wire = pkt[pkt.len() - 4..].to_vec();
            pkt[p.payload.len() - 4..].fill(0);
            let c = icrc::fill_icrc(&ip, p.udp.src_port, p.udp.dst_port, &mut pkt).unwrap();
            assert_eq!(&pkt[pkt.len() - 4..], &wire[..], "{name}");
            assert_eq!(c.to_le_bytes().to_vec(), wire);
            icrc::verify(&ip, p.udp.src_port, p.udp.dst_port, &pkt).unwrap();
        }
    }
}
