//! UDP 4791 flooded from another address on loopback, as fast as one
//! sender thread goes, with what an attacker on the network can send:
//! garbage of every length, well-formed packets (valid ICRC) to unknown
//! QPNs and to a bystander's QPs with wrong PSNs, RDMA READ requests of
//! 2 GiB with made-up rkeys, and MADs to QP 1 with the CM's Q_Key. The
//! daemon must keep serving a bystander ping-pong on the same device, drop
//! and count what it must, and stay within its budget: memory growth under
//! 64 MiB, fds back to baseline. Its CPU share is measured and printed
//! (a single-threaded daemon can take at most one core; it takes it).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use rxu_testkit::hostile::{rss_kib, settle_fds, steady_fd_count, Bystander};
use rxu_testkit::{serial, Daemon};
use transport::engine::fault::SplitMix64;
use transport::wire::icrc::{fill_icrc, IcrcIp};
use transport::wire::packet::emit_packet;
use transport::wire::{Bth, Deth, Headers, Opcode, Reth};

const DAEMON: Ipv4Addr = Ipv4Addr::new(127, 0, 33, 1);
const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 33, 2);
const PORT: u16 = 4791;
const FLOOD: Duration = Duration::from_secs(4);

/// A sealed RoCEv2 packet from the attacker to the daemon.
fn packet(hdr: &Headers, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 4200];
    let n = emit_packet(hdr, payload, &mut buf).expect("emit");
    buf.truncate(n);
    fill_icrc(&IcrcIp::v4(ATTACKER, DAEMON), PORT, PORT, &mut buf).expect("icrc");
    buf
}

/// The next flood packet: one of the five kinds, in turn.
fn next_packet(r: &mut SplitMix64, victims: &[u32], i: u64) -> Vec<u8> {
    let victim = victims[(r.next_u64() as usize) % victims.len()];
    let psn = (r.next_u64() as u32) & 0xFF_FFFF;
    match i % 5 {
        0 => (0..r.next_u64() % 1500)
            .map(|_| r.next_u64() as u8)
            .collect(),
        1 => packet(
            &Headers {
                bth: Bth {
                    opcode: Opcode::RC_SEND_ONLY,
                    pkey: 0xFFFF,
                    dest_qpn: (r.next_u64() as u32) & 0xFF_FFFF,
                    psn: transport::Psn::new(psn),
                    ..Bth::default()
                },
                ..Headers::default()
            },
            &[0xab; 64],
        ),
        2 => packet(
            &Headers {
                bth: Bth {
                    opcode: Opcode::RC_SEND_ONLY,
                    pkey: 0xFFFF,
                    dest_qpn: victim,
                    psn: transport::Psn::new(psn),
                    ..Bth::default()
                },
                ..Headers::default()
            },
            &[0xcd; 256],
        ),
        3 => packet(
            &Headers {
                bth: Bth {
                    opcode: Opcode::RC_READ_REQUEST,
                    pkey: 0xFFFF,
                    dest_qpn: victim,
                    psn: transport::Psn::new(psn),
                    ..Bth::default()
                },
                reth: Some(Reth {
                    va: r.next_u64(),
                    rkey: r.next_u64() as u32,
                    dma_len: 1 << 31,
                }),
                ..Headers::default()
            },
            &[],
        ),
        _ => packet(
            &Headers {
                bth: Bth {
                    opcode: Opcode::UD_SEND_ONLY,
                    pkey: 0xFFFF,
                    dest_qpn: 1,
                    psn: transport::Psn::new(psn),
                    ..Bth::default()
                },
                deth: Some(Deth {
                    qkey: 0x8001_0000,
                    src_qpn: 1,
                }),
                ..Headers::default()
            },
            &(0..256).map(|_| r.next_u64() as u8).collect::<Vec<_>>(),
        ),
    }
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the name: state is 0, utime 11, stime 12.
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    t(11) + t(12)
}

#[test]
fn a_flood_of_hostile_packets_leaves_a_bystander_served() {
    let _g = serial();
    let d = Daemon::start("rxufl", DAEMON);
    let by = Bystander::start(&d.name);
    let victims: Vec<u32> = d
        .status()
        .clients
        .iter()
        .flat_map(|c| c.qps.iter().map(|q| q.qpn))
        .collect();
    assert!(!victims.is_empty(), "the bystander's QPs are in rxu status");
    let fds = steady_fd_count(d.pid());
    let rss_before = rss_kib(d.pid());
    let (sent_before, cpu_before) = (d.counter("rcvd_pkts"), cpu_ticks(d.pid()));

    let sock = UdpSocket::bind(SocketAddr::from((ATTACKER, 0))).expect("bind the attacker");
    let dst = SocketAddr::from((DAEMON, PORT));
    let mut r = SplitMix64::new(0x5eed_f100_d000_0001);
    let (start, mut sent) = (Instant::now(), 0u64);
    let mut rss_peak = rss_before;
    while start.elapsed() < FLOOD {
        let p = next_packet(&mut r, &victims, sent);
        // The kernel may drop what the daemon's socket cannot hold.
        let _ = sock.send_to(&p, dst);
        sent += 1;
        if sent % 20_000 == 0 {
            rss_peak = rss_peak.max(rss_kib(d.pid()));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    rss_peak = rss_peak.max(rss_kib(d.pid()));
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let cpu = (cpu_ticks(d.pid()) - cpu_before) as f64 / hz / secs;
    let rcvd = d.counter("rcvd_pkts") - sent_before;
    let dropped = d.counter("parse_errors") + d.counter("unknown_qp") + d.counter("icrc_errors");

    // The bystander keeps going after the flood too.
    std::thread::sleep(Duration::from_millis(200));
    let report = by.finish();
    eprintln!(
        "flood: {sent} packets in {secs:.1} s ({:.0} k/s), rxud received {rcvd}, \
         dropped as bad/unknown {dropped}; rxud CPU {:.0} % of a core; RSS {rss_before} -> \
         peak {rss_peak} KiB; bystander {} round trips, largest gap {:?}",
        sent as f64 / secs / 1000.0,
        cpu * 100.0,
        report.rounds,
        report.max_gap
    );
    assert!(d.alive(), "rxud died under the flood");
    assert!(dropped > 0, "the flood never reached the daemon");
    // Loaded two cores (sender, daemon, bystander): a slower bystander,
    // never a stalled one.
    report.assert_served(Duration::from_millis(500));
    assert!(
        rss_peak <= rss_before + 64 * 1024,
        "RSS grew from {rss_before} to {rss_peak} KiB"
    );
    assert!(
        settle_fds(d.pid(), fds, Duration::from_secs(5)) <= fds,
        "rxud holds more fds than before the flood"
    );
}
