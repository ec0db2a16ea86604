//! One frame -> one verdict and, for RoCE, one line of text.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use transport::wire::icrc::{self, ROCE_V1_GRH_LEN};
use transport::wire::ip::{IpHeader, IpUdp, UdpHeader, IPPROTO_UDP};
use transport::wire::{AethKind, Headers, NakCode, Packet, WireError, ROCE_V2_PORT};

use super::link::Network;

/// What a frame turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not RoCE.
    Other,
    /// RoCE, parsed, ICRC good.
    Good,
    /// RoCE, parsed, ICRC wrong.
    BadIcrc,
    /// RoCE (by port or EtherType) but the packet does not parse.
    Malformed,
}

/// RoCE flavour of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    V1,
    V2,
}

/// The analysis of one frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameReport {
    pub verdict: Verdict,
    pub flavour: Option<Flavour>,
    /// The line to print (RoCE frames only), without a newline.
    pub line: Option<String>,
}

impl FrameReport {
    fn other() -> Self {
        FrameReport {
            verdict: Verdict::Other,
            flavour: None,
            line: None,
        }
    }
}

/// Analyses a frame whose network layer is `net`; `number` is its 1-based
/// position in the capture.
pub fn analyze(number: u64, net: Network<'_>) -> FrameReport {
    match net {
        Network::Ip(ip) => analyze_v2(number, ip),
        Network::RoceV1(grh) => analyze_v1(number, grh),
        Network::Other => FrameReport::other(),
    }
}

fn analyze_v2(number: u64, ip: &[u8]) -> FrameReport {
    let r = analyze_v2_as(&format!("{number:>5}"), ip);
    if r.verdict == Verdict::Good || r.verdict == Verdict::Other {
        return r;
    }
    // Not one packet: perhaps a GSO run captured before segmentation.
    let Some(segs) = super::gso::split(ip) else {
        return r;
    };
    let reports: Vec<FrameReport> = segs
        .iter()
        .enumerate()
        .map(|(k, seg)| analyze_v2_as(&format!("{number:>5}.{k}"), seg))
        .collect();
    if reports.iter().any(|s| s.verdict != Verdict::Good) {
        return r;
    }
    let lines: Vec<String> = reports.into_iter().filter_map(|s| s.line).collect();
    FrameReport {
        verdict: Verdict::Good,
        flavour: Some(Flavour::V2),
        line: Some(lines.join("\n")),
    }
}

/// One RoCEv2 packet, its line starting with `label`.
fn analyze_v2_as(label: &str, ip: &[u8]) -> FrameReport {
    // Classify by headers alone, so a RoCE packet that is cut short or
    // otherwise broken still counts as RoCE.
    let Ok(iph) = IpHeader::parse(ip) else {
        return FrameReport::other();
    };
    if iph.protocol() != IPPROTO_UDP {
        return FrameReport::other();
    }
    let Ok(udp) = UdpHeader::parse(ip.get(iph.len()..).unwrap_or_default()) else {
        return FrameReport::other();
    };
    if udp.dst_port != ROCE_V2_PORT {
        return FrameReport::other();
    }
    let line = format!(
        "{label} RoCEv2 {} -> {}",
        SocketAddr::new(iph.src(), udp.src_port),
        SocketAddr::new(iph.dst(), udp.dst_port)
    );
    let p = match IpUdp::parse(ip) {
        Ok(p) => p,
        Err(e) => return malformed(line, Flavour::V2, e, None),
    };
    let check = icrc::icrc_ip_packet(&p).map(|c| (c, found(p.payload)));
    finish(line, Flavour::V2, p.payload, check)
}

fn analyze_v1(number: u64, frame: &[u8]) -> FrameReport {
    let mut line = format!("{number:>5} RoCEv1");
    let Some(grh) = frame.get(..ROCE_V1_GRH_LEN) else {
        let e = WireError::Truncated {
            need: ROCE_V1_GRH_LEN,
            have: frame.len(),
        };
        return malformed(line, Flavour::V1, e, None);
    };
    let gid = |at: usize| {
        let mut g = [0u8; 16];
        g.copy_from_slice(&grh[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(g))
    };
    let _ = write!(line, " {} -> {}", gid(8), gid(24));
    if grh[0] >> 4 != 6 || grh[6] != 0x1b {
        let e = WireError::NotRoce("GRH version is not 6 or next header is not BTH");
        return malformed(line, Flavour::V1, e, None);
    }
    // PayLen counts everything after the GRH through the ICRC; Ethernet
    // padding or an FCS may follow.
    let paylen = usize::from(u16::from_be_bytes([grh[4], grh[5]]));
    let Some(pkt) = frame.get(..ROCE_V1_GRH_LEN + paylen) else {
        let e = WireError::Truncated {
            need: ROCE_V1_GRH_LEN + paylen,
            have: frame.len(),
        };
        return malformed(line, Flavour::V1, e, None);
    };
    let ib = &pkt[ROCE_V1_GRH_LEN..];
    let check = icrc::icrc_roce_v1(pkt).map(|c| (c, found(ib)));
    finish(line, Flavour::V1, ib, check)
}

/// The ICRC on the wire (last 4 bytes, little-endian), if there are 4.
fn found(ib: &[u8]) -> u32 {
    match ib.len().checked_sub(4).and_then(|t| ib.get(t..)) {
        Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// ` icrc=ok` or ` icrc=BAD computed=.. wire=..` for a check result.
fn icrc_text(check: &Result<(u32, u32), WireError>) -> (bool, String) {
    match check {
        Ok((c, f)) if c == f => (true, " icrc=ok".to_string()),
        Ok((c, f)) => (
            false,
            format!(" icrc=BAD computed=0x{c:08x} wire=0x{f:08x}"),
        ),
        Err(e) => (false, format!(" icrc=BAD ({e})")),
    }
}

fn finish(
    mut line: String,
    flavour: Flavour,
    ib: &[u8],
    check: Result<(u32, u32), WireError>,
) -> FrameReport {
    let (ok, text) = icrc_text(&check);
    match Packet::parse(ib) {
        Ok(p) => {
            describe(&mut line, &p);
            super::cm::describe(&mut line, &p);
            line.push_str(&text);
            FrameReport {
                verdict: if ok { Verdict::Good } else { Verdict::BadIcrc },
                flavour: Some(flavour),
                line: Some(line),
            }
        }
        Err(e) => {
            // Name the opcode byte if there is one: helps reading the error.
            if let Some(&op) = ib.first() {
                let _ = write!(line, " {}", transport::wire::Opcode(op));
            }
            malformed(line, flavour, e, Some(text))
        }
    }
}

fn malformed(
    mut line: String,
    flavour: Flavour,
    e: WireError,
    icrc: Option<String>,
) -> FrameReport {
    let _ = write!(line, " MALFORMED: {e}");
    if let Some(t) = icrc {
        line.push_str(&t);
    }
    FrameReport {
        verdict: Verdict::Malformed,
        flavour: Some(flavour),
        line: Some(line),
    }
}

/// Appends opcode, BTH fields, extension headers and payload length.
fn describe(line: &mut String, p: &Packet<'_>) {
    let h: &Headers = &p.hdr;
    let b = &h.bth;
    let _ = write!(
        line,
        " {} qpn=0x{:06x} psn={} ackreq={} se={} m={} pad={}",
        b.opcode,
        b.dest_qpn,
        b.psn.value(),
        u8::from(b.ack_req),
        u8::from(b.se),
        u8::from(b.mig_req),
        b.pad
    );
    if b.fecn {
        line.push_str(" fecn");
    }
    if b.becn {
        line.push_str(" becn");
    }
    if b.pkey != 0xffff {
        let _ = write!(line, " pkey=0x{:04x}", b.pkey);
    }
    let _ = write!(line, " len={}", p.payload.len());
    if let Some(d) = h.deth {
        let _ = write!(
            line,
            " deth(qkey=0x{:08x} srcqp=0x{:06x})",
            d.qkey, d.src_qpn
        );
    }
    if let Some(n) = h.xrceth {
        let _ = write!(line, " xrceth(srqn=0x{n:06x})");
    }
    if let Some(f) = h.feth {
        let _ = write!(line, " feth(plt={} sel={})", f.plt, f.sel);
    }
    if let Some(r) = h.reth {
        let _ = write!(
            line,
            " reth(va=0x{:x} rkey=0x{:08x} len={})",
            r.va, r.rkey, r.dma_len
        );
    }
    if let Some(a) = h.atomic_eth {
        let _ = write!(
            line,
            " atomiceth(va=0x{:x} rkey=0x{:08x} swap_add=0x{:x} compare=0x{:x})",
            a.va, a.rkey, a.swap_add, a.compare
        );
    }
    if let Some(a) = h.aeth {
        let kind = match a.kind() {
            AethKind::Ack { credit } => format!("ack credit={credit}"),
            AethKind::RnrNak { timer } => format!("rnr-nak timer={timer}"),
            AethKind::Nak(code) => format!("nak {}", nak_name(code)),
            AethKind::Reserved(v) => format!("reserved value={v}"),
        };
        let _ = write!(
            line,
            " aeth({kind} msn={} syndrome=0x{:02x})",
            a.msn, a.syndrome
        );
    }
    if let Some(a) = h.atomic_ack {
        let _ = write!(line, " atomicacketh(orig=0x{:x})", a.orig);
    }
    if let Some(i) = h.imm {
        let _ = write!(line, " imm=0x{i:08x}");
    }
    if let Some(k) = h.ieth {
        let _ = write!(line, " ieth(rkey=0x{k:08x})");
    }
}

fn nak_name(code: NakCode) -> String {
    match code {
        NakCode::PsnSequence => "psn-sequence-error".into(),
        NakCode::InvalidRequest => "invalid-request".into(),
        NakCode::RemoteAccess => "remote-access-error".into(),
        NakCode::RemoteOperational => "remote-operational-error".into(),
        NakCode::InvalidRdRequest => "invalid-rd-request".into(),
        NakCode::Reserved(v) => format!("reserved-{v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // Real rxe RDMA READ request, IP header onwards.
    const READ: &str = "4500003cbe10400040118a4bc0a83881c0a83883df9412b7002800000c00ffff000000118054cb6300007fee260fb000000002b80001000008c6154a";

    #[test]
    fn real_read_request_line() {
        let ip = hex(READ);
        let r = analyze(7, Network::Ip(&ip));
        assert_eq!(r.verdict, Verdict::Good);
        assert_eq!(r.flavour, Some(Flavour::V2));
        assert_eq!(
            r.line.unwrap(),
            "    7 RoCEv2 192.168.56.129:57236 -> 192.168.56.131:4791 RC_RDMA_READ_REQUEST \
             qpn=0x000011 psn=5557091 ackreq=1 se=0 m=0 pad=0 len=0 \
             reth(va=0x7fee260fb000 rkey=0x000002b8 len=65536) icrc=ok"
        );
    }

    #[test]
    fn bad_icrc_and_malformed() {
        let mut ip = hex(READ);
        ip[40] ^= 1; // PSN
        let r = analyze(1, Network::Ip(&ip));
        assert_eq!(r.verdict, Verdict::BadIcrc);
        assert!(r.line.unwrap().contains(" icrc=BAD computed=0x"));

        let ip = hex(READ);
        let r = analyze(1, Network::Ip(&ip[..50])); // cut: IP length says more
        assert_eq!(r.verdict, Verdict::Malformed);
        assert!(r.line.unwrap().contains("MALFORMED: truncated"));

        let mut ip = hex(READ);
        ip[28] = 0x15; // reserved opcode: parse fails, ICRC now bad too
        let r = analyze(1, Network::Ip(&ip));
        assert_eq!(r.verdict, Verdict::Malformed);
        let l = r.line.unwrap();
        assert!(
            l.contains("UNKNOWN MALFORMED: unknown opcode 0x15 icrc=BAD"),
            "{l}"
        );
    }

    /// An XRC SEND ONLY, built and sealed here: its XRCETH is named.
    #[test]
    fn xrc_send_names_its_srq() {
        use std::net::Ipv4Addr;
        use transport::wire::icrc::{fill_icrc, IcrcIp};
        use transport::wire::ip::{IpHeader, Ipv4Header, UdpHeader};
        use transport::wire::packet::emit_packet;
        use transport::wire::{Bth, Headers, Opcode};
        let (a, b) = (Ipv4Addr::new(127, 0, 7, 1), Ipv4Addr::new(127, 0, 7, 2));
        let hdr = Headers {
            bth: Bth {
                opcode: Opcode::XRC_SEND_ONLY,
                dest_qpn: 0x11,
                pkey: 0xffff,
                ..Bth::default()
            },
            xrceth: Some(0x2a),
            ..Headers::default()
        };
        let mut roce = vec![0u8; 64];
        let n = emit_packet(&hdr, b"xy", &mut roce).unwrap();
        roce.truncate(n);
        fill_icrc(&IcrcIp::v4(a, b), 0xc000, 4791, &mut roce).unwrap();
        let ip = IpHeader::V4(Ipv4Header::roce(a, b, n, 0, 64));
        let mut pkt = vec![0u8; 28 + n];
        ip.emit(&mut pkt).unwrap();
        UdpHeader {
            src_port: 0xc000,
            dst_port: 4791,
            len: (8 + n) as u16,
            checksum: 0,
        }
        .emit(&mut pkt[20..])
        .unwrap();
        pkt[28..].copy_from_slice(&roce);
        let r = analyze(3, Network::Ip(&pkt));
        assert_eq!(r.verdict, Verdict::Good);
        let l = r.line.unwrap();
        assert!(l.contains("XRC_SEND_ONLY qpn=0x000011"), "{l}");
        assert!(l.contains(" len=2 xrceth(srqn=0x00002a) icrc=ok"), "{l}");
    }

    #[test]
    fn non_roce_is_other() {
        let mut ip = hex(READ);
        ip[22..24].copy_from_slice(&53u16.to_be_bytes()); // UDP to DNS
        assert_eq!(analyze(1, Network::Ip(&ip)).verdict, Verdict::Other);
        let mut ip = hex(READ);
        ip[9] = 6; // TCP
        assert_eq!(analyze(1, Network::Ip(&ip)).verdict, Verdict::Other);
        assert_eq!(analyze(1, Network::Ip(&ip[..10])).verdict, Verdict::Other);
        assert_eq!(analyze(1, Network::Other).line, None);
    }

    #[test]
    fn roce_v1() {
        let ack = hex("6020000000141b4000000000000000000000ffff0f00000200000000000000000000ffff0f0000021140ffff0000010900a788c00000000525f0c038");
        let mut padded = ack.clone();
        padded.extend_from_slice(&[0; 6]); // Ethernet padding / FCS
        let r = analyze(2, Network::RoceV1(&padded));
        assert_eq!(r.verdict, Verdict::Good);
        assert_eq!(r.flavour, Some(Flavour::V1));
        assert!(r
            .line
            .unwrap()
            .starts_with("    2 RoCEv1 ::ffff:15.0.0.2 -> ::ffff:15.0.0.2 RC_ACKNOWLEDGE"));
        for n in [0, 39, 40, 59] {
            assert_eq!(
                analyze(1, Network::RoceV1(&ack[..n])).verdict,
                Verdict::Malformed
            );
        }
    }
}
