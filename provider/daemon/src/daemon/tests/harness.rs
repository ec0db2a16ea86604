//! The tests' side of a device: a client connection with this process's
//! memory as its grant, requests as values, rings attached in process,
//! and the steps every test repeats (QPs to RTS, the pump, CQEs, events).

use std::fs::OpenOptions;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use transport::qp::access;

use super::spec::{RecvSpec, SendSpec};
use crate::daemon::device::Device;
use crate::daemon::reply::Reply;
use crate::daemon::setup::{self, Config};
use crate::verbs::{self, mask};
use rxu_abi::proto::abi::{Cqe, CQE_STAMPED_SIZE};
use rxu_abi::proto::{AhAttr, QpAttr, QpCap, QpType, Request, Response, PROTO_VERSION};
use rxu_abi::ring::{Consumer, Doorbell, Producer, Ring};
use rxu_client::Wc;
use rxu_testkit::seqpacket_pair;
use transport::verbs::Sge;

pub(super) const PORT: u16 = 24791;

pub(super) fn addr(n: u8) -> IpAddr {
    IpAddr::from([127, 0, 77, n])
}

pub(super) fn device(n: u8) -> Device {
    let mut cfg = Config::new("rxut", addr(n));
    cfg.port = PORT;
    cfg.mtu = Some(65536);
    let facts = setup::device_facts(&cfg).unwrap();
    let mut dev = Device::new(facts, setup::engine_config(&cfg, "lo")).unwrap();
    dev.objects.set_allow_own_mem(true);
    dev
}

/// The test's side of one client connection.
pub(super) struct Client {
    pub(super) id: u32,
    pub(super) async_rd: OwnedFd,
    /// The client's own copy of the write end (as rxu-client keeps one).
    pub(super) async_wr: OwnedFd,
    pub(super) bell: Doorbell,
}

pub(super) fn hello(dev: &mut Device) -> Client {
    let id = dev.connect(std::process::id());
    let mem: OwnedFd = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/proc/self/mem")
        .unwrap()
        .into();
    let (async_rd, async_wr) = seqpacket_pair();
    let own_wr = async_wr.try_clone().unwrap();
    let bell = Doorbell::new().unwrap();
    let bell_fd: OwnedFd = bell.try_clone().unwrap().into();
    let r = dev.handle(
        id,
        Request::Hello {
            version: PROTO_VERSION,
            pid: std::process::id(),
            admin: false,
        },
        vec![mem, async_wr, bell_fd],
    );
    assert!(matches!(r.resp, Response::Hello { .. }), "{:?}", r.resp);
    Client {
        id,
        async_rd,
        async_wr: own_wr,
        bell,
    }
}

pub(super) fn call(dev: &mut Device, id: u32, req: Request) -> Reply {
    dev.handle(id, req, Vec::new())
}

pub(super) fn ok(r: Reply) -> (Response, Vec<OwnedFd>) {
    assert!(!matches!(r.resp, Response::Error { .. }), "{:?}", r.resp);
    (r.resp, r.fds)
}

pub(super) fn errno(r: Reply) -> i32 {
    match r.resp {
        Response::Error { errno, .. } => errno,
        other => panic!("expected an error, got {other:?}"),
    }
}

pub(super) fn alloc_pd(dev: &mut Device, id: u32) -> u32 {
    match ok(call(dev, id, Request::AllocPd)).0 {
        Response::Pd { pd } => pd,
        r => panic!("{r:?}"),
    }
}

/// Registers `b` (this process's memory) in `pd` for local writes; its lkey.
pub(super) fn reg_local(dev: &mut Device, id: u32, pd: u32, b: &[u8]) -> u32 {
    let req = Request::RegMr {
        pd,
        addr: b.as_ptr() as u64,
        len: b.len() as u64,
        iova: b.as_ptr() as u64,
        access: access::LOCAL_WRITE,
    };
    match ok(call(dev, id, req)).0 {
        Response::Mr { lkey, .. } => lkey,
        r => panic!("{r:?}"),
    }
}

pub(super) fn create_cq(dev: &mut Device, id: u32, cqe: u32) -> (u32, Consumer) {
    create_cq_with(dev, id, cqe, false)
}

/// A CQ with or without completion timestamps.
pub(super) fn create_cq_with(
    dev: &mut Device,
    id: u32,
    cqe: u32,
    timestamps: bool,
) -> (u32, Consumer) {
    match ok(call(
        dev,
        id,
        Request::CreateCq {
            cqe,
            comp_vector: 0,
            user_handle: 0xc0 + u64::from(cqe),
            channel: false,
            timestamps,
        },
    )) {
        (Response::Cq { cq, .. }, fds) => (cq, Ring::attach(&fds[0]).unwrap().into_consumer()),
        r => panic!("{:?}", r.0),
    }
}

pub(super) struct TestQp {
    pub(super) qpn: u32,
    pub(super) sq: Producer,
    pub(super) rq: Option<Producer>,
}

pub(super) fn create_qp(dev: &mut Device, id: u32, pd: u32, cq: u32, qp_type: QpType) -> TestQp {
    let req = Request::CreateQp {
        pd,
        qp_type,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        },
        sq_sig_all: false,
        user_handle: 0x9900,
    };
    match ok(call(dev, id, req)) {
        (Response::Qp { qpn, .. }, fds) => TestQp {
            qpn,
            sq: Ring::attach(&fds[0]).unwrap().into_producer(),
            rq: fds.get(1).map(|f| Ring::attach(f).unwrap().into_producer()),
        },
        r => panic!("{:?}", r.0),
    }
}

pub(super) fn modify_qp(dev: &mut Device, id: u32, qpn: u32, mask: u32, attr: QpAttr) {
    ok(call(
        dev,
        id,
        Request::ModifyQp {
            qp: qpn,
            mask,
            attr,
        },
    ));
}

/// RESET -> INIT -> RTR -> RTS, connected to `peer` on `to`.
pub(super) fn connect_rc(dev: &mut Device, id: u32, qpn: u32, peer: u32, to: IpAddr) {
    let init = QpAttr {
        qp_state: 1,
        port_num: 1,
        qp_access_flags: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        ..QpAttr::default()
    };
    let m = mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS;
    modify_qp(dev, id, qpn, m, init);
    let rtr = QpAttr {
        qp_state: 2,
        path_mtu: 3,
        dest_qp_num: peer,
        rq_psn: 100,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
        ah: AhAttr {
            dgid: verbs::gid_of(to),
            is_global: true,
            hop_limit: 64,
            port_num: 1,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    let m = mask::STATE
        | mask::AV
        | mask::PATH_MTU
        | mask::DEST_QPN
        | mask::RQ_PSN
        | mask::MAX_DEST_RD_ATOMIC
        | mask::MIN_RNR_TIMER;
    modify_qp(dev, id, qpn, m, rtr);
    let rts = QpAttr {
        qp_state: 3,
        timeout: 10,
        retry_cnt: 2,
        rnr_retry: 7,
        sq_psn: 100,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    let m = mask::STATE
        | mask::TIMEOUT
        | mask::RETRY_CNT
        | mask::RNR_RETRY
        | mask::SQ_PSN
        | mask::MAX_QP_RD_ATOMIC;
    modify_qp(dev, id, qpn, m, rts);
}

/// Runs the data path until `done` or 5 s.
pub(super) fn pump(dev: &mut Device, mut done: impl FnMut(&mut Device) -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    for _ in 0..10_000_000 {
        dev.pump().unwrap();
        dev.deliver();
        if done(dev) {
            return true;
        }
        if Instant::now() > end {
            break;
        }
    }
    false
}

/// The next CQE, read through the view (as the client library reads it).
pub(super) fn pop_cqe(cq: &mut Consumer) -> Option<Wc> {
    let mut b = [0u8; CQE_STAMPED_SIZE];
    let n = cq.slot_size().min(CQE_STAMPED_SIZE);
    cq.try_pop(&mut b[..n])
        .unwrap()
        .then(|| Wc::from_cqe(&Cqe::new_unchecked(&b[..n])))
}

/// Async event records waiting on the client's socket (64 at most).
pub(super) fn events(c: &Client) -> Vec<(u64, u32)> {
    std::iter::from_fn(|| events_one(c)).take(64).collect()
}

/// The next async event record waiting on the client's socket.
pub(super) fn events_one(c: &Client) -> Option<(u64, u32)> {
    let mut b = [0u8; 16];
    // SAFETY: b is a valid 16-byte buffer.
    let n = unsafe {
        libc::recv(
            c.async_rd.as_raw_fd(),
            b.as_mut_ptr().cast(),
            16,
            libc::MSG_DONTWAIT,
        )
    };
    if n != 16 {
        return None;
    }
    let el = u64::from_ne_bytes(b[..8].try_into().unwrap());
    let t = u32::from_ne_bytes(b[8..12].try_into().unwrap());
    Some((el, t))
}

pub(super) fn post_send(qp: &mut TestQp, s: &SendSpec) {
    let mut b = vec![0u8; qp.sq.slot_size()];
    s.write(&mut b);
    assert!(qp.sq.try_push(&b).unwrap());
}

/// One receive of `sges` on `qp`'s RQ (its slot written, not consumed).
pub(super) fn post_recv(qp: &mut TestQp, wr_id: u64, sges: &[Sge]) {
    let rq = qp.rq.as_mut().expect("the QP has an RQ");
    let mut b = vec![0u8; rq.slot_size()];
    let sges = sges.to_vec();
    RecvSpec { wr_id, sges }.write(&mut b);
    assert!(rq.try_push(&b).unwrap());
}

/// Two devices (`device(n)` and `device(n + 1)`), a client on each, and a
/// UD QP of each in RTS: `a` on `tx` sends from `src` (64 bytes of
/// `fill`), `b` on `rx` receives into `dst` (512 bytes); each has a CQ of
/// `cqe` entries.
pub(super) struct UdLink {
    pub(super) tx: Device,
    pub(super) rx: Device,
    pub(super) ct: Client,
    pub(super) cr: Client,
    pub(super) src: Vec<u8>,
    pub(super) dst: Vec<u8>,
    pub(super) skey: u32,
    pub(super) dkey: u32,
    pub(super) tring: Consumer,
    pub(super) rring: Consumer,
    pub(super) a: TestQp,
    pub(super) b: TestQp,
}

pub(super) fn ud_link(n: u8, fill: u8, cqe: u32) -> UdLink {
    let mut tx = device(n);
    let mut rx = device(n + 1);
    let ct = hello(&mut tx);
    let cr = hello(&mut rx);
    let src = vec![fill; 64];
    let dst = vec![0u8; 512];
    let tpd = alloc_pd(&mut tx, ct.id);
    let rpd = alloc_pd(&mut rx, cr.id);
    let skey = reg_local(&mut tx, ct.id, tpd, &src);
    let dkey = reg_local(&mut rx, cr.id, rpd, &dst);
    let (tcq, tring) = create_cq(&mut tx, ct.id, cqe);
    let (rcq, rring) = create_cq(&mut rx, cr.id, cqe);
    let a = create_qp(&mut tx, ct.id, tpd, tcq, QpType::Ud);
    let b = create_qp(&mut rx, cr.id, rpd, rcq, QpType::Ud);
    ud_to_rts(&mut tx, ct.id, a.qpn);
    ud_to_rts(&mut rx, cr.id, b.qpn);
    UdLink {
        tx,
        rx,
        ct,
        cr,
        src,
        dst,
        skey,
        dkey,
        tring,
        rring,
        a,
        b,
    }
}

/// One SGE over all of `buf`.
pub(super) fn sge_of(buf: &[u8], lkey: u32) -> Sge {
    Sge {
        addr: buf.as_ptr() as u64,
        length: buf.len() as u32,
        lkey,
    }
}

/// RESET -> INIT -> RTR -> RTS for a UD QP with Q_Key 0x11111111.
pub(super) fn ud_to_rts(dev: &mut Device, id: u32, qpn: u32) {
    let steps = [
        (
            QpAttr {
                qp_state: 1,
                port_num: 1,
                qkey: 0x1111_1111,
                ..QpAttr::default()
            },
            mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::QKEY,
        ),
        (
            QpAttr {
                qp_state: 2,
                ..QpAttr::default()
            },
            mask::STATE,
        ),
        (
            QpAttr {
                qp_state: 3,
                sq_psn: 7,
                ..QpAttr::default()
            },
            mask::STATE | mask::SQ_PSN,
        ),
    ];
    for (attr, m) in steps {
        modify_qp(dev, id, qpn, m, attr);
    }
}

/// Runs `f` on a thread of its own in a new network namespace with `lo`
/// up: multicast and port bindings of that thread's sockets stay there.
pub(super) fn in_private_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: unshare only changes this thread's namespaces.
        let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            r,
            0,
            "unshare(CLONE_NEWNET) needs CAP_SYS_ADMIN: {}",
            std::io::Error::last_os_error()
        );
        let st = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .expect("ip link");
        assert!(st.success(), "ip link set lo up: {st}");
        f()
    })
    .join()
    .expect("test thread")
}
