//! Arbitrary bytes as a client's ring slots, through the daemon's own
//! decoder into a pair of queue pairs that execute them against the
//! daemon's own registered-memory table.
//!
//! A client is not trusted. Whatever it leaves in its SQ and RQ slots, the
//! daemon must answer with an error completion or a refused post, never
//! panic, and never touch memory outside what that client registered.
//! [`run`] checks all three:
//! - each slot goes through `rxud::daemon::wqe::{send_wqe, recv_wqe}`, the
//!   functions the daemon's datapath calls on a slot copied out of a ring;
//!   an `Err` is the daemon's error completion (it must name the slot's
//!   wr_id when the header is there);
//! - a decoded WQE is posted to a sans-IO transport QP (what the engine
//!   does with it) and run against its peer QP for a bounded number of
//!   steps; any panic is a finding;
//! - memory goes through [`Recorder`], a `Memory` that hands every access
//!   to the daemon's `DeviceMemory` (the checks the daemon relies on: key,
//!   PD, access flags, bounds) and records it. Every access `DeviceMemory`
//!   lets through must lie inside a region this client registered, and
//!   the guard bytes around the registered buffers must be untouched.
//!
//! Keys: the daemon draws random 32-bit keys, which arbitrary bytes would
//! never hit. The recorder maps key values 1..=KEYS in a slot to the
//! registered regions' real keys (every other value passes through as is,
//! so invalid keys are exercised too).

use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rxu_abi::proto::abi::{recv_slot_size, send_slot_size};
use rxud::daemon::wqe::{recv_wqe, send_wqe, SqLimits};
use rxud::mem::DeviceMemory;
use transport::qp::{
    access, AtomicOp, Env, MemError, Memory, MwBind, Qp, QpAttr, QpConfig, QpState, QpType, RxMeta,
};
use transport::wire::{Packet, MAX_PACKET};
use transport::Psn;

/// Regions the fuzzed client registers.
pub const KEYS: u32 = 3;
/// Bytes per region, and guard bytes on each side of it.
const REGION: usize = 4096;
const GUARD: usize = 256;
const GUARD_BYTE: u8 = 0xa5;
const CLIENT: u32 = 1;
const PD: u32 = 1;
/// Queue limits of the fuzzed QPs (the slot sizes follow from them).
const MAX_SGE: u32 = 4;
const MAX_INLINE: u32 = 64;
const QKEY: u32 = 0x1111_1111;
const QPN_A: u32 = 0x11;
const QPN_B: u32 = 0x22;
/// Slots one input may hold.
const MAX_SLOTS: usize = 6;
/// Transmit/deliver rounds, and timer firings, per input.
const ROUNDS: usize = 32;
const TIMEOUTS: usize = 4;

/// One registered region as the client sees it.
#[derive(Clone, Copy, Debug)]
struct Region {
    key: u32,
    addr: u64,
    iova: u64,
    len: u64,
}

/// What happened to one input, for the caller's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Slots the decoder refused (the daemon's error completions).
    pub bad_slots: u32,
    /// WQEs the transport refused at post time.
    pub refused: u32,
    /// WQEs posted.
    pub posted: u32,
    /// Memory accesses that went through, and that were refused.
    pub accesses: u32,
    pub denied: u32,
    pub completions: u32,
}

/// The [`Memory`] the QPs see: the daemon's `DeviceMemory` underneath,
/// every access checked against the client's regions afterwards.
pub struct Recorder<'a, M: Memory = DeviceMemory> {
    mem: &'a mut M,
    regions: &'a [Region],
    pub accesses: u32,
    pub denied: u32,
}

impl<M: Memory> Recorder<'_, M> {
    /// Slot key values 1..=KEYS name the registered regions.
    fn key(&self, k: u32) -> u32 {
        match k.checked_sub(1).and_then(|i| self.regions.get(i as usize)) {
            Some(r) => r.key,
            None => k,
        }
    }

    /// An access `DeviceMemory` allowed must lie in the region of its key,
    /// addressed by client address (local) or by iova (remote).
    fn allowed(&mut self, what: &str, key: u32, at: u64, len: u64, remote: bool) {
        self.accesses += 1;
        let r = self
            .regions
            .iter()
            .find(|r| r.key == key)
            .unwrap_or_else(|| panic!("{what}: key {key:#x} is not the client's, yet allowed"));
        let base = if remote { r.iova } else { r.addr };
        let end = at.checked_add(len).expect("access range wraps");
        assert!(
            at >= base && end <= base + r.len,
            "{what}: [{at:#x}, {end:#x}) outside region [{base:#x}, +{:#x}) of key {key:#x}",
            r.len
        );
    }

    fn note<T>(
        &mut self,
        r: Result<T, MemError>,
        check: impl FnOnce(&mut Self),
    ) -> Result<T, MemError> {
        match &r {
            Ok(_) => check(self),
            Err(_) => self.denied += 1,
        }
        r
    }
}

impl<M: Memory> Memory for Recorder<'_, M> {
    fn read_local(
        &mut self,
        pd: u32,
        lkey: u32,
        addr: u64,
        dst: &mut [u8],
    ) -> Result<(), MemError> {
        let k = self.key(lkey);
        let n = dst.len() as u64;
        let r = self.mem.read_local(pd, k, addr, dst);
        self.note(r, |s| s.allowed("read_local", k, addr, n, false))
    }

    fn write_local(&mut self, pd: u32, lkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError> {
        let k = self.key(lkey);
        let r = self.mem.write_local(pd, k, addr, src);
        self.note(r, |s| {
            s.allowed("write_local", k, addr, src.len() as u64, false)
        })
    }

    fn check_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: u32,
    ) -> Result<(), MemError> {
        let k = self.key(rkey);
        let r = self.mem.check_remote(pd, qpn, k, va, len, need);
        // A check moves no byte; a zero-length one may name any address.
        self.note(r, |s| {
            if len > 0 {
                s.allowed("check_remote", k, va, len, true)
            }
        })
    }

    fn read_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        dst: &mut [u8],
    ) -> Result<(), MemError> {
        let k = self.key(rkey);
        let n = dst.len() as u64;
        let r = self.mem.read_remote(pd, qpn, k, va, dst);
        self.note(r, |s| s.allowed("read_remote", k, va, n, true))
    }

    fn write_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        src: &[u8],
    ) -> Result<(), MemError> {
        let k = self.key(rkey);
        let r = self.mem.write_remote(pd, qpn, k, va, src);
        self.note(r, |s| {
            s.allowed("write_remote", k, va, src.len() as u64, true)
        })
    }

    fn atomic_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        op: AtomicOp,
    ) -> Result<u64, MemError> {
        let k = self.key(rkey);
        let r = self.mem.atomic_remote(pd, qpn, k, va, op);
        self.note(r, |s| s.allowed("atomic_remote", k, va, 8, true))
    }

    fn invalidate(&mut self, pd: u32, qpn: u32, key: u32) -> Result<(), MemError> {
        let k = self.key(key);
        let r = self.mem.invalidate(pd, qpn, k);
        self.note(r, |s| {
            assert!(
                s.regions.iter().any(|g| g.key == k),
                "invalidated a key not the client's"
            );
        })
    }

    /// The model allocates no windows: every bind must be refused.
    fn bind_mw(&mut self, pd: u32, qpn: u32, bind: &MwBind) -> Result<(), MemError> {
        let r = self.mem.bind_mw(pd, qpn, bind);
        self.note(r, |_| panic!("bound a window the client never allocated"))
    }
}

/// Where the client's memory is mapped: a fixed address, so inputs can
/// name registered addresses (and addresses just outside them).
pub const BASE: u64 = 0x2000_0000_0000;
const PER: usize = GUARD + REGION + GUARD;
const MAP_LEN: usize = PER * KEYS as usize;

/// The client address of region `i` (0-based; slot key `i + 1`).
pub const fn region_addr(i: usize) -> u64 {
    BASE + (i * PER + GUARD) as u64
}

/// The client's memory: `KEYS` regions, each between guard bytes, in one
/// mapping at [`BASE`] made once and shared by every run (one at a time).
struct ClientMemory {
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl ClientMemory {
    fn new() -> ClientMemory {
        static MAP: OnceLock<Mutex<()>> = OnceLock::new();
        let lock = MAP.get_or_init(|| {
            // SAFETY: an anonymous private mapping at an address nothing
            // else uses (MAP_FIXED_NOREPLACE fails instead of replacing
            // one); it is never unmapped.
            let p = unsafe {
                libc::mmap(
                    BASE as *mut libc::c_void,
                    MAP_LEN,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            assert_eq!(
                p as u64, BASE,
                "cannot map the client's memory at {BASE:#x}"
            );
            Mutex::new(())
        });
        let mut m = ClientMemory {
            _one_at_a_time: lock.lock().unwrap_or_else(|p| p.into_inner()),
        };
        let b = m.bytes_mut();
        b.fill(GUARD_BYTE);
        for c in b.chunks_mut(PER) {
            c[GUARD..GUARD + REGION].fill(0);
        }
        m
    }

    /// The whole mapping. Only ever borrowed briefly, while no access
    /// through /proc/self/mem is under way.
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is MAP_LEN bytes at BASE, lives forever, and
        // the lock held by `self` keeps other runs out of it.
        unsafe { std::slice::from_raw_parts_mut(BASE as *mut u8, MAP_LEN) }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: as in bytes_mut.
        unsafe { std::slice::from_raw_parts(BASE as *const u8, MAP_LEN) }
    }

    fn guards_intact(&self) -> bool {
        self.bytes().chunks(PER).all(|c| {
            c[..GUARD].iter().all(|&b| b == GUARD_BYTE)
                && c[GUARD + REGION..].iter().all(|&b| b == GUARD_BYTE)
        })
    }
}

fn own_mem() -> OwnedFd {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")
        .expect("open /proc/self/mem")
        .into()
}

fn addr(n: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, n])
}

fn qp(qpn: u32, qp_type: QpType, peer_qpn: u32, peer: IpAddr) -> Qp {
    let mut q = Qp::new(QpConfig {
        qpn,
        qp_type,
        pd: PD,
        srq: None,
        sq_sig_all: false,
        max_send_wr: 16,
        max_recv_wr: 16,
    });
    let all =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let steps = [
        QpAttr {
            state: Some(QpState::Init),
            access_flags: Some(all),
            qkey: Some(QKEY),
            ..Default::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(transport::qp::Mtu::M1024),
            dest_qpn: (qp_type != QpType::Ud).then_some(peer_qpn),
            dest_addr: (qp_type != QpType::Ud).then_some(peer),
            rq_psn: Some(Psn::new(0)),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(1),
            ..Default::default()
        },
        QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(0)),
            timeout: Some(1),
            retry_cnt: Some(1),
            rnr_retry: Some(1),
            max_rd_atomic: Some(4),
            ..Default::default()
        },
    ];
    for a in &steps {
        q.modify(a).expect("QP setup");
    }
    q
}

/// The send slot size of the fuzzed QPs.
pub fn send_size() -> usize {
    send_slot_size(MAX_SGE, MAX_INLINE) as usize
}

/// The receive slot size of the fuzzed QPs.
pub fn recv_size() -> usize {
    recv_slot_size(MAX_SGE) as usize
}

/// Splits an input into (QP type, slots). Byte 0 picks the QP type; then
/// each slot is a selector byte (even: A's send queue, odd: B's receive
/// queue) and up to a slot's worth of bytes, zero-padded as a ring slot
/// copied out of shared memory is always whole.
pub fn split(data: &[u8]) -> (QpType, Vec<(bool, Vec<u8>)>) {
    let qp_type = match data.first().copied().unwrap_or(0) % 3 {
        0 => QpType::Rc,
        1 => QpType::Uc,
        _ => QpType::Ud,
    };
    let mut rest = data.get(1..).unwrap_or(&[]);
    let mut slots = Vec::new();
    while let Some((&sel, tail)) = rest.split_first() {
        if slots.len() == MAX_SLOTS {
            break;
        }
        let send = sel % 2 == 0;
        let size = if send { send_size() } else { recv_size() };
        let n = size.min(tail.len());
        let mut slot = vec![0u8; size];
        slot[..n].copy_from_slice(&tail[..n]);
        slots.push((send, slot));
        rest = &tail[n..];
    }
    (qp_type, slots)
}

/// Runs one input; panics on a finding.
pub fn run(data: &[u8]) -> Outcome {
    let (qp_type, slots) = split(data);
    let mut out = Outcome::default();
    let client = ClientMemory::new();
    let mut dev = DeviceMemory::new();
    dev.add_client(CLIENT, own_mem());
    let mut regions = Vec::new();
    let all =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    for i in 0..KEYS as usize {
        let a = region_addr(i);
        // Region 1 is addressed remotely by a zero-based iova.
        let iova = if i == 1 { 0 } else { a };
        let k = dev
            .register(CLIENT, PD, a, REGION as u64, iova, all)
            .expect("register the client's buffer");
        regions.push(Region {
            key: k.lkey,
            addr: a,
            iova,
            len: REGION as u64,
        });
    }
    let (aa, ab) = (addr(1), addr(2));
    let mut a = qp(QPN_A, qp_type, QPN_B, ab);
    let mut b = qp(QPN_B, qp_type, QPN_A, aa);
    let lim = SqLimits {
        qp_type,
        max_sge: MAX_SGE,
        max_inline: MAX_INLINE,
        qkey: QKEY,
        ipv6: false,
        dual: false,
    };
    for (send, slot) in &slots {
        let wr_id = u64::from_le_bytes(slot[..8].try_into().expect("8 bytes"));
        if *send {
            match send_wqe(slot, &lim) {
                Ok(w) => match a.post_send(w) {
                    Ok(()) => out.posted += 1,
                    Err(_) => out.refused += 1,
                },
                Err(bad) => {
                    assert_eq!(bad.wr_id, wr_id, "error completion names its slot");
                    out.bad_slots += 1;
                }
            }
        } else {
            match recv_wqe(slot, MAX_SGE) {
                Ok(w) => match b.post_recv(w) {
                    Ok(()) => out.posted += 1,
                    Err(_) => out.refused += 1,
                },
                Err(bad) => {
                    assert_eq!(bad.wr_id, wr_id, "error completion names its slot");
                    out.bad_slots += 1;
                }
            }
        }
    }
    let mut rec = Recorder {
        mem: &mut dev,
        regions: &regions,
        accesses: 0,
        denied: 0,
    };
    let mut now = Instant::now();
    let mut buf = vec![0u8; MAX_PACKET];
    // Run until quiet, then let the retransmission and RNR timers fire a
    // few times, each followed by a run until quiet. Bounded by the
    // constants, whatever the QPs do.
    for t in 0..=TIMEOUTS {
        if t > 0 {
            now += Duration::from_secs(5);
            for q in [&mut a, &mut b] {
                let mut env = Env {
                    mem: &mut rec,
                    srq: None,
                };
                q.handle_timeout(now, &mut env);
            }
        }
        for _ in 0..ROUNDS {
            let moved = shuttle(&mut a, &mut b, (aa, ab), now, &mut rec, &mut buf)
                + shuttle(&mut b, &mut a, (ab, aa), now, &mut rec, &mut buf);
            if moved == 0 {
                break;
            }
        }
    }
    for q in [&mut a, &mut b] {
        while q.poll_completion().is_some() {
            out.completions += 1;
        }
    }
    out.accesses = rec.accesses;
    out.denied = rec.denied;
    assert!(
        client.guards_intact(),
        "bytes around a registered region changed"
    );
    out
}

/// Moves up to a burst of packets from `tx` to `rx`; returns how many.
fn shuttle(
    tx: &mut Qp,
    rx: &mut Qp,
    (src, dst): (IpAddr, IpAddr),
    now: Instant,
    rec: &mut Recorder<'_, DeviceMemory>,
    buf: &mut [u8],
) -> usize {
    let meta = RxMeta {
        src,
        src_port: 0xc001,
        dst,
        tos: 0,
        ttl: 64,
        ip_id: 0,
        flow_label: 0,
    };
    for n in 0..8 {
        let mut env = Env {
            mem: &mut *rec,
            srq: None,
        };
        let Some(t) = tx.poll_transmit(now, &mut env, buf) else {
            return n;
        };
        let pkt = Packet::parse(&buf[..t.len]).expect("a QP's own packet parses");
        rx.handle_packet(now, &pkt, &meta, &mut env);
    }
    8
}

#[cfg(test)]
mod tests {
    use super::*;
    use transport::qp::BufferMemory;

    /// A memory table that lets everything through, as a broken bounds
    /// check would: the recorder must catch it.
    fn lax() -> BufferMemory {
        let mut m = BufferMemory::new();
        m.register(PD, 0x1000, vec![0; 1 << 16], u32::MAX);
        m
    }

    #[test]
    #[should_panic(expected = "outside region")]
    fn recorder_catches_an_access_past_a_region() {
        let mut m = lax();
        let key = m.register(PD, 0x1000, vec![0; 1 << 16], u32::MAX);
        let regions = [Region {
            key,
            addr: 0x1000,
            iova: 0x1000,
            len: 4096,
        }];
        let mut rec = Recorder {
            mem: &mut m,
            regions: &regions,
            accesses: 0,
            denied: 0,
        };
        let mut b = [0u8; 16];
        // The lax table allows 4096 + 8 .. +24; the client registered 4096.
        let _ = rec.read_local(PD, key, 0x1000 + 4096 + 8, &mut b);
    }

    #[test]
    #[should_panic(expected = "not the client's")]
    fn recorder_catches_a_foreign_key() {
        let mut m = lax();
        let key = m.register(PD, 0x1000, vec![0; 64], u32::MAX);
        let mut rec = Recorder {
            mem: &mut m,
            regions: &[],
            accesses: 0,
            denied: 0,
        };
        let _ = rec.write_remote(PD, 1, key, 0x1000, &[1, 2, 3]);
    }

    #[test]
    fn inputs_split_into_whole_slots() {
        let mut d = vec![2u8, 0];
        d.extend([7u8; 10]);
        let (t, slots) = split(&d);
        assert_eq!(t, QpType::Ud);
        assert_eq!(slots.len(), 1);
        assert!(slots[0].0);
        assert_eq!(slots[0].1.len(), send_size());
        assert_eq!(&slots[0].1[..10], &[7u8; 10]);
        assert!(slots[0].1[10..].iter().all(|&b| b == 0));
    }
}
