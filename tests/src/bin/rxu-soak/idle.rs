//! `rxu-soak idle`: many connected RC QPs that never post (what a large
//! job's idle connections look like to the daemon), held until told to
//! stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rxu_client::*;

pub fn run(dev: &str, n: usize, secs: u64, stop: &AtomicBool) -> i32 {
    let start = Instant::now();
    let held = match make(dev, n, stop) {
        Ok(h) => h,
        Err(e) => {
            println!("SETUP failed: {e}");
            return 2;
        }
    };
    println!(
        "READY qps={} secs={:.1}",
        held.1.len(),
        start.elapsed().as_secs_f64()
    );
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        if held.0.is_dead() {
            println!("ERROR device {dev} went away");
            return 3;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("DONE qps={}", held.1.len());
    // Out without destroying one by one: the daemon tears the session's
    // QPs down when its socket closes, as after a crash.
    std::mem::forget(held);
    0
}

/// The QPs, fewer when told to stop while making them.
fn make(dev: &str, n: usize, stop: &AtomicBool) -> Result<(Context, Vec<Qp>, Cq), String> {
    let ctx = Context::open(dev).map_err(|e| format!("open: {e}"))?;
    let pd = Pd::alloc(&ctx).map_err(|e| format!("alloc_pd: {e}"))?;
    let cq = Cq::create(&ctx, 64, 0, None, 0).map_err(|e| format!("create_cq: {e}"))?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let gid = ctx.query_gid(0).map_err(|e| format!("query_gid: {e}"))?;
    let mut qps = Vec::with_capacity(n);
    for i in 0..n {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let qp = Qp::create(&pd, &QpInit::new(QpType::Rc, &cq, &cq, cap))
            .map_err(|e| format!("create_qp number {i}: {e}"))?;
        qps.push(qp);
        if (i + 1) % 1000 == 0 {
            println!("MADE qps={}", i + 1);
        }
    }
    // Connected in pairs, RTS: idle, not unused.
    let opts = ConnectOpts::default();
    for p in qps.chunks(2) {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if let [a, b] = p {
            let ea = QpEndpoint {
                qpn: a.qpn(),
                psn: 1,
                gid,
            };
            let eb = QpEndpoint {
                qpn: b.qpn(),
                psn: 2,
                gid,
            };
            a.connect(1, &eb, &opts)
                .map_err(|e| format!("connect: {e}"))?;
            b.connect(2, &ea, &opts)
                .map_err(|e| format!("connect: {e}"))?;
        }
    }
    Ok((ctx, qps, cq))
}
