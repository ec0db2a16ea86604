//! The control protocol from a hostile client's side, in process.
//!
//! - [`decode`] (`control_message`): arbitrary bytes as a control message
//!   go through the decoders of every message type the daemon and the
//!   clients read (`Request`, `Response`, the rdma_cm records). A message
//!   that decodes must come back unchanged through encode -> decode.
//! - [`Sequence`] (`control_sequence`): arbitrary bytes drive one daemon
//!   device's request handlers (`rxud::daemon::device::Device::handle`,
//!   no sockets) with a sequence of sessions, Hellos with any mix of fds,
//!   object requests naming handles it was given (and others), raw
//!   decoded requests, disconnects and pump turns. A panic is a finding;
//!   after every session is closed the device's tables must be empty
//!   ([`rxud::daemon::device::Audit`]) and the process must hold the fds
//!   it held before.

use std::fs::OpenOptions;
use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;

use rxu_abi::proto::cm::{CmEventRecord, CmRequest};
use rxu_abi::proto::{self, AhAttr, QpAttr, QpCap, QpType, Request, Response, PROTO_VERSION};
use rxu_abi::ring::Doorbell;
use rxud::daemon::device::{Audit, Device};
use rxud::daemon::setup::{self, Config};

/// Decodes `data` as each message type; re-encodes what decodes.
/// Returns how many types took it.
pub fn decode(data: &[u8]) -> usize {
    fn check<T>(data: &[u8]) -> usize
    where
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let Ok(v) = proto::decode::<T>(data) else {
            return 0;
        };
        // A message too large to send is refused, never a panic.
        let Ok(bytes) = proto::encode(&v) else {
            return 1;
        };
        let again: T = proto::decode(&bytes).expect("an encoded message decodes");
        assert_eq!(again, v, "encode -> decode changed the message");
        1
    }
    check::<Request>(data)
        + check::<Response>(data)
        + check::<CmRequest>(data)
        + check::<CmEventRecord>(data)
}

/// Reads the fuzz input as a sequence of small decisions.
struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }
    fn u8(&mut self) -> u8 {
        self.byte().unwrap_or(0)
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    /// Mostly one of `known` (handles the daemon gave), sometimes any value.
    fn pick(&mut self, known: &[u32]) -> u32 {
        let b = self.u8();
        if b < 200 && !known.is_empty() {
            known[b as usize % known.len()]
        } else {
            u32::from(b) % 8
        }
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.data.len());
        let (a, b) = self.data.split_at(n);
        self.data = b;
        a
    }
}

/// The handles the daemon has given in this run, per kind.
#[derive(Default)]
struct Known {
    sessions: Vec<u32>,
    pds: Vec<u32>,
    mrs: Vec<u32>,
    cqs: Vec<u32>,
    srqs: Vec<u32>,
    qps: Vec<u32>,
    mws: Vec<u32>,
}

/// Two writable pages of this process the fuzzed requests may register.
fn arena_addr() -> u64 {
    static ARENA: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ARENA.get_or_init(|| Box::leak(vec![0u8; 8192].into_boxed_slice()).as_ptr() as usize) as u64
}

/// The fds a Hello (or another request) may carry: what the provider
/// sends, and what an attacker would send instead.
fn fd_menu(choice: u8) -> Option<OwnedFd> {
    let open = |path: &str, write: bool, flags: i32| -> Option<OwnedFd> {
        OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_CLOEXEC | flags)
            .open(path)
            .ok()
            .map(OwnedFd::from)
    };
    match choice % 8 {
        0 => open("/proc/self/mem", true, 0),
        1 => rxu_abi::proto::fdpass::seqpacket_pair()
            .ok()
            .map(|(a, _)| a),
        2 => Doorbell::new().ok().map(OwnedFd::from),
        3 => open("/proc/self/mem", false, 0),
        4 => open("/proc/self/mem", false, libc::O_PATH),
        5 => open("/dev/null", true, 0),
        6 => open("/proc/self/oom_score_adj", false, 0),
        _ => None,
    }
}

/// Open fds of this process.
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// One device, kept across inputs (binding its socket per input would
/// dominate the run), and what it held before any input.
pub struct Sequence {
    dev: Device,
    baseline_fds: usize,
}

/// What one input did, for the stable test's sanity check.
#[derive(Clone, Copy, Debug, Default)]
pub struct SeqOutcome {
    pub requests: u64,
    pub accepted: u64,
    pub hellos_accepted: u64,
}

impl Sequence {
    /// A device on `addr` (a loopback address) at an ephemeral port.
    pub fn new(addr: IpAddr) -> Sequence {
        let mut cfg = Config::new("rxufz", addr);
        cfg.port = 0;
        cfg.mtu = Some(65536);
        let facts = setup::device_facts(&cfg).expect("device facts of lo");
        let mut dev =
            Device::new(facts, setup::engine_config(&cfg, "lo")).expect("device on loopback");
        dev.set_allow_own_mem(true);
        let baseline_fds = fd_count();
        Sequence { dev, baseline_fds }
    }

    /// Runs one input; panics on a finding.
    pub fn run(&mut self, data: &[u8]) -> SeqOutcome {
        let mut inp = Input { data };
        let mut k = Known::default();
        let mut out = SeqOutcome::default();
        // Bounded: every step takes at least one byte.
        while let Some(op) = inp.byte() {
            match op % 16 {
                0 if k.sessions.len() < 4 => {
                    // SAFETY: geteuid has no preconditions and cannot fail.
                    let uid = unsafe { libc::geteuid() };
                    if let Ok(id) = self.dev.connect_as(std::process::id(), uid) {
                        k.sessions.push(id);
                    }
                }
                1 => {
                    let id = inp.pick(&k.sessions);
                    let fds = (0..inp.u8() % 5)
                        .filter_map(|_| fd_menu(inp.u8()))
                        .collect();
                    let r = self.dev.handle(
                        id,
                        Request::Hello {
                            version: PROTO_VERSION,
                            pid: std::process::id(),
                            admin: inp.u8().is_multiple_of(16),
                        },
                        fds,
                    );
                    out.hellos_accepted += u64::from(matches!(r.resp, Response::Hello { .. }));
                    if r.close {
                        self.close(&mut k, id);
                    }
                }
                2 => {
                    // The provider's Hello, so that sequences get going.
                    let id = inp.pick(&k.sessions);
                    let fds = [0u8, 1, 2].iter().filter_map(|&c| fd_menu(c)).collect();
                    let r = self.dev.handle(
                        id,
                        Request::Hello {
                            version: PROTO_VERSION,
                            pid: std::process::id(),
                            admin: false,
                        },
                        fds,
                    );
                    out.hellos_accepted += u64::from(matches!(r.resp, Response::Hello { .. }));
                }
                3 => {
                    let id = inp.pick(&k.sessions);
                    self.close(&mut k, id);
                }
                4 => {
                    let _ = self.dev.pump();
                    self.dev.deliver();
                }
                15 => {
                    // Any request the decoder accepts, with fds.
                    let id = inp.pick(&k.sessions);
                    let n = usize::from(inp.u8());
                    let raw = inp.bytes(n).to_vec();
                    if let Ok(req) = proto::decode::<Request>(&raw) {
                        let fds = (0..inp.u8() % 3)
                            .filter_map(|_| fd_menu(inp.u8()))
                            .collect();
                        self.request(&mut k, &mut out, id, req, fds);
                    }
                }
                op => {
                    let id = inp.pick(&k.sessions);
                    let req = object_request(op, &mut inp, &k);
                    self.request(&mut k, &mut out, id, req, Vec::new());
                }
            }
        }
        for id in std::mem::take(&mut k.sessions) {
            self.dev.disconnect(id);
        }
        let _ = self.dev.pump();
        self.dev.deliver();
        let a = self.dev.audit();
        assert_eq!(
            a,
            Audit::default(),
            "tables not empty after every session closed"
        );
        let fds = fd_count();
        assert_eq!(
            fds, self.baseline_fds,
            "fds held after every session closed"
        );
        out
    }

    fn request(
        &mut self,
        k: &mut Known,
        out: &mut SeqOutcome,
        id: u32,
        req: Request,
        fds: Vec<OwnedFd>,
    ) {
        out.requests += 1;
        let r = self.dev.handle(id, req, fds);
        if !matches!(r.resp, Response::Error { .. }) {
            out.accepted += 1;
        }
        match r.resp {
            Response::Pd { pd } => k.pds.push(pd),
            Response::Mr { mr, .. } => k.mrs.push(mr),
            Response::Cq { cq, .. } => k.cqs.push(cq),
            Response::Srq { srq, .. } | Response::XrcSrq { srq, .. } => k.srqs.push(srq),
            Response::Qp { qpn, .. } => k.qps.push(qpn),
            Response::Mw { mw, .. } => k.mws.push(mw),
            _ => {}
        }
        if r.close {
            self.close(k, id);
        }
    }

    fn close(&mut self, k: &mut Known, id: u32) {
        if let Some(i) = k.sessions.iter().position(|&s| s == id) {
            k.sessions.swap_remove(i);
            self.dev.disconnect(id);
        }
    }
}

/// An object request (ops 5..=14) with fields from the input and handles
/// mostly from what the daemon gave.
fn object_request(op: u8, inp: &mut Input<'_>, k: &Known) -> Request {
    let qp_types = [
        QpType::Rc,
        QpType::Uc,
        QpType::Ud,
        QpType::XrcSend,
        QpType::XrcRecv,
    ];
    match op {
        5 => Request::AllocPd,
        6 => Request::DeallocPd {
            pd: inp.pick(&k.pds),
        },
        7 => {
            let in_arena = !inp.u8().is_multiple_of(4);
            let (addr, len) = if in_arena {
                let off = u64::from(inp.u8()) * 16;
                (arena_addr() + off, 1 + u64::from(inp.u8()) * 16)
            } else {
                (inp.u64(), inp.u64())
            };
            Request::RegMr {
                pd: inp.pick(&k.pds),
                addr,
                len,
                iova: if inp.u8().is_multiple_of(2) {
                    addr
                } else {
                    inp.u64()
                },
                access: inp.u32() & 0x1ff,
            }
        }
        8 => Request::DeregMr {
            mr: inp.pick(&k.mrs),
        },
        9 => Request::CreateCq {
            cqe: u32::from(inp.u8()) + 1,
            comp_vector: 0,
            user_handle: 0,
            channel: false,
            timestamps: inp.u8().is_multiple_of(2),
        },
        10 => Request::DestroyCq {
            cq: inp.pick(&k.cqs),
        },
        11 => {
            let srq = if inp.u8().is_multiple_of(3) {
                Some(inp.pick(&k.srqs))
            } else {
                None
            };
            Request::CreateQp {
                pd: inp.pick(&k.pds),
                qp_type: qp_types[usize::from(inp.u8()) % qp_types.len()],
                send_cq: inp.pick(&k.cqs),
                recv_cq: inp.pick(&k.cqs),
                srq,
                cap: QpCap {
                    max_send_wr: u32::from(inp.u8()),
                    max_recv_wr: u32::from(inp.u8()),
                    max_send_sge: u32::from(inp.u8() % 8),
                    max_recv_sge: u32::from(inp.u8() % 8),
                    max_inline_data: u32::from(inp.u8()),
                },
                sq_sig_all: inp.u8().is_multiple_of(2),
                user_handle: 0,
            }
        }
        12 => {
            let mut dgid = [0u8; 16];
            dgid[10] = 0xff;
            dgid[11] = 0xff;
            dgid[12..].copy_from_slice(&[127, 0, 78, 1 + inp.u8() % 2]);
            Request::ModifyQp {
                qp: inp.pick(&k.qps),
                mask: inp.u32() & 0x1f_ffff,
                attr: QpAttr {
                    qp_state: inp.u8() % 8,
                    cur_qp_state: inp.u8() % 8,
                    path_mtu: inp.u8() % 6,
                    qkey: inp.u32(),
                    rq_psn: inp.u32(),
                    sq_psn: inp.u32(),
                    dest_qp_num: inp.pick(&k.qps),
                    qp_access_flags: inp.u32() & 0x1ff,
                    pkey_index: u16::from(inp.u8() % 2),
                    max_rd_atomic: inp.u8() % 20,
                    max_dest_rd_atomic: inp.u8() % 20,
                    min_rnr_timer: inp.u8() % 32,
                    port_num: inp.u8() % 3,
                    timeout: inp.u8() % 32,
                    retry_cnt: inp.u8() % 8,
                    rnr_retry: inp.u8() % 8,
                    ah: AhAttr {
                        dgid,
                        is_global: !inp.u8().is_multiple_of(4),
                        port_num: 1,
                        hop_limit: 64,
                        ..AhAttr::default()
                    },
                    ..QpAttr::default()
                },
            }
        }
        13 => {
            if inp.u8().is_multiple_of(2) {
                Request::DestroyQp {
                    qp: inp.pick(&k.qps),
                }
            } else {
                Request::DestroySrq {
                    srq: inp.pick(&k.srqs),
                }
            }
        }
        _ => match inp.u8() % 4 {
            0 => Request::CreateSrq {
                pd: inp.pick(&k.pds),
                max_wr: u32::from(inp.u8()) + 1,
                max_sge: u32::from(inp.u8() % 4) + 1,
                srq_limit: u32::from(inp.u8() % 4),
                user_handle: 0,
            },
            1 => Request::AllocMw {
                pd: inp.pick(&k.pds),
                mw_type: u32::from(inp.u8() % 3),
            },
            2 => Request::DeallocMw {
                mw: inp.pick(&k.mws),
            },
            _ => Request::QueryQp {
                qp: inp.pick(&k.qps),
                mask: inp.u32(),
            },
        },
    }
}
