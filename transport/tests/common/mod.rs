//! Helpers shared by the engine integration tests: engines on loopback
//! addresses with the test's CQs, QP bring-up, two engines on two
//! threads, deadlines, a small deterministic random generator.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use transport::engine::{Engine, EngineConfig, QpSpec};
use transport::qp::{access, BufferMemory, Completion, Mtu, QpAttr, QpState, QpType};
use transport::Psn;

/// An engine and the test's completion queues: the engine hands over
/// completions tagged with their CQ, and they wait here, per CQ, until
/// the test polls that CQ. Everything else is the engine's.
pub struct Eng {
    engine: Engine<BufferMemory>,
    cqs: HashMap<u32, VecDeque<Completion>>,
}

impl Deref for Eng {
    type Target = Engine<BufferMemory>;
    fn deref(&self) -> &Self::Target {
        &self.engine
    }
}

impl DerefMut for Eng {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.engine
    }
}

impl Eng {
    /// Sorts what the engine completed into the CQs.
    fn collect(&mut self) {
        while let Some((cq, c)) = self.engine.poll_completion() {
            self.cqs.entry(cq).or_default().push_back(c);
        }
    }

    /// Takes up to `max` completions from CQ `cq`.
    pub fn poll_cq(&mut self, cq: u32, max: usize) -> Vec<Completion> {
        self.collect();
        let q = self.cqs.entry(cq).or_default();
        let n = max.min(q.len());
        q.drain(..n).collect()
    }

    /// Takes completions from CQ `cq` into `out` (no allocation once the
    /// queues have grown); returns how many.
    pub fn poll_cq_into(&mut self, cq: u32, out: &mut [Completion]) -> usize {
        self.collect();
        let q = self.cqs.entry(cq).or_default();
        let n = out.len().min(q.len());
        for (o, c) in out.iter_mut().zip(q.drain(..n)) {
            *o = c;
        }
        n
    }

    /// Completions waiting in CQ `cq`.
    pub fn cq_len(&mut self, cq: u32) -> usize {
        self.collect();
        self.cqs.get(&cq).map_or(0, VecDeque::len)
    }

    pub fn into_memory(self) -> BufferMemory {
        self.engine.into_memory()
    }
}

pub const SEND_CQ: u32 = 1;
pub const RECV_CQ: u32 = 2;
pub const PD: u32 = 1;
pub const QKEY: u32 = 0x1111_2222;

/// Tests that move a lot of data run one at a time (two engine threads
/// each already share the two cores).
static HEAVY: Mutex<()> = Mutex::new(());

pub fn heavy_lock() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// An engine on `addr` with test defaults (short spin) and `tweak` applied.
pub fn engine(addr: &str, tweak: impl FnOnce(&mut EngineConfig)) -> Eng {
    let a = ip(addr);
    // Traffic only ever goes to loopback addresses; binding the wildcard
    // address is fine (the wildcard test sends to 127.0.0.0/8 only).
    assert!(
        a.is_loopback() || a.is_unspecified(),
        "tests only use loopback addresses"
    );
    let mut cfg = EngineConfig::new(a);
    cfg.spin = Duration::from_micros(20);
    tweak(&mut cfg);
    Eng {
        engine: Engine::new(cfg, BufferMemory::new())
            .unwrap_or_else(|e| panic!("engine on {addr}: {e}")),
        cqs: HashMap::new(),
    }
}

pub fn spec(t: QpType) -> QpSpec {
    QpSpec {
        qp_type: t,
        pd: PD,
        send_cq: SEND_CQ,
        recv_cq: RECV_CQ,
        srq: None,
        xrcd: None,
        sq_sig_all: false,
        max_send_wr: 1024,
        max_recv_wr: 1024,
    }
}

/// Connection parameters for [`connect`].
#[derive(Clone, Copy, Debug)]
pub struct Conn {
    pub mtu: Mtu,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub rd_atomic: u8,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            mtu: Mtu::M4096,
            timeout: 12,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            rd_atomic: 16,
        }
    }
}

/// INIT -> RTR -> RTS. For UD `peer` is ignored.
pub fn connect(e: &mut Eng, qpn: u32, t: QpType, peer: Option<(u32, IpAddr)>, c: &Conn) {
    let all =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let init = QpAttr {
        state: Some(QpState::Init),
        access_flags: Some(all),
        qkey: (t == QpType::Ud).then_some(QKEY),
        ..QpAttr::default()
    };
    let mut rtr = QpAttr {
        state: Some(QpState::Rtr),
        path_mtu: Some(c.mtu),
        rq_psn: Some(Psn::new(0x100)),
        ..QpAttr::default()
    };
    if t != QpType::Ud {
        let (pq, pa) = peer.expect("peer for a connected QP");
        rtr.dest_qpn = Some(pq);
        rtr.dest_addr = Some(pa);
        rtr.min_rnr_timer = Some(c.min_rnr_timer);
        rtr.max_dest_rd_atomic = Some(c.rd_atomic);
    }
    let mut rts = QpAttr {
        state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(0x100)),
        ..QpAttr::default()
    };
    if t == QpType::Rc {
        rts.timeout = Some(c.timeout);
        rts.retry_cnt = Some(c.retry_cnt);
        rts.rnr_retry = Some(c.rnr_retry);
        rts.max_rd_atomic = Some(c.rd_atomic);
    }
    for a in [init, rtr, rts] {
        e.modify_qp(qpn, &a)
            .unwrap_or_else(|err| panic!("modify {:?}: {err}", a.state));
    }
}

/// What the two sides of a test share: a value channel each way, a stop
/// flag (set when either side is done or fails) and a few counters.
pub struct Link {
    tx: Sender<u64>,
    rx: Receiver<u64>,
    pub stop: Arc<AtomicBool>,
    pub shared: Arc<[AtomicU64; 8]>,
}

impl Link {
    pub fn send(&self, v: u64) {
        let _ = self.tx.send(v);
    }
    /// The other side's next value (panics after 20 s or if it is gone).
    pub fn recv(&self) -> u64 {
        self.rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the other side did not answer")
    }
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Sets the stop flag when a side returns or unwinds.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `a` and `b` on two threads, each with its end of a [`Link`].
/// When one ends (or panics) the stop flag tells the other.
pub fn pair<RA: Send, RB: Send>(
    a: impl FnOnce(&Link) -> RA + Send,
    b: impl FnOnce(&Link) -> RB + Send,
) -> (RA, RB) {
    let (ta, rb) = channel();
    let (tb, ra) = channel();
    let stop = Arc::new(AtomicBool::new(false));
    let shared: Arc<[AtomicU64; 8]> = Arc::new(Default::default());
    let la = Link {
        tx: ta,
        rx: ra,
        stop: stop.clone(),
        shared: shared.clone(),
    };
    let lb = Link {
        tx: tb,
        rx: rb,
        stop: stop.clone(),
        shared,
    };
    std::thread::scope(|s| {
        let ha = s.spawn(move || {
            let _g = StopOnDrop(la.stop.clone());
            a(&la)
        });
        let hb = s.spawn(move || {
            let _g = StopOnDrop(lb.stop.clone());
            b(&lb)
        });
        let ra = ha.join();
        let rb = hb.join();
        match (ra, rb) {
            (Ok(x), Ok(y)) => (x, y),
            (Err(p), _) | (_, Err(p)) => std::panic::resume_unwind(p),
        }
    })
}

/// A deadline; `check` panics with `what` when it has passed.
pub struct Deadline {
    end: Instant,
}

impl Deadline {
    pub fn after(d: Duration) -> Deadline {
        Deadline {
            end: Instant::now() + d,
        }
    }
    pub fn passed(&self) -> bool {
        Instant::now() >= self.end
    }
    pub fn check(&self, what: impl FnOnce() -> String) {
        if self.passed() {
            panic!("deadline passed: {}", what());
        }
    }
}

/// SplitMix64, for reproducible test data.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + ((u128::from(self.next_u64()) * u128::from(hi - lo + 1)) >> 64) as u64
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 >= 1.0 - p
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.fill(&mut v);
        v
    }
}
