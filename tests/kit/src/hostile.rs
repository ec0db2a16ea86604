//! What a hostile-client test measures besides the attacker's own error:
//! that a bystander on the same device keeps being served, and that the
//! daemon gives back what the attacker made it hold.
//!
//! - [`Bystander`]: an RC ping-pong (SEND/RECV of 64 bytes between two QPs
//!   of one context, through the client library) in a thread of its own,
//!   recording the largest gap between two completed round trips;
//! - [`fd_count`], [`rss_kib`]: a process's open fds and resident memory
//!   (`/proc/<pid>/fd`, `/proc/<pid>/status`);
//! - [`steady_fd_count`]: a baseline fd count, once nothing changes;
//! - [`settle_fds`]: waits (bounded) for a daemon's fd count to come back
//!   down to a baseline after an attacker closed.
//!
//! ```ignore
//! let d = Daemon::start("rxuh0", addr);
//! let by = Bystander::start(&d.name);
//! let base = steady_fd_count(d.pid());
//! // ... attack ...
//! assert!(settle_fds(d.pid(), base, Duration::from_secs(5)) <= base);
//! by.finish().assert_served(Duration::from_millis(100));
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rxu_client::*;

use crate::verbs::{Pair, ALL_ACCESS};

/// How long one round trip may take before the bystander gives up (and
/// reports it: a stalled daemon is what it is there to catch).
const ROUND_LIMIT: Duration = Duration::from_secs(10);
/// Bytes sent each way.
pub const MSG: usize = 64;

/// What a [`Bystander`] saw.
#[derive(Debug, Clone)]
pub struct BystanderReport {
    /// Round trips completed.
    pub rounds: u64,
    /// The largest time between two completed round trips (or from the
    /// start to the first).
    pub max_gap: Duration,
    /// Why it stopped early: an error or a completion that did not come.
    pub failure: Option<String>,
}

impl BystanderReport {
    /// Panics unless it completed at least one round, never failed and
    /// never waited longer than `gap` between two round trips.
    pub fn assert_served(&self, gap: Duration) {
        assert!(self.failure.is_none(), "bystander failed: {self:?}");
        assert!(self.rounds > 0, "bystander completed nothing: {self:?}");
        assert!(
            self.max_gap <= gap,
            "bystander waited {:?} between round trips (limit {gap:?}): {self:?}",
            self.max_gap
        );
    }
}

/// A ping-pong on a daemon, running until [`Bystander::finish`].
pub struct Bystander {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<BystanderReport>>,
}

impl Bystander {
    /// Opens a context on device `name` (through the client library, so
    /// the daemon must serve in this process's runtime directory),
    /// connects two RC QPs and starts the ping-pong; returns once the
    /// first round trip completed (panics if it does not within 10 s).
    pub fn start(name: &str) -> Bystander {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let name = name.to_owned();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || run(&name, &flag, ready_tx));
        match ready_rx.recv_timeout(ROUND_LIMIT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("bystander did not start: {e}"),
            Err(_) => panic!("bystander did not complete a round trip within {ROUND_LIMIT:?}"),
        }
        Bystander {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops it and returns what it saw.
    pub fn finish(mut self) -> BystanderReport {
        self.stop.store(true, Ordering::Relaxed);
        let t = self.thread.take().expect("finished once");
        t.join().expect("bystander thread panicked")
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(name: &str, stop: &AtomicBool, ready: mpsc::Sender<Result<(), String>>) -> BystanderReport {
    let mut report = BystanderReport {
        rounds: 0,
        max_gap: Duration::ZERO,
        failure: None,
    };
    let setup = Context::open(name).and_then(|ctx| {
        let p = Pair::new(&ctx, QpType::Rc);
        let a = MrBuf::new(&p.pd, MSG, ALL_ACCESS)?;
        let b = MrBuf::new(&p.pd, MSG, ALL_ACCESS)?;
        Ok((ctx, p, a, b))
    });
    let (_ctx, p, a, b) = match setup {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            report.failure = Some(format!("setup: {e}"));
            return report;
        }
    };
    let mut last = Instant::now();
    let mut ready = Some(ready);
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = round(&p, &a, &b, report.rounds) {
            if let Some(r) = ready.take() {
                let _ = r.send(Err(e.clone()));
            }
            report.failure = Some(e);
            break;
        }
        let now = Instant::now();
        report.max_gap = report.max_gap.max(now - last);
        last = now;
        report.rounds += 1;
        if let Some(r) = ready.take() {
            let _ = r.send(Ok(()));
        }
    }
    report
}

/// One round trip of the bystander's ping-pong on `p` (64 bytes from
/// `a`'s and `b`'s buffers): one SEND a -> b, one SEND b -> a, each
/// awaited on both sides; `n` is the round's wr_id.
pub fn round(p: &Pair, a: &MrBuf, b: &MrBuf, n: u64) -> Result<(), String> {
    let post = |e: PostError| format!("post: {e}");
    p.b.post_recv(&[RecvWr::new(n, &[b.sge(0, MSG as u32)])])
        .map_err(post)?;
    p.a.post_send(&[SendWr::send(n, &[a.sge(0, MSG as u32)]).signaled()])
        .map_err(post)?;
    wait(&p.cq_a, n)?;
    wait(&p.cq_b, n)?;
    p.a.post_recv(&[RecvWr::new(n, &[a.sge(0, MSG as u32)])])
        .map_err(post)?;
    p.b.post_send(&[SendWr::send(n, &[b.sge(0, MSG as u32)]).signaled()])
        .map_err(post)?;
    wait(&p.cq_b, n)?;
    wait(&p.cq_a, n)
}

fn wait(cq: &Cq, wr_id: u64) -> Result<(), String> {
    let deadline = Instant::now() + ROUND_LIMIT;
    let mut wc = [Wc::default()];
    loop {
        match cq.poll(&mut wc) {
            Ok(1) if wc[0].is_success() && wc[0].wr_id == wr_id => return Ok(()),
            Ok(1) => return Err(format!("completion {:?}: {}", wc[0], wc[0].status_str())),
            Ok(_) => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no completion of round {wr_id} within {ROUND_LIMIT:?}"
            ));
        }
        std::thread::yield_now();
    }
}

/// Open fds of process `pid` (entries of `/proc/<pid>/fd`); 0 when it is
/// gone.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The fd count of process `pid` once it has not changed for 100 ms
/// (a daemon closes a session's fds on its loop turn after the client
/// closed: a baseline taken right after a connection closed may still
/// count it); gives up after 3 s and returns the last count.
pub fn steady_fd_count(pid: u32) -> usize {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut last = fd_count(pid);
    let mut since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        let n = fd_count(pid);
        if n != last {
            (last, since) = (n, Instant::now());
        } else if since.elapsed() >= Duration::from_millis(100) {
            break;
        }
    }
    last
}

/// Resident memory of process `pid` in KiB (`VmRSS`); 0 when it is gone.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Waits up to `within` for process `pid` to hold at most `baseline` fds
/// (a daemon releases a closed session's fds on its next loop turn);
/// returns the last count seen.
pub fn settle_fds(pid: u32, baseline: usize, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let n = fd_count(pid);
        if n <= baseline || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
