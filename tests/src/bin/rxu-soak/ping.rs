//! `rxu-soak ping`: the bystander. A 64-byte RC SEND ping-pong between
//! two QPs of one context, reporting each second its round trips and the
//! largest gap between two of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rxu_client::*;

use crate::lane::ALL_ACCESS;

const MSG: u32 = 64;
/// A round trip that takes longer ends the bystander (and fails the soak).
const ROUND_LIMIT: Duration = Duration::from_secs(10);

struct Pp {
    _ctx: Context,
    cq_a: Cq,
    cq_b: Cq,
    a: Qp,
    b: Qp,
    ma: MrBuf,
    mb: MrBuf,
}

fn setup(dev: &str) -> Result<Pp, Error> {
    let ctx = Context::open(dev)?;
    let pd = Pd::alloc(&ctx)?;
    let cq_a = Cq::create(&ctx, 16, 0, None, 0)?;
    let cq_b = Cq::create(&ctx, 16, 0, None, 0)?;
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let a = Qp::create(&pd, &QpInit::new(QpType::Rc, &cq_a, &cq_a, cap))?;
    let b = Qp::create(&pd, &QpInit::new(QpType::Rc, &cq_b, &cq_b, cap))?;
    let gid = ctx.query_gid(0)?;
    let opts = ConnectOpts::default();
    a.connect(
        7,
        &QpEndpoint {
            qpn: b.qpn(),
            psn: 9,
            gid,
        },
        &opts,
    )?;
    b.connect(
        9,
        &QpEndpoint {
            qpn: a.qpn(),
            psn: 7,
            gid,
        },
        &opts,
    )?;
    let ma = MrBuf::new(&pd, MSG as usize, ALL_ACCESS)?;
    let mb = MrBuf::new(&pd, MSG as usize, ALL_ACCESS)?;
    Ok(Pp {
        _ctx: ctx,
        cq_a,
        cq_b,
        a,
        b,
        ma,
        mb,
    })
}

fn wait(cq: &Cq, n: u64) -> Result<(), String> {
    let end = Instant::now() + ROUND_LIMIT;
    let mut wc = [Wc::default()];
    loop {
        match cq.poll(&mut wc) {
            Ok(1) if wc[0].is_success() && wc[0].wr_id == n => return Ok(()),
            Ok(1) => return Err(format!("completion {}: {:?}", wc[0].status_str(), wc[0])),
            Ok(_) => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        if Instant::now() > end {
            return Err(format!("round {n} took over {ROUND_LIMIT:?}"));
        }
        std::thread::yield_now();
    }
}

fn round(p: &Pp, n: u64) -> Result<(), String> {
    let post = |e: PostError| format!("post: {e}");
    p.b.post_recv(&[RecvWr::new(n, &[p.mb.sge(0, MSG)])])
        .map_err(post)?;
    p.a.post_send(&[SendWr::send(n, &[p.ma.sge(0, MSG)]).signaled()])
        .map_err(post)?;
    wait(&p.cq_a, n)?;
    wait(&p.cq_b, n)?;
    p.a.post_recv(&[RecvWr::new(n, &[p.ma.sge(0, MSG)])])
        .map_err(post)?;
    p.b.post_send(&[SendWr::send(n, &[p.mb.sge(0, MSG)]).signaled()])
        .map_err(post)?;
    wait(&p.cq_b, n)?;
    wait(&p.cq_a, n)
}

pub fn run(dev: &str, secs: u64, stop: &AtomicBool) -> i32 {
    let p = match setup(dev) {
        Ok(p) => p,
        Err(e) => {
            println!("PING fail setup: {e}");
            return 1;
        }
    };
    println!("PING ready");
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (mut rounds, mut max_gap, mut window_gap) = (0u64, Duration::ZERO, Duration::ZERO);
    let (mut last, mut last_line) = (Instant::now(), Instant::now());
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        if let Err(e) = round(&p, rounds) {
            println!("PING fail after {rounds} rounds: {e}");
            return 1;
        }
        let now = Instant::now();
        window_gap = window_gap.max(now - last);
        last = now;
        rounds += 1;
        if last_line.elapsed() >= Duration::from_secs(1) {
            max_gap = max_gap.max(window_gap);
            println!(
                "PING rounds={rounds} gap_ms={:.1}",
                window_gap.as_secs_f64() * 1e3
            );
            window_gap = Duration::ZERO;
            last_line = now;
        }
        // A bystander, not a load: about 1000 round trips a second.
        std::thread::sleep(Duration::from_micros(500));
    }
    max_gap = max_gap.max(window_gap);
    println!(
        "PING done rounds={rounds} max_gap_ms={:.1}",
        max_gap.as_secs_f64() * 1e3
    );
    0
}
