//! Work that grows with other users' objects (issue 19, finding 6): a
//! client holding 16 000 idle QPs (and 4000 CQs) on a device must not
//! slow a bystander's ping-pong on the same device, nor make the
//! daemon's loop cost more per round trip; `rxu stats` and `rxu status`
//! still answer with that many QPs; and rxud's RSS comes back once they
//! are gone.
//!
//! The figures (round-trip median and p99, rxud's CPU per round trip,
//! without and with the idle QPs) are printed; the bound asserted is
//! loose (the median within 4x), as the machine is shared. Before the
//! loop walked only the watched rings and dirty CQs (`daemon/ready.rs`),
//! every turn read all 32 000 rings and walked all 4000 CQs: on a 2-core
//! VM under load the median round trip went from 41 us to 147 ms (p99
//! 2.6 ms -> 1.3 s), rxud's CPU per round trip from 35 us to 65 ms, and
//! making the QPs took 132 s (each request read every ring of its
//! client).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use rxu_client::*;
use rxu_testkit::hostile::{round, rss_kib, MSG};
use rxu_testkit::verbs::{Pair, ALL_ACCESS};
use rxu_testkit::{serial, Daemon};

/// Idle QPs the other client holds: the device's 16384 but the
/// bystander's two and some room.
const IDLE_QPS: usize = 16_000;
/// Its CQs (four QPs share each), under the per-client default.
const IDLE_CQS: usize = 4_000;
/// rxud's RSS after the idle QPs went, over what it was before they came
/// (allocator caches, the stats replies' buffers).
const RSS_SLACK_KIB: u64 = 16 * 1024;
/// Round trips measured each time.
const ROUNDS: u64 = 2_000;
/// How much slower the median round trip may be with the idle QPs: runs
/// on a loaded 2-core VM saw 1.3x to 2.8x (the same run's "after they
/// went" figure moves as much); before the fix it was 3600x.
const MEDIAN_RATIO: f64 = 4.0;

/// Clock ticks of CPU (user + system) process `pid` has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the command name (which may hold spaces): state is
    // field 3; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').expect("stat has a comm") + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// What one run of the ping-pong saw.
struct Figures {
    median: Duration,
    p99: Duration,
    /// rxud's CPU per round trip.
    cpu_per_round: Duration,
    /// rxud's sleeps and doorbells rung, per round trip.
    sleeps: f64,
    doorbells: f64,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "median {:?}, p99 {:?}, rxud CPU {:?} per round trip ({:.2} sleeps, {:.2} doorbells)",
            self.median, self.p99, self.cpu_per_round, self.sleeps, self.doorbells
        )
    }
}

/// `ROUNDS` round trips on `p`, timed one by one.
fn measure(d: &Daemon, p: &Pair, a: &MrBuf, b: &MrBuf, first: u64) -> Figures {
    let (sleeps0, bells0) = (d.counter("daemon_sleeps"), d.counter("doorbells"));
    let cpu0 = cpu_ticks(d.pid());
    let mut times = Vec::with_capacity(ROUNDS as usize);
    for n in first..first + ROUNDS {
        let t = Instant::now();
        round(p, a, b, n).unwrap();
        times.push(t.elapsed());
    }
    let cpu = (cpu_ticks(d.pid()) - cpu0) as f64 / ticks_per_sec();
    let per = |n: u64, n0: u64| (n - n0) as f64 / ROUNDS as f64;
    times.sort_unstable();
    Figures {
        median: times[times.len() / 2],
        p99: times[times.len() * 99 / 100],
        cpu_per_round: Duration::from_secs_f64(cpu / ROUNDS as f64),
        sleeps: per(d.counter("daemon_sleeps"), sleeps0),
        doorbells: per(d.counter("doorbells"), bells0),
    }
}

#[test]
fn idle_qps_of_another_client_do_not_slow_a_bystander() {
    let _g = serial();
    let limits = format!(
        "session.qps={q},uid.qps={q},session.wqes={w},uid.wqes={w}",
        q = IDLE_QPS + 16,
        w = 4 * IDLE_QPS + 1024
    );
    let d = Daemon::spawn("rxuidle", Ipv4Addr::new(127, 0, 19, 6))
        .args(&["--limit", &limits])
        .start();
    let by = d.open();
    let p = Pair::new(&by, QpType::Rc);
    let a = MrBuf::new(&p.pd, MSG, ALL_ACCESS).unwrap();
    let b = MrBuf::new(&p.pd, MSG, ALL_ACCESS).unwrap();
    // Warm up, then the figures with no other client.
    for n in 0..200 {
        round(&p, &a, &b, n).unwrap();
    }
    let alone = measure(&d, &p, &a, &b, 1_000);
    println!("bystander alone:             {alone}");
    let rss_alone = rss_kib(d.pid());

    let made = Instant::now();
    let other = d.open();
    let pd = Pd::alloc(&other).unwrap();
    let cqs: Vec<Cq> = (0..IDLE_CQS)
        .map(|i| Cq::create(&other, 4, 0, None, i as u64).unwrap())
        .collect();
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qps: Vec<Qp> = (0..IDLE_QPS)
        .map(|i| {
            let cq = &cqs[i % IDLE_CQS];
            Qp::create(&pd, &QpInit::new(QpType::Rc, cq, cq, cap)).unwrap()
        })
        .collect();
    println!(
        "{IDLE_QPS} idle QPs on {IDLE_CQS} CQs made in {:?}",
        made.elapsed()
    );
    // Long enough for the daemon to see them idle.
    std::thread::sleep(Duration::from_millis(300));
    let crowded = measure(&d, &p, &a, &b, 10_000);
    println!("bystander with the idle QPs: {crowded}");
    let rss_crowded = rss_kib(d.pid());

    // rxu stats / status answer (in pieces) with every QP in them.
    let t = Instant::now();
    let st = d.stats();
    assert_eq!(st.qps.len(), IDLE_QPS + 2);
    let status = d.status();
    let listed: usize = status.clients.iter().map(|c| c.qps.len()).sum();
    assert_eq!(listed, IDLE_QPS + 2);
    let out = d.rxu(&["status"]);
    let qp_lines = out
        .lines()
        .filter(|l| l.trim_start().starts_with("qp "))
        .count();
    assert_eq!(qp_lines, IDLE_QPS + 2);
    let out = d.rxu(&["stats", "--name", &d.name]);
    assert!(out.lines().count() > IDLE_QPS, "rxu stats: {out:.400}");
    println!("stats and status with them: {:?}", t.elapsed());

    drop((qps, cqs, pd, other));
    let after = measure(&d, &p, &a, &b, 100_000);
    println!("bystander after they went:   {after}");
    let rss_after = rss_kib(d.pid());
    println!(
        "rxud RSS: {} MiB alone, {} MiB with the idle QPs, {} MiB after they went",
        rss_alone / 1024,
        rss_crowded / 1024,
        rss_after / 1024
    );
    // rxud gives back what it grew for them (`Device::give_back_memory`):
    // before, 76 MiB stayed after they went (4 MiB alone, 217 with them).
    assert!(
        rss_after <= rss_alone + RSS_SLACK_KIB,
        "rxud RSS {rss_after} KiB after the idle QPs went, {rss_alone} KiB before"
    );
    assert!(d.counter("heap_trims") >= 1);
    let bound = alone.median.mul_f64(MEDIAN_RATIO);
    assert!(
        crowded.median <= bound,
        "median round trip {:?} with {IDLE_QPS} idle QPs of another client, {:?} without (bound {bound:?})",
        crowded.median,
        alone.median
    );
}
