//! A seeded fault injector for the send and receive paths: drop,
//! duplicate, reorder (delay past the next packet) and corrupt, each with
//! its own rate, deterministic for a given seed and packet sequence; and
//! [`Faulty`], a [`UdpDriver`] decorator that applies it (tests and the
//! benchmark; the production path never goes through it).
//!
//! On the send path it runs after the ICRC is written, so a corrupted
//! packet carries a stale ICRC and the receiver's check must catch it. On
//! the receive path it runs before the ICRC check. Corruption never flips
//! BTH byte 4 (FECN, BECN, reserved): the ICRC masks that byte, so a flip
//! there would be no corruption the receiver could (or need) detect.

use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::config::EngineError;
pub use super::config::FaultConfig;
use super::endpoint::{RecvMeta, TransmitSink};
use super::udp::{TxBatch, UdpDriver, TX_SLOT};
use crate::qp::Transmit;

/// What the injector did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Packets judged.
    pub seen: u64,
    pub dropped: u64,
    pub duplicated: u64,
    /// Packets held back and released after a later one.
    pub reordered: u64,
    pub corrupted: u64,
}

/// The verdict for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Gone.
    Drop,
    /// Goes on (possibly corrupted in place).
    Deliver,
    /// Goes on twice.
    Duplicate,
    /// Hold it back; let it go after the next packet.
    Delay,
}

/// A decision: what happens to the packet, and whether (with which random
/// value) it gets corrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub fate: Fate,
    pub corrupt: Option<u64>,
}

/// Flips one bit of `pkt` chosen by `r`: any byte but BTH byte 4 (masked
/// by the ICRC). Packets of 5 bytes or fewer are left alone.
pub fn corrupt(pkt: &mut [u8], r: u64) {
    if pkt.len() <= 5 {
        return;
    }
    let n = pkt.len() as u64 - 1;
    let mut at = ((u128::from(r) * u128::from(n)) >> 64) as usize;
    if at >= 4 {
        at += 1;
    }
    pkt[at] ^= 1 << (r & 7);
}

/// SplitMix64: tiny, fast, and fully determined by its seed (also the
/// seeded source of the hostile tests and the fuzz targets' stable runs).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, n)` (0 for n = 0), by multiply-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Threshold for `next_u64() < t` to happen with probability `p`.
fn threshold(p: f64) -> u64 {
    if p.is_nan() || p <= 0.0 {
        0
    } else if p >= 1.0 {
        u64::MAX
    } else {
        (p * 18_446_744_073_709_551_616.0) as u64
    }
}

/// The injector for one direction.
#[derive(Clone, Debug)]
pub struct FaultInjector {
    cfg: FaultConfig,
    rng: SplitMix64,
    t_drop: u64,
    t_dup: u64,
    t_reorder: u64,
    t_corrupt: u64,
    counters: FaultCounters,
}

impl FaultInjector {
    pub fn new(cfg: FaultConfig) -> FaultInjector {
        FaultInjector {
            cfg,
            rng: SplitMix64(cfg.seed),
            t_drop: threshold(cfg.drop),
            t_dup: threshold(cfg.duplicate),
            t_reorder: threshold(cfg.reorder),
            t_corrupt: threshold(cfg.corrupt),
            counters: FaultCounters::default(),
        }
    }

    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    /// Decides the fate of the next packet without touching it; when the
    /// verdict says corrupt, apply [`corrupt`] with the given value once
    /// the packet's ICRC is final. Every decision draws the same number of
    /// random values, so the sequence of verdicts depends only on the seed
    /// and the number of packets judged.
    pub fn decide(&mut self) -> Verdict {
        self.counters.seen += 1;
        let d = self.rng.next_u64();
        let c = self.rng.next_u64();
        let u = self.rng.next_u64();
        let r = self.rng.next_u64();
        let pos = self.rng.next_u64();
        if d < self.t_drop {
            self.counters.dropped += 1;
            return Verdict {
                fate: Fate::Drop,
                corrupt: None,
            };
        }
        let corrupt = if c < self.t_corrupt {
            self.counters.corrupted += 1;
            Some(pos)
        } else {
            None
        };
        let fate = if u < self.t_dup {
            self.counters.duplicated += 1;
            Fate::Duplicate
        } else if r < self.t_reorder {
            self.counters.reordered += 1;
            Fate::Delay
        } else {
            Fate::Deliver
        };
        Verdict { fate, corrupt }
    }

    /// [`FaultInjector::decide`] and [`corrupt`] in one step, for a packet
    /// whose bytes are final (the receive path).
    pub fn judge(&mut self, pkt: &mut [u8]) -> Fate {
        let v = self.decide();
        if let Some(r) = v.corrupt {
            corrupt(pkt, r);
        }
        v.fate
    }

    /// The caller could not hold a packet it was told to delay and
    /// delivered it in order instead.
    pub fn delay_refused(&mut self) {
        self.counters.reordered = self.counters.reordered.saturating_sub(1);
    }

    /// The caller could not deliver a duplicate.
    pub fn duplicate_refused(&mut self) {
        self.counters.duplicated = self.counters.duplicated.saturating_sub(1);
    }

    /// A uniform number in `[0, n)` from the injector's stream (for tests
    /// that want reproducible choices of their own).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.rng.below(n)
        }
    }
}

/// One held-back packet and what the path needs to send or process it.
#[derive(Debug)]
pub(crate) struct DelayLine<T: Copy> {
    buf: Vec<u8>,
    len: usize,
    meta: Option<T>,
    since: Option<Instant>,
    /// Packets that went by since it was held.
    passed: u32,
}

/// A held packet goes at the latest this long after it was held, even if
/// no other packet came by.
pub(crate) const MAX_HOLD: Duration = Duration::from_micros(500);

impl<T: Copy> DelayLine<T> {
    pub fn new(cap: usize) -> Self {
        DelayLine {
            buf: vec![0; cap],
            len: 0,
            meta: None,
            since: None,
            passed: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.meta.is_none()
    }

    /// Holds a copy of `pkt`; false if a packet is already held or it does
    /// not fit.
    pub fn hold(&mut self, pkt: &[u8], meta: T, now: Instant) -> bool {
        if self.meta.is_some() || pkt.len() > self.buf.len() {
            return false;
        }
        self.buf[..pkt.len()].copy_from_slice(pkt);
        self.len = pkt.len();
        self.meta = Some(meta);
        self.since = Some(now);
        self.passed = 0;
        true
    }

    /// Another packet went by.
    pub fn note_passed(&mut self) {
        if self.meta.is_some() {
            self.passed = self.passed.saturating_add(1);
        }
    }

    /// Whether the held packet should go now.
    pub fn due(&self, now: Instant) -> bool {
        match (self.meta, self.since) {
            (Some(_), Some(s)) => self.passed > 0 || now.saturating_duration_since(s) >= MAX_HOLD,
            _ => false,
        }
    }

    /// When the held packet must go at the latest.
    pub fn deadline(&self) -> Option<Instant> {
        self.meta.and(self.since).map(|s| s + MAX_HOLD)
    }

    /// Releases the held packet: its buffer (take it, give it back with
    /// [`DelayLine::restore`]), length and metadata.
    pub fn release(&mut self) -> Option<(Vec<u8>, usize, T)> {
        let meta = self.meta.take()?;
        self.since = None;
        Some((std::mem::take(&mut self.buf), self.len, meta))
    }

    /// Returns the buffer taken by [`DelayLine::release`].
    pub fn restore(&mut self, buf: Vec<u8>) {
        self.buf = buf;
    }
}

/// A [`UdpDriver`] with fault injectors on its send path (between the
/// endpoint and the send batch) and its receive path (between the
/// received batch and the handler). Same calls as the driver.
pub struct Faulty {
    inner: UdpDriver,
    tx: Option<TxFaults>,
    rx: Option<RxFaults>,
}

/// The send side: the endpoint writes into `scratch`; what the verdict
/// lets through is copied into the driver's batch.
struct TxFaults {
    inj: FaultInjector,
    /// A held packet: where it goes, its source hint, its corruption.
    delay: DelayLine<(Transmit, Option<IpAddr>, Option<u64>)>,
    scratch: Vec<u8>,
}

struct RxFaults {
    inj: FaultInjector,
    delay: DelayLine<RecvMeta>,
}

impl Faulty {
    /// Wraps `inner`; a direction whose config is `None` (or can cause no
    /// fault) passes packets unchanged.
    pub fn new(inner: UdpDriver, tx: Option<FaultConfig>, rx: Option<FaultConfig>) -> Faulty {
        let live = |c: Option<FaultConfig>| c.filter(|f| !f.is_none()).map(FaultInjector::new);
        Faulty {
            inner,
            tx: live(tx).map(|inj| TxFaults {
                inj,
                delay: DelayLine::new(TX_SLOT),
                scratch: vec![0; TX_SLOT],
            }),
            rx: live(rx).map(|inj| RxFaults {
                inj,
                delay: DelayLine::new(TX_SLOT),
            }),
        }
    }

    pub fn inner(&self) -> &UdpDriver {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut UdpDriver {
        &mut self.inner
    }

    /// What the send-path and receive-path injectors did.
    pub fn counters(&self) -> (FaultCounters, FaultCounters) {
        (
            self.tx
                .as_ref()
                .map(|f| f.inj.counters())
                .unwrap_or_default(),
            self.rx
                .as_ref()
                .map(|f| f.inj.counters())
                .unwrap_or_default(),
        )
    }

    /// When a held packet must go at the latest.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.tx.as_ref().and_then(|f| f.delay.deadline());
        let r = self.rx.as_ref().and_then(|f| f.delay.deadline());
        t.into_iter().chain(r).min()
    }

    /// [`UdpDriver::has_pending`], or a packet held on the send path.
    pub fn has_pending(&self) -> bool {
        self.inner.has_pending() || self.tx.as_ref().is_some_and(|f| !f.delay.is_empty())
    }

    pub fn recv(&mut self) -> Result<usize, EngineError> {
        self.inner.recv()
    }

    /// [`UdpDriver::dispatch`] through the receive-path injector.
    pub fn dispatch(
        &mut self,
        now: Instant,
        mut handle: impl FnMut(&RecvMeta, &mut [u8]),
    ) -> usize {
        let Some(f) = &mut self.rx else {
            return self.inner.dispatch(handle);
        };
        let n = self.inner.dispatch(|m, b| f.pass(now, m, b, &mut handle));
        if f.delay.due(now) {
            f.release(&mut handle);
        }
        n
    }

    /// [`UdpDriver::transmit`] with the send-path injector between the
    /// endpoint and the batch.
    pub fn transmit(
        &mut self,
        now: Instant,
        fill: impl FnOnce(&mut FaultBatch<'_, '_>) -> usize,
    ) -> usize {
        let f = self.tx.as_mut();
        self.inner.transmit(|b| {
            let mut fb = FaultBatch { inner: b, f, now };
            fb.release_if_due();
            fill(&mut fb)
        })
    }

    pub fn wait(
        &self,
        extra: &[RawFd],
        writable: bool,
        timeout: Option<Duration>,
    ) -> io::Result<bool> {
        self.inner.wait(extra, writable, timeout)
    }
}

impl RxFaults {
    /// One received packet: judged, then passed on, dropped, doubled or
    /// held until the next one.
    fn pass(
        &mut self,
        now: Instant,
        m: &RecvMeta,
        b: &mut [u8],
        handle: &mut impl FnMut(&RecvMeta, &mut [u8]),
    ) {
        match self.inj.judge(b) {
            Fate::Drop => return,
            Fate::Deliver => handle(m, b),
            Fate::Duplicate => {
                handle(m, b);
                handle(m, b);
            }
            Fate::Delay => {
                if !self.delay.hold(b, *m, now) {
                    self.inj.delay_refused();
                    handle(m, b);
                }
                return;
            }
        }
        self.delay.note_passed();
        if self.delay.due(now) {
            self.release(handle);
        }
    }

    fn release(&mut self, handle: &mut impl FnMut(&RecvMeta, &mut [u8])) {
        if let Some((mut buf, len, m)) = self.delay.release() {
            handle(&m, &mut buf[..len]);
            self.delay.restore(buf);
        }
    }
}

/// The send batch as [`Faulty`] lends it: packets pass the injector on
/// their way into the driver's [`TxBatch`].
pub struct FaultBatch<'a, 'b> {
    inner: &'a mut TxBatch<'b>,
    f: Option<&'a mut TxFaults>,
    now: Instant,
}

impl FaultBatch<'_, '_> {
    /// Copies `pkt` into the driver's batch and commits it there; false
    /// if the batch is full.
    fn forward(inner: &mut TxBatch<'_>, pkt: &[u8], t: Transmit, src: Option<IpAddr>) -> bool {
        let Some(buf) = inner.buffer() else {
            return false;
        };
        buf[..pkt.len()].copy_from_slice(pkt);
        inner.commit(t, src);
        true
    }

    /// Sends the held packet, if it is due and there is room.
    fn release_if_due(&mut self) {
        let Some(f) = self.f.as_deref_mut() else {
            return;
        };
        if !f.delay.due(self.now) || !self.inner.has_room() {
            return;
        }
        if let Some((buf, len, (t, src, corrupt_with))) = f.delay.release() {
            Self::forward(self.inner, &buf[..len], t, src);
            f.delay.restore(buf);
            if let (Some(r), Some(p)) = (corrupt_with, self.inner.last_mut()) {
                corrupt(p, r);
            }
        }
    }
}

impl TransmitSink for FaultBatch<'_, '_> {
    fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    fn has_room(&self) -> bool {
        self.inner.has_room()
    }

    fn buffer(&mut self) -> Option<&mut [u8]> {
        match self.f.as_deref_mut() {
            None => self.inner.buffer(),
            Some(f) if self.inner.has_room() => Some(&mut f.scratch[..]),
            Some(_) => None,
        }
    }

    fn commit(&mut self, t: Transmit, src: Option<IpAddr>) {
        let Some(f) = self.f.as_deref_mut() else {
            return self.inner.commit(t, src);
        };
        let len = t.len.min(f.scratch.len());
        let v = f.inj.decide();
        match v.fate {
            Fate::Drop => return,
            Fate::Delay => {
                if f.delay
                    .hold(&f.scratch[..len], (t, src, v.corrupt), self.now)
                {
                    return;
                }
                f.inj.delay_refused();
            }
            Fate::Deliver | Fate::Duplicate => {}
        }
        Self::forward(self.inner, &f.scratch[..len], t, src);
        // Corrupted after the ICRC was written, so it no longer matches;
        // a duplicate is copied from the clean packet.
        if let (Some(r), Some(p)) = (v.corrupt, self.inner.last_mut()) {
            corrupt(p, r);
        }
        if v.fate == Fate::Duplicate && !Self::forward(self.inner, &f.scratch[..len], t, src) {
            f.inj.duplicate_refused();
        }
        f.delay.note_passed();
        self.release_if_due();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_rates() {
        let cfg = FaultConfig {
            seed: 42,
            drop: 0.01,
            duplicate: 0.02,
            reorder: 0.03,
            corrupt: 0.04,
        };
        let mut a = FaultInjector::new(cfg);
        let mut b = FaultInjector::new(cfg);
        let n = 200_000;
        for _ in 0..n {
            let mut p1 = [0u8; 64];
            let mut p2 = [0u8; 64];
            assert_eq!(a.judge(&mut p1), b.judge(&mut p2));
            assert_eq!(p1, p2);
            assert_eq!(p1[4], 0, "byte 4 never corrupted");
            let flipped: u32 = p1.iter().map(|b| b.count_ones()).sum();
            assert!(flipped <= 1);
        }
        let c = a.counters();
        assert_eq!(c.seen, n);
        let near = |x: u64, p: f64| {
            let want = p * n as f64;
            (x as f64 - want).abs() < want * 0.15 + 10.0
        };
        assert!(near(c.dropped, 0.01), "{c:?}");
        // Duplicates/reorders/corruption are judged only for undropped packets.
        assert!(near(c.corrupted, 0.04 * 0.99), "{c:?}");
        assert!(near(c.duplicated, 0.02 * 0.99), "{c:?}");
        assert!(near(c.reordered, 0.03 * 0.99 * 0.98), "{c:?}");
        let mut z = FaultInjector::new(FaultConfig::NONE);
        let mut p = [7u8; 16];
        for _ in 0..1000 {
            assert_eq!(z.judge(&mut p), Fate::Deliver);
        }
        assert_eq!(p, [7u8; 16]);
    }

    #[test]
    fn other_seed_other_fates() {
        let mk = |seed| {
            let mut f = FaultInjector::new(FaultConfig {
                seed,
                drop: 0.5,
                ..FaultConfig::NONE
            });
            (0..64)
                .map(|_| f.judge(&mut [0u8; 8]) == Fate::Drop)
                .collect::<Vec<_>>()
        };
        assert_ne!(mk(1), mk(2));
        assert_eq!(mk(3), mk(3));
    }

    #[test]
    fn delay_line() {
        let t0 = Instant::now();
        let mut d = DelayLine::<u8>::new(16);
        assert!(d.hold(&[1, 2, 3], 9, t0));
        assert!(!d.hold(&[4], 1, t0));
        assert!(!d.due(t0));
        d.note_passed();
        assert!(d.due(t0));
        let (buf, len, m) = d.release().unwrap();
        assert_eq!((&buf[..len], m), (&[1u8, 2, 3][..], 9));
        d.restore(buf);
        assert!(d.is_empty());
        assert!(d.hold(&[5], 2, t0));
        assert!(d.due(t0 + MAX_HOLD));
    }
}
