//! Per-client and per-user quotas: what one connection (session) and one
//! uid may hold of each kind of object, so that no client or user takes
//! the whole device or exhausts the daemon. The device totals
//! (`verbs::limits`, `ibv_query_device`) still apply on top.
//!
//! One place holds the limits and the counts: a request handler asks
//! [`Quota::charge`] before it creates an object and calls
//! [`Quota::release`] when it destroys one; [`Quota::close`] gives back
//! everything a session still held when it goes. Refusals are ENOMEM, as
//! the kernel's uverbs gives when an object cannot be had (and ib_umem_get
//! past RLIMIT_MEMLOCK), except connections past the user's share, which
//! are EDQUOT: the kernel has no such limit, and "the user's quota is used
//! up" is what the client has to be told.
//!
//! Configured with `rxud --limit` or `RXU_LIMITS` (comma-separated
//! `session.KIND=N`, `uid.KIND=N`, `hello_timeout_ms=N`), which `rxu up`
//! passes on through the environment.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::verbs::limits;

use super::reply::Refused;

/// What is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Control connections (counted per uid).
    Sessions,
    /// Connections that have not said Hello yet (per uid).
    Unhello,
    Qps,
    Cqs,
    /// Sum of the CQs' granted depths (ring slots and the backlog behind
    /// them are sized from it).
    CqDepth,
    Srqs,
    /// Memory regions and memory windows (both are key table entries).
    Mrs,
    /// Registered bytes (saturating: an implicit ODP region is 2^64 - 1).
    MrBytes,
    Pds,
    /// File descriptors the daemon keeps for a client: its memory, async
    /// socket and doorbell, its cmd_fd, completion channel and rdma_cm
    /// event channel sockets.
    Fds,
    Xrcds,
    CmIds,
    McastJoins,
    /// Work requests the daemon may hold in the transport for a client:
    /// the send and receive depths of its QPs and its SRQs' depths (the
    /// daemon takes no more than that from a queue's ring).
    Wqes,
}

pub const KINDS: [Kind; 14] = [
    Kind::Sessions,
    Kind::Unhello,
    Kind::Qps,
    Kind::Cqs,
    Kind::CqDepth,
    Kind::Srqs,
    Kind::Mrs,
    Kind::MrBytes,
    Kind::Pds,
    Kind::Fds,
    Kind::Xrcds,
    Kind::CmIds,
    Kind::McastJoins,
    Kind::Wqes,
];

const N: usize = KINDS.len();

impl Kind {
    /// The name `--limit` and `rxu status` use.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Sessions => "sessions",
            Kind::Unhello => "unhello",
            Kind::Qps => "qps",
            Kind::Cqs => "cqs",
            Kind::CqDepth => "cq_depth",
            Kind::Srqs => "srqs",
            Kind::Mrs => "mrs",
            Kind::MrBytes => "mr_bytes",
            Kind::Pds => "pds",
            Kind::Fds => "fds",
            Kind::Xrcds => "xrcds",
            Kind::CmIds => "cm_ids",
            Kind::McastJoins => "mcast_joins",
            Kind::Wqes => "wqes",
        }
    }

    fn from_name(s: &str) -> Option<Kind> {
        KINDS.iter().copied().find(|k| k.name() == s)
    }

    fn idx(self) -> usize {
        self as usize
    }

    /// The errno a refusal of this kind carries (see the module doc).
    pub fn errno(self) -> i32 {
        match self {
            Kind::Sessions | Kind::Unhello => libc::EDQUOT,
            _ => libc::ENOMEM,
        }
    }
}

/// The limit of one kind for one session and for all sessions of a uid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub per_session: u64,
    pub per_uid: u64,
}

/// Every limit, and how long a connection may stay silent before Hello.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    table: [Limit; N],
    pub hello_timeout: Duration,
}

const fn lim(per_session: u64, per_uid: u64) -> Limit {
    Limit {
        per_session,
        per_uid,
    }
}

/// The defaults. Per uid about half the device's total, so one user
/// cannot take all of it and a second finds room; per session half of
/// that again, so one runaway process leaves its own user room too. The
/// largest runs the tests make stay far below: `ib_write_bw -q 1000` (one
/// process: 1000 QPs, 2 CQs, depths 128 + 512 a QP), 8 processes x 16 QPs,
/// MPI/UCX (a context, a few CQs of a few thousand entries per rank).
impl Default for Limits {
    fn default() -> Limits {
        let qp = u64::from(limits::MAX_QP);
        let cq = u64::from(limits::MAX_CQ);
        let srq = u64::from(limits::MAX_SRQ);
        let mr = u64::from(limits::MAX_MR);
        let pd = u64::from(limits::MAX_PD);
        let mut table = [lim(u64::MAX, u64::MAX); N];
        let mut set = |k: Kind, l: Limit| table[k.idx()] = l;
        // Connections: a rank of an MPI job holds 2-3 (verbs, rdma_cm,
        // the preload's uverbs); 1024 is 300+ ranks of one user.
        set(Kind::Sessions, lim(1, 1024));
        // Connected and silent: a client says Hello right away; a few
        // dozen starting at once is already a lot.
        set(Kind::Unhello, lim(1, 64));
        // 8192 per uid (-q 1000 twice over, 8 x 16 many times).
        set(Kind::Qps, lim(qp / 4, qp / 2));
        set(Kind::Cqs, lim(cq / 4, cq / 2));
        // Total CQ depth: 2^22 entries are 256 MiB of ring (64-byte CQEs)
        // per uid, and the daemon's backlog is bounded by the same figure;
        // MPI with 64 ranks x 2 CQs x 8k entries is 1M.
        set(Kind::CqDepth, lim(1 << 21, 1 << 22));
        set(Kind::Srqs, lim(srq / 4, srq / 2));
        // MPI registration caches hold many regions; half the table.
        set(Kind::Mrs, lim(mr / 4, mr / 2));
        // Nothing is pinned (regions are read through /proc/<pid>/mem),
        // so bytes cost the daemon nothing: no limit unless set (an
        // administrator may want RLIMIT_MEMLOCK's role back).
        set(Kind::MrBytes, lim(u64::MAX, u64::MAX));
        set(Kind::Pds, lim(pd / 4, pd / 2));
        // The daemon's descriptors: 3 per context at Hello, 1 per
        // completion channel CQ and rdma_cm channel. -q 1000 with events
        // on a CQ each is ~1000; the daemon raises RLIMIT_NOFILE to its
        // hard limit (often 2^19-2^20), a few users' shares.
        set(Kind::Fds, lim(8 * 1024, 16 * 1024));
        // A domain per process is the usual; 4096 leave room for many.
        set(Kind::Xrcds, lim(1024, 4096));
        // A connection is one id each side; a listener's backlog more.
        set(Kind::CmIds, lim(4096, 8192));
        // An rdma_cm UD job joins a group or two per id; the device
        // receives few IP groups whatever the count (`cm_join.rs`).
        set(Kind::McastJoins, lim(256, 1024));
        // -q 1000 needs 640k (128 + 512 a QP); a queued send WQE costs
        // the daemon a few hundred bytes, so 2^21 per uid is under 1 GiB.
        set(Kind::Wqes, lim(1 << 20, 1 << 21));
        Limits {
            table,
            hello_timeout: Duration::from_secs(5),
        }
    }
}

/// A `--limit` / `RXU_LIMITS` item that is not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad limit {item:?}: {why} (session.KIND=N, uid.KIND=N or hello_timeout_ms=N; KIND one of {kinds})")]
pub struct LimitError {
    item: String,
    why: &'static str,
    kinds: String,
}

impl Limits {
    pub fn get(&self, k: Kind) -> Limit {
        self.table[k.idx()]
    }

    pub fn set(&mut self, k: Kind, l: Limit) {
        self.table[k.idx()] = l;
    }

    /// Applies a comma-separated list of `session.KIND=N`, `uid.KIND=N`
    /// and `hello_timeout_ms=N` (N may be `max` for no limit).
    pub fn apply(&mut self, spec: &str) -> Result<(), LimitError> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let err = |why| LimitError {
                item: item.to_owned(),
                why,
                kinds: KINDS.map(Kind::name).join(", "),
            };
            let (key, value) = item.split_once('=').ok_or_else(|| err("no '='"))?;
            let n = match value.trim() {
                "max" => u64::MAX,
                v => v.parse::<u64>().map_err(|_| err("not a number"))?,
            };
            let key = key.trim();
            if key == "hello_timeout_ms" {
                if n == 0 {
                    return Err(err("a timeout of 0 closes every client"));
                }
                self.hello_timeout = Duration::from_millis(n);
                continue;
            }
            let (scope, kind) = key.split_once('.').ok_or_else(|| err("no scope"))?;
            let k = Kind::from_name(kind).ok_or_else(|| err("unknown kind"))?;
            let l = &mut self.table[k.idx()];
            match scope {
                "session" => l.per_session = n,
                "uid" => l.per_uid = n,
                _ => return Err(err("scope is session or uid")),
            }
        }
        Ok(())
    }
}

type Counts = [u64; N];

/// The limits and what every session and uid holds now.
#[derive(Default)]
pub struct Quota {
    limits: Limits,
    /// Session id -> its uid and its counts.
    sessions: HashMap<u32, (u32, Counts)>,
    /// Uid -> the sum of its sessions' counts (gone when it has none).
    uids: BTreeMap<u32, Counts>,
}

impl Quota {
    pub fn new(limits: Limits) -> Quota {
        Quota {
            limits,
            ..Quota::default()
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A connection of `uid` arrived: refused (EDQUOT) past the uid's
    /// share of connections or of silent ones.
    pub fn open(&mut self, id: u32, uid: u32) -> Result<(), Refused> {
        let used = self.uids.get(&uid).copied().unwrap_or([0; N]);
        for k in [Kind::Sessions, Kind::Unhello] {
            let max = self.limits.get(k).per_uid;
            if used[k.idx()] >= max {
                return Err(Refused {
                    errno: k.errno(),
                    msg: format!(
                        "uid {uid} has {max} {} (rxud's limit uid.{}); close some first",
                        match k {
                            Kind::Sessions => "connections to this device",
                            _ => "connections that have not said Hello",
                        },
                        k.name()
                    ),
                });
            }
        }
        self.sessions.insert(id, (uid, [0; N]));
        self.add(id, Kind::Sessions, 1);
        self.add(id, Kind::Unhello, 1);
        Ok(())
    }

    /// The session said Hello.
    pub fn hello(&mut self, id: u32) {
        let held = self.used(id, Kind::Unhello);
        self.release(id, Kind::Unhello, held);
    }

    /// The uid of session `id` (None: not opened here).
    pub fn uid_of(&self, id: u32) -> Option<u32> {
        self.sessions.get(&id).map(|&(u, _)| u)
    }

    /// What session `id` holds of `k`.
    pub fn used(&self, id: u32, k: Kind) -> u64 {
        self.sessions.get(&id).map_or(0, |(_, c)| c[k.idx()])
    }

    /// What every uid holds, by uid.
    pub fn by_uid(&self) -> impl Iterator<Item = (u32, Vec<(Kind, u64)>)> + '_ {
        self.uids
            .iter()
            .map(|(&u, c)| (u, KINDS.iter().map(|&k| (k, c[k.idx()])).collect()))
    }

    /// Whether session `id` may take `n` more of `k`.
    pub fn check(&self, id: u32, k: Kind, n: u64) -> Result<(), Refused> {
        let Some(&(uid, mine)) = self.sessions.get(&id) else {
            // A session the quota does not know (in-process tests that
            // build sessions by hand) is held to the device totals only.
            return Ok(());
        };
        let theirs = self.uids.get(&uid).copied().unwrap_or([0; N]);
        let l = self.limits.get(k);
        let over = |used: u64, max: u64| used.saturating_add(n) > max;
        let (scope, max) = if over(mine[k.idx()], l.per_session) {
            ("this client's", l.per_session)
        } else if over(theirs[k.idx()], l.per_uid) {
            ("uid's", l.per_uid)
        } else {
            return Ok(());
        };
        Err(Refused {
            errno: k.errno(),
            msg: format!(
                "{scope} {} limit ({max}) reached{}",
                k.name(),
                if scope == "uid's" {
                    format!(" for uid {uid}; rxud --limit uid.{}=N", k.name())
                } else {
                    format!("; rxud --limit session.{}=N", k.name())
                }
            ),
        })
    }

    /// Takes `n` of `k` for session `id` if the limits allow.
    pub fn charge(&mut self, id: u32, k: Kind, n: u64) -> Result<(), Refused> {
        self.check(id, k, n)?;
        self.add(id, k, n);
        Ok(())
    }

    /// Takes `n` of `k` without a check (an object handed over from a
    /// session that left, or one already made).
    pub fn add(&mut self, id: u32, k: Kind, n: u64) {
        let Some((uid, c)) = self.sessions.get_mut(&id) else {
            return;
        };
        c[k.idx()] = c[k.idx()].saturating_add(n);
        let u = self.uids.entry(*uid).or_insert([0; N]);
        u[k.idx()] = u[k.idx()].saturating_add(n);
    }

    /// Gives back `n` of `k` (never below zero).
    pub fn release(&mut self, id: u32, k: Kind, n: u64) {
        let Some((uid, c)) = self.sessions.get_mut(&id) else {
            return;
        };
        let n = n.min(c[k.idx()]);
        c[k.idx()] -= n;
        if let Some(u) = self.uids.get_mut(uid) {
            u[k.idx()] = u[k.idx()].saturating_sub(n);
        }
    }

    /// Sets what session `id` holds of `k` (for kinds counted by another
    /// part, as the rdma_cm ids).
    pub fn set(&mut self, id: u32, k: Kind, n: u64) {
        let held = self.used(id, k);
        if n > held {
            self.add(id, k, n - held);
        } else {
            self.release(id, k, held - n);
        }
    }

    /// Session `id` is gone: everything it held goes back.
    pub fn close(&mut self, id: u32) {
        let Some((uid, c)) = self.sessions.remove(&id) else {
            return;
        };
        if let Some(u) = self.uids.get_mut(&uid) {
            for (a, b) in u.iter_mut().zip(c) {
                *a = a.saturating_sub(b);
            }
            if u.iter().all(|&v| v == 0) {
                self.uids.remove(&uid);
            }
        }
    }

    /// Nothing held by anyone (for tests of teardown).
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.uids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Quota {
        let mut l = Limits::default();
        l.apply("session.qps=2, uid.qps=3, uid.sessions=2").unwrap();
        Quota::new(l)
    }

    #[test]
    fn session_then_uid_limit_then_release() {
        let mut q = small();
        q.open(1, 1000).unwrap();
        q.open(2, 1000).unwrap();
        let e = q.open(3, 1000).unwrap_err();
        assert_eq!(e.errno, libc::EDQUOT);
        q.open(3, 1001).unwrap();
        q.charge(1, Kind::Qps, 1).unwrap();
        q.charge(1, Kind::Qps, 1).unwrap();
        let e = q.charge(1, Kind::Qps, 1).unwrap_err();
        assert_eq!(e.errno, libc::ENOMEM);
        assert!(e.msg.contains("this client's qps limit (2)"), "{}", e.msg);
        q.charge(2, Kind::Qps, 1).unwrap();
        let e = q.charge(2, Kind::Qps, 1).unwrap_err();
        assert!(e.msg.contains("uid 1000"), "{}", e.msg);
        // Another uid is not affected.
        q.charge(3, Kind::Qps, 2).unwrap();
        q.release(1, Kind::Qps, 1);
        q.charge(2, Kind::Qps, 1).unwrap();
        for id in [1, 2, 3] {
            q.close(id);
        }
        assert!(q.is_empty());
    }

    #[test]
    fn hello_releases_the_silent_count() {
        let mut l = Limits::default();
        l.apply("uid.unhello=1").unwrap();
        let mut q = Quota::new(l);
        q.open(1, 5).unwrap();
        assert_eq!(q.open(2, 5).unwrap_err().errno, libc::EDQUOT);
        q.hello(1);
        q.open(2, 5).unwrap();
        q.close(1);
        q.close(2);
        assert!(q.is_empty());
    }

    #[test]
    fn bad_specs_are_refused() {
        let mut l = Limits::default();
        for bad in [
            "qps=1",
            "session.nope=1",
            "uid.qps=x",
            "world.qps=1",
            "hello_timeout_ms=0",
        ] {
            assert!(l.apply(bad).is_err(), "{bad}");
        }
        l.apply("uid.mr_bytes=max, hello_timeout_ms=250").unwrap();
        assert_eq!(l.get(Kind::MrBytes).per_uid, u64::MAX);
        assert_eq!(l.hello_timeout, Duration::from_millis(250));
    }

    #[test]
    fn defaults_fit_the_runs_the_tests_make() {
        let l = Limits::default();
        // ib_write_bw -q 1000 in one process.
        assert!(l.get(Kind::Qps).per_session >= 1000);
        assert!(l.get(Kind::Wqes).per_session >= 1000 * (128 + 512));
        // 8 processes x 16 QPs of one user.
        assert!(l.get(Kind::Qps).per_uid >= 8 * 16);
        assert!(l.get(Kind::Sessions).per_uid >= 64);
        for k in KINDS {
            let x = l.get(k);
            assert!(x.per_session <= x.per_uid, "{}", k.name());
        }
    }
}
