//! Verbs through the client library: two connected QPs on one device,
//! and polling helpers with bounded waits.

use std::time::{Duration, Instant};

use rxu_client::*;

/// Every access right a QP or MR can grant.
pub const ALL_ACCESS: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// Polls `cq` until one completion arrives (10 s at most).
pub fn poll_one(cq: &Cq) -> Wc {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [Wc::default()];
    loop {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(Instant::now() < deadline, "no completion within 10 s");
        std::thread::yield_now();
    }
}

/// Asserts nothing completes on `cq` for `ms` milliseconds.
pub fn assert_quiet(cq: &Cq, ms: u64) {
    let deadline = Instant::now() + Duration::from_millis(ms);
    let mut wc = [Wc::default()];
    while Instant::now() < deadline {
        assert_eq!(cq.poll(&mut wc).unwrap(), 0, "unexpected {:?}", wc[0]);
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A successful completion of `opcode`, or a panic naming what came.
pub fn expect_ok(cq: &Cq, opcode: WcOpcode) -> Wc {
    let wc = poll_one(cq);
    assert!(wc.is_success(), "{}: {wc:?}", wc.status_str());
    assert_eq!(wc.opcode, opcode as u32, "{wc:?}");
    wc
}

/// Deterministic test bytes.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32) as u8)
        .collect()
}

/// Two QPs of one type on one device, each with its own CQ, connected to
/// each other.
pub struct Pair {
    pub ctx: Context,
    pub pd: Pd,
    pub cq_a: Cq,
    pub cq_b: Cq,
    pub a: Qp,
    pub b: Qp,
}

/// The capacities of a [`Pair`]'s QPs.
pub fn cap() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    }
}

impl Pair {
    pub fn new(ctx: &Context, qp_type: QpType) -> Pair {
        Self::with(ctx, qp_type, None, None)
    }

    /// With `b` receiving through `srq` and/or its CQ on `channel`.
    pub fn with(
        ctx: &Context,
        qp_type: QpType,
        srq: Option<&Srq>,
        channel: Option<&CompChannel>,
    ) -> Pair {
        let pd = match srq {
            Some(s) => s.pd().clone(),
            None => Pd::alloc(ctx).unwrap(),
        };
        let cq_a = Cq::create(ctx, 128, 0, None, 0xa).unwrap();
        let cq_b = Cq::create(ctx, 128, 0, channel, 0xb).unwrap();
        let a = Qp::create(&pd, &QpInit::new(qp_type, &cq_a, &cq_a, cap())).unwrap();
        let mut init_b = QpInit::new(qp_type, &cq_b, &cq_b, cap());
        init_b.srq = srq;
        let b = Qp::create(&pd, &init_b).unwrap();
        let gid = ctx.query_gid(0).unwrap();
        let ea = QpEndpoint {
            qpn: a.qpn(),
            psn: 0x100,
            gid,
        };
        let eb = QpEndpoint {
            qpn: b.qpn(),
            psn: 0xfff_f00,
            gid,
        };
        let opts = ConnectOpts::default();
        a.connect(ea.psn, &eb, &opts).unwrap();
        b.connect(eb.psn, &ea, &opts).unwrap();
        Pair {
            ctx: ctx.clone(),
            pd,
            cq_a,
            cq_b,
            a,
            b,
        }
    }
}
