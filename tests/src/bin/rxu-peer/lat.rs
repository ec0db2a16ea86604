//! The lat workload: RDMA WRITE ping-pong, as perftest's ib_write_lat.
//! The client writes `--size` bytes of value v into the server's buffer;
//! the server, polling its memory, sees v and writes v back; the client
//! sees it: one round trip. Reports half the round trip (median, average,
//! 99th percentile) as `lat_us=`, `lat_avg_us=`, `lat_p99_us=`. Small
//! messages go inline, every WRITE is signaled and reaped without waiting.

use std::time::{Duration, Instant};

use rxu_client::*;

use crate::args::{Args, Role};
use crate::ctl::{Ctl, PeerInfo};
use crate::flow::{self, Outcome};
use crate::lanes::Lanes;
use crate::peer::{connect_opts, e, Res};

const INLINE: u32 = 64;
/// Round trips before timing starts.
const WARMUP: u64 = 100;

fn cap(depth: u32) -> QpCap {
    QpCap {
        max_send_wr: depth,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: INLINE,
    }
}

/// The value of round `it`: never 0 (the buffers start zeroed) and
/// different from the previous round's.
fn value(it: u64) -> u8 {
    (it % 255 + 1) as u8
}

pub fn run(args: &Args) -> Res<Outcome> {
    let deadline = Instant::now() + args.timeout;
    let size = args.size;
    let mut l = Lanes::new(
        &args.device,
        1,
        cap(args.depth),
        args.depth + 16,
        2 * size.max(64),
    )?;
    let mut ctl = Ctl::open(&args.link, args.timeout).map_err(flow::io)?;
    let remote = flow::exchange_info(&mut ctl, &l.info()?)?;
    l.connect(&remote, &connect_opts(args))?;
    flow::ready(&mut ctl)?;
    let rounds = WARMUP + args.iters;
    let mut p = Pong {
        size,
        remote: &remote,
        msg: vec![0u8; size],
        seen: vec![0u8; size],
        wc: vec![Wc::default(); 16],
        deadline,
    };
    match args.role {
        Role::Client => {
            let mut half = Vec::with_capacity(args.iters as usize);
            let start = Instant::now();
            let outcome = (|| {
                for it in 0..rounds {
                    let t = Instant::now();
                    p.send(&mut l, it)?;
                    p.await_value(&l, value(it))?;
                    if it >= WARMUP {
                        half.push(t.elapsed() / 2);
                    }
                }
                Ok(())
            })();
            let secs = start.elapsed().as_secs_f64();
            flow::client_done(&mut ctl, outcome)?;
            half.sort_unstable();
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            let n = half.len().max(1);
            let avg = half.iter().map(|d| us(*d)).sum::<f64>() / n as f64;
            let pick = |q: f64| {
                half.get(((n - 1) as f64 * q) as usize)
                    .map_or(0.0, |d| us(*d))
            };
            Ok(Outcome {
                bytes: args.iters * size as u64,
                secs,
                extra: format!(
                    "lat_us={:.2} lat_avg_us={avg:.2} lat_p99_us={:.2}",
                    pick(0.5),
                    pick(0.99)
                ),
            })
        }
        Role::Server => {
            let start = Instant::now();
            let outcome = (|| {
                for it in 0..rounds {
                    p.await_value(&l, value(it))?;
                    p.send(&mut l, it)?;
                }
                Ok(args.iters * size as u64)
            })();
            let secs = start.elapsed().as_secs_f64();
            let bytes = flow::server_verdict(&mut ctl, outcome, || Ok(()))?;
            Ok(Outcome {
                bytes,
                secs,
                extra: String::new(),
            })
        }
    }
}

struct Pong<'a> {
    size: usize,
    remote: &'a PeerInfo,
    msg: Vec<u8>,
    seen: Vec<u8>,
    wc: Vec<Wc>,
    deadline: Instant,
}

impl Pong<'_> {
    /// Writes round `it`'s value into the peer's buffer (offset 0).
    fn send(&mut self, l: &mut Lanes, it: u64) -> Res<()> {
        self.msg.fill(value(it));
        let inline = self.size <= INLINE as usize;
        if !inline {
            // The source is the second half of our buffer.
            l.buf
                .write(self.size.max(64), &self.msg)
                .map_err(e("write buffer"))?;
        }
        let sge = [l.buf.sge(self.size.max(64), self.size as u32)];
        // Bounded by the deadline: ENOMEM means the SQ waits for ACKs.
        loop {
            self.reap(l)?;
            let wr = if inline {
                SendWr::write(it, &[], self.remote.addr, self.remote.rkey).inline(&self.msg)
            } else {
                SendWr::write(it, &sge, self.remote.addr, self.remote.rkey)
            };
            match l.qps[0].post_send(&[wr.signaled()]) {
                Ok(()) => return Ok(()),
                Err(err) if err.errno() == Error::QueueFull.errno() => {}
                Err(err) => return Err(format!("post_send: {err}")),
            }
            if Instant::now() >= self.deadline {
                return Err("timed out posting".into());
            }
            std::thread::yield_now();
        }
    }

    /// Takes finished WRITE completions, failing on an error.
    fn reap(&mut self, l: &Lanes) -> Res<()> {
        let n = l.cq.poll(&mut self.wc).map_err(e("poll_cq"))?;
        if let Some(w) = self.wc[..n].iter().find(|w| !w.is_success()) {
            return Err(format!("WRITE {} failed: {}", w.wr_id, w.status_str()));
        }
        Ok(())
    }

    /// Polls our buffer until every byte is `v`.
    fn await_value(&mut self, l: &Lanes, v: u8) -> Res<()> {
        let mut spins = 0u32;
        // Bounded by the deadline.
        loop {
            l.buf.read(0, &mut self.seen).map_err(e("read buffer"))?;
            if self.seen.iter().all(|&b| b == v) {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                self.reap(l)?;
                if Instant::now() >= self.deadline {
                    return Err(format!("timed out waiting for value {v}"));
                }
            }
            std::thread::yield_now();
        }
    }
}
