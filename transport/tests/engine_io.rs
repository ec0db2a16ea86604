//! The engine's receive path against hand-made datagrams from a plain UDP
//! socket: what it accepts, what it counts and drops, IPv6 with a zero UDP
//! checksum, the IP header a UD receive is shown, sleeping when idle, QP
//! numbers.

mod common;

use common::*;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use transport::engine::sys;
use transport::qp::{access, wc_flags, QpType, RecvWqe, Sge};
use transport::wire::icrc::{fill_icrc, IcrcIp};
use transport::wire::ip::{Ipv4Header, Ipv6Header, IPV4_DF};
use transport::wire::packet::emit_packet;
use transport::wire::{Bth, Deth, Headers, Opcode, MAX_PACKET};
use transport::Psn;

/// An RC SEND ONLY to `qpn` with `payload`, ICRC computed for `ip`.
fn send_only(qpn: u32, payload: &[u8], ip: &IcrcIp, sport: u16, dport: u16) -> Vec<u8> {
    let h = Headers {
        bth: Bth {
            opcode: Opcode::RC_SEND_ONLY,
            dest_qpn: qpn,
            psn: Psn::new(7),
            ack_req: true,
            ..Bth::default()
        },
        ..Headers::default()
    };
    let mut buf = vec![0u8; MAX_PACKET];
    let n = emit_packet(&h, payload, &mut buf).expect("emit");
    buf.truncate(n);
    fill_icrc(ip, sport, dport, &mut buf).expect("icrc");
    buf
}

/// A plain UDP socket as a sender; DF set like any RoCE sender.
fn sender(addr: SocketAddr) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    sys::set_pmtudisc_do(s.as_raw_fd(), addr.is_ipv6()).expect("DF");
    s
}

/// Runs the engine until it has taken `n` datagrams (or 5 s passed).
fn pump_until_rcvd(e: &mut Eng, n: u64) {
    let d = Deadline::after(Duration::from_secs(5));
    while e.counters().rcvd_pkts < n {
        e.run_once(Some(Duration::from_millis(10)))
            .expect("run_once");
        d.check(|| format!("received {:?}", e.counters()));
    }
}

#[test]
fn bad_packets_are_counted_and_dropped() {
    let mut e = engine("127.0.0.40", |_| {});
    let s = sender("127.0.0.41:4791".parse().unwrap());
    let (src, dst) = ("127.0.0.41".parse().unwrap(), "127.0.0.40".parse().unwrap());
    let to = e.local_addr();
    let good = send_only(
        0x12_3456,
        b"hello, world!",
        &IcrcIp::v4(src, dst),
        4791,
        4791,
    );
    // A sender whose IP ID is not 0 (like kernel rxe): still accepted.
    let id = IcrcIp::V4 {
        src,
        dst,
        id: 0x1234,
        flags_frag: IPV4_DF,
    };
    let rxe_like = send_only(0x12_3456, b"hello, world!", &id, 4791, 4791);
    let mut flipped = good.clone();
    flipped[14] ^= 0x10;
    let mut tver = good.clone();
    tver[1] |= 1;
    let mut unknown_op = good.clone();
    unknown_op[0] = 0xff;
    let huge = vec![0u8; MAX_PACKET + 100];
    for p in [
        good,
        rxe_like,
        flipped,
        b"abc".to_vec(),
        tver,
        unknown_op,
        huge,
    ] {
        s.send_to(&p, to).expect("send");
    }
    pump_until_rcvd(&mut e, 7);
    let c = e.counters();
    assert_eq!(c.unknown_qp, 2, "{c:?}");
    assert_eq!(c.icrc_nonzero_id, 1, "{c:?}");
    assert_eq!(c.icrc_errors, 1, "{c:?}");
    assert_eq!(c.parse_errors, 3, "{c:?}");
    assert_eq!(c.truncated, 1, "{c:?}");
}

#[test]
fn every_single_bit_flip_is_caught() {
    let mut e = engine("127.0.0.42", |_| {});
    let s = sender("127.0.0.43:4791".parse().unwrap());
    let (src, dst) = ("127.0.0.43".parse().unwrap(), "127.0.0.42".parse().unwrap());
    let good = send_only(0x4321, &[0x5a; 37], &IcrcIp::v4(src, dst), 4791, 4791);
    let mut sent = 0;
    for byte in 0..good.len() {
        if byte == 4 {
            // BTH byte 4 (FECN/BECN/reserved) is masked by the ICRC.
            continue;
        }
        for bit in 0..8 {
            let mut p = good.clone();
            p[byte] ^= 1 << bit;
            s.send_to(&p, e.local_addr()).expect("send");
            sent += 1;
            if sent % 64 == 0 {
                pump_until_rcvd(&mut e, sent);
            }
        }
    }
    pump_until_rcvd(&mut e, sent);
    let c = e.counters();
    // A flip either breaks the parse or the ICRC; it never reaches a QP.
    assert_eq!(c.unknown_qp, 0, "{c:?}");
    assert_eq!(c.icrc_errors + c.parse_errors, sent, "{c:?}");
}

#[test]
fn ipv6_zero_udp_checksum_accepted() {
    // Both ends on ::1, told apart by port.
    let mut e = engine("::1", |c| {
        c.port = 4793;
        c.peer_port = 4794;
    });
    let s = sender("[::1]:4794".parse().unwrap());
    // Zero UDP checksum on send, as rxe and ConnectX do over IPv6.
    sys::set_no_check6(s.as_raw_fd(), true, true).expect("UDP_NO_CHECK6_TX");
    let lo: IpAddr = "::1".parse().unwrap();
    let ip = match lo {
        IpAddr::V6(a) => IcrcIp::v6(a, a),
        IpAddr::V4(_) => unreachable!(),
    };
    let p = send_only(0x77, b"over ipv6", &ip, 4794, 4793);
    s.send_to(&p, e.local_addr()).expect("send");
    // And a normal, checksummed one.
    let s2 = sender("[::1]:0".parse().unwrap());
    let port2 = s2.local_addr().unwrap().port();
    let p2 = send_only(0x77, b"checksummed", &ip, port2, 4793);
    s2.send_to(&p2, e.local_addr()).expect("send");
    pump_until_rcvd(&mut e, 2);
    let c = e.counters();
    assert_eq!(c.unknown_qp, 2, "{c:?}");
    assert_eq!(c.icrc_errors, 0, "{c:?}");
}

#[test]
fn idle_engine_sleeps_and_wakes_for_a_packet() {
    let mut e = engine("127.0.0.44", |c| c.spin = Duration::from_micros(100));
    // Idle: spins ~100 us, then sleeps for the rest of the timeout.
    let t0 = Instant::now();
    let mut slept = false;
    while t0.elapsed() < Duration::from_secs(2) {
        let r = e
            .run_once(Some(Duration::from_millis(30)))
            .expect("run_once");
        if r.slept {
            slept = true;
            break;
        }
    }
    let dt = t0.elapsed();
    assert!(slept, "never slept");
    assert!(dt >= Duration::from_millis(25), "woke early: {dt:?}");
    assert!(dt < Duration::from_secs(2), "slept too long: {dt:?}");
    // A packet wakes a sleeping engine long before its timeout.
    let to = e.local_addr();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let s = sender("127.0.0.45:4791".parse().unwrap());
        s.send_to(b"wake up", to).expect("send");
    });
    let t0 = Instant::now();
    while e.counters().rcvd_pkts == 0 && t0.elapsed() < Duration::from_secs(5) {
        e.run_once(Some(Duration::from_secs(3))).expect("run_once");
    }
    t.join().unwrap();
    let dt = t0.elapsed();
    assert_eq!(e.counters().rcvd_pkts, 1);
    assert!(
        dt < Duration::from_millis(1500),
        "a packet did not wake the engine: {dt:?}"
    );
}

#[test]
fn qp_numbers_are_24_bit_unique_and_never_0_or_1() {
    let mut e = engine("127.0.0.46", |c| c.first_qpn = 0xFF_FFFC);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..8 {
        let q = e.create_qp(spec(QpType::Rc)).expect("create_qp");
        assert!((2..0xFF_FFFF).contains(&q), "{q:#x}");
        assert!(seen.insert(q), "{q:#x} twice");
    }
    let mut v: Vec<u32> = seen.into_iter().collect();
    v.sort();
    assert_eq!(v, vec![2, 3, 4, 5, 6, 0xFF_FFFC, 0xFF_FFFD, 0xFF_FFFE]);
    let srq = e.create_srq(2);
    assert!(e
        .post_srq_recv(
            srq,
            transport::qp::RecvWqe {
                wr_id: 1,
                sges: vec![]
            }
        )
        .is_ok());
    assert!(e
        .post_srq_recv(
            srq,
            transport::qp::RecvWqe {
                wr_id: 2,
                sges: vec![]
            }
        )
        .is_ok());
    assert!(e
        .post_srq_recv(
            srq,
            transport::qp::RecvWqe {
                wr_id: 3,
                sges: vec![]
            }
        )
        .is_err());
    assert_eq!(e.srq_len(srq), Some(2));
}

#[test]
fn random_datagrams_never_panic_and_are_all_counted() {
    let mut e = engine("127.0.0.47", |_| {});
    let s = sender("127.0.0.48:4791".parse().unwrap());
    let to = e.local_addr();
    let (src, dst) = ("127.0.0.48".parse().unwrap(), "127.0.0.47".parse().unwrap());
    let mut r = Rng(99);
    let n = 3000u64;
    for i in 0..n {
        let len = match i % 4 {
            0 => r.range(0, 40),
            1 => r.range(0, MAX_PACKET as u64 + 200),
            _ => r.range(12, 300),
        } as usize;
        let mut p = r.bytes(len);
        if i % 4 == 2 && len >= 16 {
            // A plausible BTH (known opcode, TVer 0) with a valid ICRC, to
            // get past the first checks.
            let ops = [
                0x00u8, 0x04, 0x0a, 0x0c, 0x10, 0x11, 0x12, 0x13, 0x24, 0x64, 0x81,
            ];
            p[0] = ops[r.range(0, ops.len() as u64 - 1) as usize];
            p[1] &= 0xf0;
            let _ = fill_icrc(&IcrcIp::v4(src, dst), 4791, 4791, &mut p);
        }
        s.send_to(&p, to).expect("send");
        if i % 256 == 255 {
            pump_until_rcvd(&mut e, i + 1);
        }
    }
    pump_until_rcvd(&mut e, n);
    let c = e.counters();
    // No QP exists: everything is dropped, and counted exactly once.
    assert_eq!(
        c.parse_errors + c.icrc_errors + c.truncated + c.unknown_qp,
        n,
        "{c:?}"
    );
}

#[test]
fn engine_is_send() {
    fn send<T: Send>() {}
    send::<Eng>();
}

#[test]
fn a_wake_fd_ends_the_sleep() {
    let mut e = engine("127.0.0.49", |c| c.spin = Duration::ZERO);
    let (r, w) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    e.set_wake_fds(&[r.as_raw_fd()]).expect("wake fds");
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        use std::io::Write;
        (&w).write_all(b"x").expect("write");
        w
    });
    let t0 = Instant::now();
    let mut slept = false;
    while t0.elapsed() < Duration::from_secs(5) && !slept {
        slept = e
            .run_once(Some(Duration::from_secs(3)))
            .expect("run_once")
            .slept;
    }
    let dt = t0.elapsed();
    let _w = t.join().unwrap();
    assert!(slept);
    assert!(dt >= Duration::from_millis(40), "{dt:?}");
    assert!(
        dt < Duration::from_millis(1500),
        "the wake fd did not end the sleep: {dt:?}"
    );
}

/// A UD SEND ONLY to `qpn` (Q_Key QKEY, source QP 0x99), ICRC for `ip`.
fn ud_send_only(qpn: u32, payload: &[u8], ip: &IcrcIp, sport: u16, dport: u16) -> Vec<u8> {
    let h = Headers {
        bth: Bth {
            opcode: Opcode::UD_SEND_ONLY,
            dest_qpn: qpn,
            psn: Psn::new(3),
            ..Bth::default()
        },
        deth: Some(Deth {
            qkey: QKEY,
            src_qpn: 0x99,
        }),
        ..Headers::default()
    };
    let mut buf = vec![0u8; MAX_PACKET];
    let n = emit_packet(&h, payload, &mut buf).expect("emit");
    buf.truncate(n);
    fill_icrc(ip, sport, dport, &mut buf).expect("icrc");
    buf
}

/// A UD QP on `e` with one 4 KiB receive posted; returns (qpn, lkey).
fn ud_qp_with_receive(e: &mut Eng) -> (u32, u32) {
    let qpn = e.create_qp(spec(QpType::Ud)).expect("UD QP");
    connect(e, qpn, QpType::Ud, None, &Conn::default());
    let key = e
        .memory_mut()
        .register(PD, 0x10000, vec![0xee; 4096], access::LOCAL_WRITE);
    let sges = vec![Sge {
        addr: 0x10000,
        length: 4096,
        lkey: key,
    }];
    e.post_recv(qpn, RecvWqe { wr_id: 1, sges })
        .expect("post_recv");
    (qpn, key)
}

fn setsockopt(fd: i32, level: i32, opt: i32, v: i32) {
    // SAFETY: an int option of a socket this test owns.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(
        r,
        0,
        "setsockopt {level}/{opt}: {}",
        std::io::Error::last_os_error()
    );
}

/// The 40 bytes in front of a UD receive's payload are the packet's IP
/// header as it was sent, though the engine only has a UDP socket: TOS
/// and TTL from control messages, the IPv4 ID from the ICRC (a sender
/// that numbered its packets itself, as kernel rxe does), and over IPv6
/// the traffic class, the flow label (IPV6_FLOWINFO) and the hop limit.
#[test]
fn ud_grh_area_is_the_ip_header_as_sent() {
    let payload = b"grh area";
    // RoCE bytes: BTH 12 + DETH 8 + payload 8 (no pad) + ICRC 4.
    let roce = 12 + 8 + payload.len() + 4;

    let mut e = engine("127.0.0.46", |_| {});
    let (qpn, key) = ud_qp_with_receive(&mut e);
    let s = sender("127.0.0.47:4791".parse().unwrap());
    setsockopt(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TOS, 0x28);
    setsockopt(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TTL, 33);
    let (src, dst) = ("127.0.0.47".parse().unwrap(), "127.0.0.46".parse().unwrap());
    let id = IcrcIp::V4 {
        src,
        dst,
        id: 0x4321,
        flags_frag: IPV4_DF,
    };
    let p = ud_send_only(qpn, payload, &id, 4791, 4791);
    s.send_to(&p, e.local_addr()).expect("send");
    pump_until_rcvd(&mut e, 1);
    let c = e.poll_cq(RECV_CQ, 1);
    assert_eq!(c.len(), 1, "{:?}", e.counters());
    assert_eq!(c[0].wc_flags, wc_flags::GRH);
    let mut want = [0u8; 40];
    let h = Ipv4Header {
        id: 0x4321,
        ..Ipv4Header::roce(src, dst, roce, 0x28, 33)
    };
    h.emit(&mut want[20..]).unwrap();
    let mem = e.memory().region(key).unwrap().data.clone();
    assert_eq!(&mem[..40], &want, "IPv4 GRH area");
    assert_eq!(&mem[40..48], payload);

    let mut e = engine("::1", |c| {
        c.port = 4799;
        c.peer_port = 4800;
    });
    let (qpn, key) = ud_qp_with_receive(&mut e);
    let s = sender("[::1]:4800".parse().unwrap());
    sys::set_no_check6(s.as_raw_fd(), true, true).expect("UDP_NO_CHECK6_TX");
    setsockopt(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_TCLASS, 0x28);
    setsockopt(
        s.as_raw_fd(),
        libc::IPPROTO_IPV6,
        libc::IPV6_UNICAST_HOPS,
        17,
    );
    // IPV6_FLOWINFO_SEND: the flow label of the destination address goes out.
    setsockopt(s.as_raw_fd(), libc::IPPROTO_IPV6, 33, 1);
    let lo: std::net::Ipv6Addr = "::1".parse().unwrap();
    let p = ud_send_only(qpn, payload, &IcrcIp::v6(lo, lo), 4800, 4799);
    let to = std::net::SocketAddrV6::new(lo, 4799, 0xABCDE_u32.to_be(), 0);
    s.send_to(&p, to).expect("send");
    pump_until_rcvd(&mut e, 1);
    assert_eq!(e.poll_cq(RECV_CQ, 1).len(), 1, "{:?}", e.counters());
    let mut want = [0u8; 40];
    let h = Ipv6Header {
        flow_label: 0xABCDE,
        ..Ipv6Header::roce(lo, lo, roce, 0x28, 17)
    };
    h.emit(&mut want).unwrap();
    let mem = e.memory().region(key).unwrap().data.clone();
    assert_eq!(&mem[..40], &want, "IPv6 GRH area");
    assert_eq!(&mem[40..48], payload);
}
