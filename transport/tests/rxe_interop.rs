//! Packets of the Linux kernel's Soft-RoCE (rdma_rxe, Debian 12 kernel 6.1)
//! captured by scripts/interop/run on the tap between rxu and a VM (see
//! tests/vectors/README.md): every one parses and its ICRC verifies, each
//! file holds the kinds its name says, and what rxu got wrong against them
//! stays fixed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use transport::qp::{
    access, BufferMemory, Env, Mtu, Payload, Qp, QpAttr, QpConfig, QpState, QpType, RecvWqe,
    RxMeta, SendOp, SendWqe, Sge, WcStatus,
};
use transport::wire::icrc::{verify_ip_packet, verify_received, ReceivedIcrc};
use transport::wire::ip::ipv4_checksum;
use transport::wire::{AethKind, NakCode, Opcode, Packet, MAX_PACKET};
use transport::Psn;

const RXE: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
const RXU: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

/// Frames of a classic little-endian pcap (what tcpdump writes here).
fn frames(path: &Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        d.len() >= 24 && d[..4] == [0xd4, 0xc3, 0xb2, 0xa1],
        "{}",
        path.display()
    );
    assert_eq!(d[20], 1, "{}: Ethernet link type", path.display());
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32::from_le_bytes([d[off + 8], d[off + 9], d[off + 10], d[off + 11]]) as usize;
        let start = off + 16;
        assert!(start + incl <= d.len(), "{}: truncated", path.display());
        out.push(d[start..start + incl].to_vec());
        off = start + incl;
    }
    out
}

/// The RoCEv2 packet of an Ethernet frame: (source, UDP payload = BTH ..
/// ICRC), after checking the ICRC over the real IP header.
fn roce(frame: &[u8]) -> (IpAddr, Vec<u8>) {
    assert_eq!(&frame[12..14], &[0x08, 0x00], "IPv4");
    let p = verify_ip_packet(&frame[14..]).unwrap_or_else(|e| panic!("ICRC: {e:?}"));
    assert_eq!(p.udp.dst_port, 4791);
    (p.ip.src(), p.payload.to_vec())
}

/// The kinds a packet counts as: its opcode (or NAK kind), and for a
/// full 4 KiB payload also opcode + len=4096.
fn describe(p: &Packet<'_>) -> Vec<String> {
    let op = p.opcode();
    match p.hdr.aeth.map(|a| a.kind()) {
        Some(AethKind::RnrNak { .. }) if op == Opcode::RC_ACK => vec!["RNR NAK".into()],
        Some(AethKind::Nak(c)) if op == Opcode::RC_ACK => vec![format!("NAK {c:?}")],
        _ if p.payload.len() == 4096 => vec![op.name().into(), format!("{} len=4096", op.name())],
        _ => vec![op.name().into()],
    }
}

/// What each kept file must contain (as `describe` names it).
const EXPECT: &[(&str, &[&str])] = &[
    (
        "read-response",
        &[
            "RC_RDMA_READ_RESPONSE_FIRST",
            "RC_RDMA_READ_RESPONSE_MIDDLE",
            "RC_RDMA_READ_RESPONSE_LAST",
            "RC_RDMA_READ_RESPONSE_ONLY",
        ],
    ),
    ("atomic", &["RC_FETCH_ADD", "RC_ATOMIC_ACKNOWLEDGE"]),
    ("ud-send", &["UD_SEND_ONLY"]),
    (
        "send-multi",
        &["RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST"],
    ),
    (
        "write-multi",
        &[
            "RC_RDMA_WRITE_FIRST",
            "RC_RDMA_WRITE_MIDDLE",
            "RC_RDMA_WRITE_LAST",
        ],
    ),
    (
        "jumbo",
        &[
            "RC_RDMA_WRITE_MIDDLE len=4096",
            "RC_RDMA_READ_RESPONSE_MIDDLE len=4096",
        ],
    ),
    ("rnr-nak", &["RNR NAK"]),
    ("seq-nak", &["NAK PsnSequence"]),
    ("remote-op-nak", &["NAK RemoteOperational"]),
    ("seq-nak-storm", &["NAK PsnSequence", "RC_ACKNOWLEDGE"]),
    ("ack-timeout", &["RC_ACKNOWLEDGE"]),
    ("rnr-then-middles", &["RC_SEND_FIRST", "RC_SEND_MIDDLE"]),
    ("shifted-resend", &["RC_SEND_ONLY", "RC_SEND_FIRST"]),
];

#[test]
fn every_kernel_packet_parses_and_its_icrc_verifies() {
    for (stem, kinds) in EXPECT {
        let path = vectors().join(format!("rxe-interop-{stem}.pcap"));
        let mut seen = Vec::new();
        for f in frames(&path) {
            let (src, bytes) = roce(&f);
            assert_eq!(
                src,
                IpAddr::V4(RXE),
                "{stem}: only the kernel's packets are kept"
            );
            let p = Packet::parse(&bytes).unwrap_or_else(|e| panic!("{stem}: {e:?}"));
            seen.extend(describe(&p));
        }
        for k in *kinds {
            assert!(seen.iter().any(|s| s == k), "{stem}: no {k} in {seen:?}");
        }
    }
}

/// An RTS RC QP as rxu's perftest/pingpong set it up in a capture: QPN
/// `qpn` (rxe's is the same number), path MTU 1024, first PSN `psn`, and
/// 64 KiB of registered memory.
fn rc_qp(qpn: u32, psn: u32) -> (Qp, BufferMemory, u32) {
    let mut mem = BufferMemory::new();
    let key = mem.register(1, 0x10000, vec![0x5a; 65536], access::LOCAL_WRITE);
    let mut qp = Qp::new(QpConfig {
        qpn,
        qp_type: QpType::Rc,
        pd: 1,
        srq: None,
        sq_sig_all: true,
        max_send_wr: 128,
        max_recv_wr: 16,
    });
    let steps = [
        QpAttr {
            state: Some(QpState::Init),
            access_flags: Some(access::REMOTE_WRITE),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::M1024),
            dest_qpn: Some(qpn),
            dest_addr: Some(IpAddr::V4(RXE)),
            rq_psn: Some(Psn::new(0x5000)),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(12),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(psn)),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(16),
            ..QpAttr::default()
        },
    ];
    for a in steps {
        qp.modify(&a).unwrap();
    }
    (qp, mem, key)
}

/// Posts `n` WQEs of `op` over `len` bytes of the QP's memory.
fn post(qp: &mut Qp, key: u32, op: SendOp, len: u32, n: u64) {
    for i in 0..n {
        qp.post_send(SendWqe {
            wr_id: i,
            op,
            flags: 0,
            payload: Payload::Sges(vec![Sge {
                addr: 0x10000,
                length: len,
                lkey: key,
            }]),
            ud: None,
        })
        .unwrap();
    }
}

/// ib_write_bw's requester: eight 64 KiB WRITEs posted.
fn requester(qpn: u32, psn: u32) -> (Qp, BufferMemory) {
    let (mut qp, mem, key) = rc_qp(qpn, psn);
    let write = SendOp::Write {
        remote_addr: 0x7eff_32b0_c000,
        rkey: 0x28a,
    };
    post(&mut qp, key, write, 65536, 8);
    (qp, mem)
}

fn meta() -> RxMeta {
    RxMeta {
        src: IpAddr::V4(RXE),
        src_port: 49441,
        dst: IpAddr::V4(RXU),
        tos: 0,
        ttl: 64,
        ip_id: 0,
        flow_label: 0,
    }
}

/// Sends everything the QP may send now; returns how many packets.
fn drain(qp: &mut Qp, mem: &mut BufferMemory, now: Instant) -> usize {
    sent(qp, mem, now).len()
}

/// Sends everything the QP may send now: (PSN, AckReq) of each packet.
fn sent(qp: &mut Qp, mem: &mut BufferMemory, now: Instant) -> Vec<(u32, bool)> {
    let mut buf = vec![0u8; MAX_PACKET];
    let mut env = Env { mem, srq: None };
    let mut out = Vec::new();
    while let Some(t) = qp.poll_transmit(now, &mut env, &mut buf) {
        let p = Packet::parse(&buf[..t.len]).expect("own packet parses");
        out.push((p.hdr.bth.psn.value(), p.hdr.bth.ack_req));
        assert!(out.len() < 100_000, "runaway transmit");
    }
    out
}

fn feed(qp: &mut Qp, mem: &mut BufferMemory, now: Instant, frame: &[u8]) {
    let (_, bytes) = roce(frame);
    let p = Packet::parse(&bytes).unwrap();
    let mut env = Env { mem, srq: None };
    qp.handle_packet(now, &p, &meta(), &mut env);
}

/// Kernel rxe sits behind a tap in a slow VM: after its sequence NAK, the
/// rest of rxu's window is still queued ahead of the resent packets, so
/// rxe NAKs again for PSN+1, +2, ... (one NAK per resent packet it
/// accepts). rxu answered every one of those NAKs with a new go-back-N of
/// a whole window: 1.5 M packets, 70 % resends, in the 1 % loss run. A NAK
/// for a PSN the pass under way has already resent must not start
/// another pass.
#[test]
fn seq_nak_storm_from_rxe_costs_one_window() {
    let (mut qp, mut mem) = requester(0x11, 15_061_137);
    let now = Instant::now();
    let first = drain(&mut qp, &mut mem, now);
    assert_eq!(first, 256, "the window: 256 unacknowledged PSNs");
    let meta = meta();
    let mut naks = 0;
    let mut sent_after = 0;
    for f in frames(&vectors().join("rxe-interop-seq-nak-storm.pcap")) {
        let (_, bytes) = roce(&f);
        let p = Packet::parse(&bytes).unwrap();
        if p.hdr.aeth.map(|a| a.kind()) == Some(AethKind::Nak(NakCode::PsnSequence)) {
            naks += 1;
        }
        let mut env = Env {
            mem: &mut mem,
            srq: None,
        };
        qp.handle_packet(now, &p, &meta, &mut env);
        sent_after += drain(&mut qp, &mut mem, now);
    }
    let c = *qp.counters();
    assert_eq!(c.rcvd_seq_err, naks);
    assert_eq!(c.completer_retry_err, 1, "one go-back-N pass: {c:?}");
    // The pass resends 15061146 .. 15061392; the rest is new data the
    // ACKs made room for.
    assert_eq!(c.retransmitted_pkts, 247, "{c:?}");
    assert!(
        sent_after < 2 * 256,
        "{sent_after} packets after the first NAK"
    );
    assert_eq!(qp.state(), QpState::Rts);
}

/// Kernel rxe in a TCG guest behind a full tap queue answered rxu's
/// 64 KiB WRITEs slower than perftest's 67 ms ACK timeout (timeout 14):
/// each timeout resent a whole 256-PSN window into the same queue, the
/// peer fell further behind, and after 7 timeouts without progress the
/// WRITE failed RETRY_EXC_ERR in a run without any loss. After a timeout
/// the requester now probes with one packet (AckReq set) and doubles its
/// window with each ACK that makes progress. The ACKs are rxe's, as
/// captured for that QP (QPN 0x1f, first PSN 2542692).
#[test]
fn ack_timeout_probes_with_one_packet_then_doubles() {
    let acks = frames(&vectors().join("rxe-interop-ack-timeout.pcap"));
    let (mut qp, mut mem) = requester(0x1f, 2_542_692);
    let t0 = Instant::now();
    assert_eq!(drain(&mut qp, &mut mem, t0), 256);
    // ACK of the first message (PSN 2542755): room for 64 more.
    feed(&mut qp, &mut mem, t0, &acks[0]);
    assert_eq!(drain(&mut qp, &mut mem, t0), 64);
    // Then nothing for longer than the timeout.
    let t1 = qp.poll_timeout().expect("ACK timer armed");
    let mut env = Env {
        mem: &mut mem,
        srq: None,
    };
    qp.handle_timeout(t1, &mut env);
    let probe = sent(&mut qp, &mut mem, t1);
    assert_eq!(probe, vec![(2_542_756, true)], "one probe, AckReq set");
    // rxe's next ACKs (it had the data, it was slow): 2, 4, 8 packets.
    let mut bursts = Vec::new();
    for a in &acks[1..4] {
        feed(&mut qp, &mut mem, t1, a);
        let b = sent(&mut qp, &mut mem, t1);
        assert!(b.last().is_some_and(|&(_, ack_req)| ack_req), "{b:?}");
        bursts.push(b.len());
    }
    assert_eq!(bursts, vec![2, 4, 8]);
    assert_eq!(qp.state(), QpState::Rts);
    assert_eq!(qp.counters().local_ack_timeout_err, 1);
}

/// Kernel 6.1 rxe answers a SEND longer than the posted receive with NAK
/// 0x63 (remote operational error), where the IBA says 0x61; rxu's
/// requester completes it REM_OP_ERR and flushes the rest (captured:
/// ibv_rc_pingpong -s 4096 against a server posting 1024-byte receives).
#[test]
fn rxe_nak_0x63_for_a_long_send_is_rem_op_err() {
    let nak = frames(&vectors().join("rxe-interop-remote-op-nak.pcap"));
    let (_, bytes) = roce(&nak[0]);
    let p = Packet::parse(&bytes).unwrap();
    let (qpn, psn) = (p.hdr.bth.dest_qpn, p.hdr.bth.psn.value());
    let (mut qp, mut mem, key) = rc_qp(qpn, psn);
    post(&mut qp, key, SendOp::Send, 4096, 2);
    let t = Instant::now();
    assert_eq!(drain(&mut qp, &mut mem, t), 8);
    feed(&mut qp, &mut mem, t, &nak[0]);
    let st: Vec<_> = std::iter::from_fn(|| qp.poll_completion())
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(st, vec![(0, WcStatus::RemOpErr), (1, WcStatus::WrFlushErr)]);
    assert_eq!(qp.state(), QpState::Err);
}

/// rxe's RNR NAK (timer 12, 0.64 ms) for the first packet of a 64 KiB
/// SEND: the two SENDs before it complete, nothing is sent until the
/// timer ran out, then the SEND starts over from its FIRST packet
/// (captured: ib_send_bw against a server with one receive posted).
#[test]
fn rxe_rnr_nak_waits_then_resends_the_message() {
    let rnr = frames(&vectors().join("rxe-interop-rnr-nak.pcap"));
    let (_, bytes) = roce(&rnr[0]);
    let p = Packet::parse(&bytes).unwrap();
    let (qpn, psn) = (p.hdr.bth.dest_qpn, p.hdr.bth.psn.value());
    assert!(matches!(
        p.hdr.aeth.map(|a| a.kind()),
        Some(AethKind::RnrNak { timer: 12 })
    ));
    // The NAKed PSN is the first of the third 64-packet SEND.
    let (mut qp, mut mem, key) = rc_qp(qpn, psn - 128);
    post(&mut qp, key, SendOp::Send, 65536, 4);
    let t = Instant::now();
    assert_eq!(drain(&mut qp, &mut mem, t), 256);
    feed(&mut qp, &mut mem, t, &rnr[0]);
    let done: Vec<_> = std::iter::from_fn(|| qp.poll_completion())
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(done, vec![(0, WcStatus::Success), (1, WcStatus::Success)]);
    assert_eq!(
        drain(&mut qp, &mut mem, t),
        0,
        "quiet while the RNR timer runs"
    );
    let deadline = qp.poll_timeout().expect("RNR timer");
    assert!(
        deadline - t >= Duration::from_micros(640),
        "{:?}",
        deadline - t
    );
    let mut env = Env {
        mem: &mut mem,
        srq: None,
    };
    qp.handle_timeout(deadline, &mut env);
    let resent = sent(&mut qp, &mut mem, deadline);
    assert_eq!(resent.first().map(|&(p, _)| p), Some(psn));
    assert_eq!(qp.counters().rcvd_rnr_err, 1);
    assert_eq!(qp.state(), QpState::Rts);
}

/// A UD SEND from rxe lands behind the 40-byte GRH area: the first 20
/// bytes zero, then the packet's IPv4 header byte for byte as it was on
/// the wire, as rxe itself writes it. rxu's UDP socket does not show the
/// IP ID; the ICRC check recovers it (as the endpoint does) and the
/// header is rebuilt with it.
#[test]
fn rxe_ud_send_lands_behind_its_ipv4_header() {
    let f = frames(&vectors().join("rxe-interop-ud-send.pcap"));
    let (_, bytes) = roce(&f[0]);
    let p = Packet::parse(&bytes).unwrap();
    assert_eq!(p.opcode(), Opcode::UD_SEND_ONLY);
    let deth = p.hdr.deth.expect("DETH");
    let mut mem = BufferMemory::new();
    let key = mem.register(1, 0x20000, vec![0xee; 8192], access::LOCAL_WRITE);
    let mut qp = Qp::new(QpConfig {
        qpn: p.hdr.bth.dest_qpn,
        qp_type: QpType::Ud,
        pd: 1,
        srq: None,
        sq_sig_all: false,
        max_send_wr: 16,
        max_recv_wr: 16,
    });
    for a in [
        QpAttr {
            state: Some(QpState::Init),
            qkey: Some(deth.qkey),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            ..QpAttr::default()
        },
    ] {
        qp.modify(&a).unwrap();
    }
    qp.post_recv(RecvWqe {
        wr_id: 7,
        sges: vec![Sge {
            addr: 0x20000,
            length: 8192,
            lkey: key,
        }],
    })
    .unwrap();
    let ip = &f[0][14..34];
    let sport = u16::from_be_bytes([f[0][34], f[0][35]]);
    let ip_id = match verify_received(
        SocketAddr::new(IpAddr::V4(RXE), sport),
        SocketAddr::new(IpAddr::V4(RXU), 4791),
        0,
        &bytes,
    ) {
        ReceivedIcrc::ValidOtherId(id) => id,
        other => panic!("rxe picks IDs of its own: {other:?}"),
    };
    assert_eq!(ip_id.to_be_bytes(), [ip[4], ip[5]]);
    let meta = RxMeta {
        src: IpAddr::V4(RXE),
        src_port: sport,
        dst: IpAddr::V4(RXU),
        tos: ip[1],
        ttl: ip[8],
        ip_id,
        flow_label: 0,
    };
    let mut env = Env {
        mem: &mut mem,
        srq: None,
    };
    qp.handle_packet(Instant::now(), &p, &meta, &mut env);
    let c = qp.poll_completion().expect("receive completion");
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(c.byte_len as usize, 40 + p.payload.len());
    assert_eq!(c.src_qp, deth.src_qpn);
    let buf = &mem.region(key).unwrap().data;
    assert_eq!(&buf[..20], &[0u8; 20]);
    assert_eq!(&buf[20..40], ip, "GRH area: the captured IPv4 header");
    assert_eq!(ipv4_checksum(&buf[20..40]), 0, "its checksum holds");
    assert_eq!(&buf[40..40 + p.payload.len()], p.payload);
}

/// An rxu responder QP in RTR expecting `psn`, with no receive posted.
fn responder(qpn: u32, psn: u32) -> (Qp, BufferMemory, u32) {
    let mut mem = BufferMemory::new();
    let key = mem.register(1, 0x30000, vec![0; 65536], access::LOCAL_WRITE);
    let mut qp = Qp::new(QpConfig {
        qpn,
        qp_type: QpType::Rc,
        pd: 1,
        srq: None,
        sq_sig_all: false,
        max_send_wr: 16,
        max_recv_wr: 16,
    });
    for a in [
        QpAttr {
            state: Some(QpState::Init),
            access_flags: Some(access::REMOTE_WRITE),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::M1024),
            dest_qpn: Some(qpn),
            dest_addr: Some(IpAddr::V4(RXE)),
            rq_psn: Some(Psn::new(psn)),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(12),
            ..QpAttr::default()
        },
    ] {
        qp.modify(&a).unwrap();
    }
    (qp, mem, key)
}

/// The responder's answers now: (PSN, AETH kind).
fn answers(qp: &mut Qp, mem: &mut BufferMemory) -> Vec<(u32, Option<AethKind>)> {
    let mut buf = vec![0u8; MAX_PACKET];
    let mut env = Env { mem, srq: None };
    let mut out = Vec::new();
    while let Some(t) = qp.poll_transmit(Instant::now(), &mut env, &mut buf) {
        let p = Packet::parse(&buf[..t.len]).unwrap();
        out.push((p.hdr.bth.psn.value(), p.hdr.aeth.map(|a| a.kind())));
        assert!(out.len() < 1000);
    }
    out
}

/// ib_send_bw against an rxu server with one receive posted: rxe's
/// 64-packet SEND meets an empty receive queue. rxu answered the FIRST
/// with an RNR NAK and the MIDDLE behind it with a sequence NAK for the
/// same PSN; kernel 6.1 rxe, given both, later resent a SEND as a
/// zero-length SEND ONLY with every PSN after it shifted by one
/// (rxe-interop-shifted-resend.pcap), and the FIRST that then arrived in
/// the middle of a message was NAKed invalid request: both QPs failed. The
/// RNR NAK is now the PSN's only NAK; the resend after the RNR timer is
/// accepted.
#[test]
fn rnr_nak_is_the_only_nak_for_its_psn() {
    let f = frames(&vectors().join("rxe-interop-rnr-then-middles.pcap"));
    let first = Packet::parse(&roce(&f[0]).1).unwrap().hdr.bth;
    let (mut qp, mut mem, key) = responder(first.dest_qpn, first.psn.value());
    let now = Instant::now();
    for fr in &f[..3] {
        feed(&mut qp, &mut mem, now, fr);
    }
    let psn = first.psn.value();
    assert_eq!(
        answers(&mut qp, &mut mem),
        vec![(psn, Some(AethKind::RnrNak { timer: 12 }))],
        "one RNR NAK, no sequence NAK for the MIDDLEs in flight"
    );
    assert_eq!(qp.counters().out_of_seq_request, 2);
    qp.post_recv(RecvWqe {
        wr_id: 1,
        sges: vec![Sge {
            addr: 0x30000,
            length: 65536,
            lkey: key,
        }],
    })
    .unwrap();
    for fr in &f[3..] {
        feed(&mut qp, &mut mem, now, fr);
    }
    assert_eq!(
        qp.rq_expected_psn(),
        Psn::new(psn + 2),
        "the resend is taken"
    );
    assert_eq!(answers(&mut qp, &mut mem), vec![]);
    assert_eq!(qp.state(), QpState::Rtr);
}
