//! The client library against a real `rxud`: every RC opcode byte-exact,
//! UD and UC sends, completion channels, SRQs, CQ resize, concurrent
//! posting, and the error paths. Each test runs its own daemon on its own
//! loopback address (127.0.0.110 and up).

use std::net::Ipv4Addr;
use std::time::Duration;

use rxu_client::*;
use rxu_testkit::verbs::*;
use rxu_testkit::Daemon;
use transport::verbs::NetworkHdr;

fn daemon(n: u8) -> Daemon {
    Daemon::start(&format!("rxuc{n}"), Ipv4Addr::new(127, 0, 0, 110 + n))
}

#[test]
fn rc_every_opcode_byte_exact() {
    let d = daemon(0);
    let ctx = d.open();
    let p = Pair::new(&ctx, QpType::Rc);
    let mut ba = MrBuf::new(&p.pd, 64 * 1024, ALL_ACCESS).unwrap();
    let mut bb = MrBuf::new(&p.pd, 64 * 1024, ALL_ACCESS).unwrap();

    // SEND -> RECV.
    let data = pattern(1, 4096);
    ba.write(0, &data).unwrap();
    p.b.post_recv(&[RecvWr::new(11, &[bb.sge(0, 8192)])])
        .unwrap();
    p.a.post_send(&[SendWr::send(1, &[ba.sge(0, 4096)]).signaled()])
        .unwrap();
    assert_eq!(expect_ok(&p.cq_a, WcOpcode::Send).wr_id, 1);
    let wc = expect_ok(&p.cq_b, WcOpcode::Recv);
    assert_eq!((wc.wr_id, wc.byte_len, wc.qp_num), (11, 4096, p.b.qpn()));
    let mut got = vec![0u8; 4096];
    bb.read(0, &mut got).unwrap();
    assert_eq!(got, data);

    // RDMA WRITE, two SGEs gathered into one remote range.
    let data = pattern(2, 10_000);
    ba.write(4096, &data).unwrap();
    let sges = [ba.sge(4096, 6000), ba.sge(4096 + 6000, 4000)];
    p.a.post_send(&[SendWr::write(2, &sges, bb.addr() + 8192, bb.rkey()).signaled()])
        .unwrap();
    assert_eq!(expect_ok(&p.cq_a, WcOpcode::RdmaWrite).wr_id, 2);
    let mut got = vec![0u8; 10_000];
    bb.read(8192, &mut got).unwrap();
    assert_eq!(got, data);

    // RDMA WRITE WITH IMM consumes a receive and carries the immediate.
    let data = pattern(3, 3000);
    ba.write(0, &data).unwrap();
    p.b.post_recv(&[RecvWr::new(12, &[])]).unwrap();
    let sge = [ba.sge(0, 3000)];
    let wr = SendWr::write_imm(3, &sge, bb.addr() + 20_000, bb.rkey(), 0x1234_5678);
    p.a.post_send(&[wr.signaled()]).unwrap();
    expect_ok(&p.cq_a, WcOpcode::RdmaWrite);
    let wc = expect_ok(&p.cq_b, WcOpcode::RecvRdmaWithImm);
    assert_eq!(
        (wc.wr_id, wc.byte_len, wc.imm_data),
        (12, 3000, 0x1234_5678)
    );
    assert_ne!(wc.wc_flags & wc_flags::WITH_IMM, 0);
    let mut got = vec![0u8; 3000];
    bb.read(20_000, &mut got).unwrap();
    assert_eq!(got, data);

    // RDMA READ.
    let data = pattern(4, 5000);
    bb.write(30_000, &data).unwrap();
    p.a.post_send(&[
        SendWr::read(4, &[ba.sge(30_000, 5000)], bb.addr() + 30_000, bb.rkey()).signaled(),
    ])
    .unwrap();
    let wc = expect_ok(&p.cq_a, WcOpcode::RdmaRead);
    assert_eq!((wc.wr_id, wc.byte_len), (4, 5000));
    let mut got = vec![0u8; 5000];
    ba.read(30_000, &mut got).unwrap();
    assert_eq!(got, data);

    // Compare-and-swap: a hit, then a miss.
    bb.write_u64(40_000, 5).unwrap();
    let target = bb.addr() + 40_000;
    let res = ba.sge(40_000, 8);
    p.a.post_send(&[SendWr::cmp_swap(5, &[res], target, bb.rkey(), 5, 9).signaled()])
        .unwrap();
    expect_ok(&p.cq_a, WcOpcode::CompSwap);
    assert_eq!(ba.read_u64(40_000).unwrap(), 5);
    assert_eq!(bb.read_u64(40_000).unwrap(), 9);
    p.a.post_send(&[SendWr::cmp_swap(6, &[res], target, bb.rkey(), 5, 11).signaled()])
        .unwrap();
    expect_ok(&p.cq_a, WcOpcode::CompSwap);
    assert_eq!(ba.read_u64(40_000).unwrap(), 9);
    assert_eq!(bb.read_u64(40_000).unwrap(), 9);

    // Fetch-and-add.
    bb.write_u64(40_008, 100).unwrap();
    let sge = [ba.sge(40_008, 8)];
    let wr = SendWr::fetch_add(7, &sge, bb.addr() + 40_008, bb.rkey(), 23);
    p.a.post_send(&[wr.signaled()]).unwrap();
    expect_ok(&p.cq_a, WcOpcode::FetchAdd);
    assert_eq!(ba.read_u64(40_008).unwrap(), 100);
    assert_eq!(bb.read_u64(40_008).unwrap(), 123);

    // Inline SEND with immediate, and an unsignaled SEND that completes
    // silently on the sender.
    p.b.post_recv(&[
        RecvWr::new(13, &[bb.sge(0, 64)]),
        RecvWr::new(14, &[bb.sge(64, 64)]),
    ])
    .unwrap();
    let msg = b"inline bytes, no lkey needed";
    p.a.post_send(&[
        SendWr::send_imm(8, &[], 0xabcd).inline(msg).signaled(),
        SendWr::send(9, &[ba.sge(0, 16)]),
    ])
    .unwrap();
    assert_eq!(expect_ok(&p.cq_a, WcOpcode::Send).wr_id, 8);
    let wc = expect_ok(&p.cq_b, WcOpcode::Recv);
    assert_eq!(
        (wc.wr_id, wc.byte_len, wc.imm_data),
        (13, msg.len() as u32, 0xabcd)
    );
    let mut got = vec![0u8; msg.len()];
    bb.read(0, &mut got).unwrap();
    assert_eq!(&got, msg);
    assert_eq!(expect_ok(&p.cq_b, WcOpcode::Recv).wr_id, 14);
    assert_quiet(&p.cq_a, 50);

    // query_qp reports what modify set.
    let (attr, _) =
        p.a.query(qp_attr_mask::STATE | qp_attr_mask::DEST_QPN)
            .unwrap();
    assert_eq!(attr.qp_state, QpState::Rts as u8);
    assert_eq!(attr.dest_qp_num, p.b.qpn());
}

#[test]
fn ud_send_and_reply_through_ah_from_wc() {
    let d = daemon(1);
    let ctx = d.open();
    let p = Pair::new(&ctx, QpType::Ud);
    let mut ba = MrBuf::new(&p.pd, 8192, ALL_ACCESS).unwrap();
    let mut bb = MrBuf::new(&p.pd, 8192, ALL_ACCESS).unwrap();
    let qkey = ConnectOpts::default().qkey;
    let ah = Ah::new(
        &p.pd,
        AhAttr {
            dgid: ctx.query_gid(0).unwrap(),
            hop_limit: 64,
            is_global: true,
            port_num: 1,
            ..Default::default()
        },
    )
    .unwrap();

    let data = pattern(5, 512);
    ba.write(0, &data).unwrap();
    p.b.post_recv(&[RecvWr::new(21, &[bb.sge(0, 40 + 1024)])])
        .unwrap();
    p.a.post_send(&[SendWr::send(1, &[ba.sge(0, 512)])
        .ud(&ah, p.b.qpn(), qkey)
        .signaled()])
        .unwrap();
    assert_eq!(expect_ok(&p.cq_a, WcOpcode::Send).sl, 0, "a send's sl");
    let wc = expect_ok(&p.cq_b, WcOpcode::Recv);
    assert_eq!(wc.byte_len, 40 + 512, "GRH area + payload");
    assert_eq!(wc.src_qp, p.a.qpn());
    assert_ne!(wc.wc_flags & wc_flags::GRH, 0);
    assert_eq!(
        wc.sl,
        NetworkHdr::Ipv4.wc_sl(),
        "sl: RoCEv2 over IPv4, as ConnectX reports it (UCX reads it)"
    );
    let mut got = vec![0u8; 512];
    bb.read(40, &mut got).unwrap();
    assert_eq!(got, data);

    // Reply to whoever sent it.
    let back = Ah::from_wc(&p.pd, &wc, 0).unwrap();
    bb.write(0, b"pong").unwrap();
    p.a.post_recv(&[RecvWr::new(22, &[ba.sge(1000, 100)])])
        .unwrap();
    p.b.post_send(&[SendWr::send(2, &[bb.sge(0, 4)])
        .ud(&back, wc.src_qp, qkey)
        .signaled()])
        .unwrap();
    expect_ok(&p.cq_b, WcOpcode::Send);
    let wc = expect_ok(&p.cq_a, WcOpcode::Recv);
    assert_eq!(wc.byte_len, 44);
    let mut got = [0u8; 4];
    ba.read(1040, &mut got).unwrap();
    assert_eq!(&got, b"pong");

    // A wrong qkey is dropped silently: no receive completes.
    p.b.post_recv(&[RecvWr::new(23, &[bb.sge(0, 1064)])])
        .unwrap();
    p.a.post_send(&[SendWr::send(3, &[ba.sge(0, 8)])
        .ud(&ah, p.b.qpn(), qkey ^ 1)
        .signaled()])
        .unwrap();
    expect_ok(&p.cq_a, WcOpcode::Send);
    assert_quiet(&p.cq_b, 100);
}

#[test]
fn uc_send_and_write() {
    let d = daemon(2);
    let ctx = d.open();
    let p = Pair::new(&ctx, QpType::Uc);
    let mut ba = MrBuf::new(&p.pd, 16384, ALL_ACCESS).unwrap();
    let bb = MrBuf::new(&p.pd, 16384, ALL_ACCESS).unwrap();
    let data = pattern(6, 6000);
    ba.write(0, &data).unwrap();
    p.b.post_recv(&[RecvWr::new(31, &[bb.sge(0, 8192)])])
        .unwrap();
    p.a.post_send(&[
        SendWr::send(1, &[ba.sge(0, 6000)]).signaled(),
        SendWr::write(2, &[ba.sge(0, 6000)], bb.addr() + 8192, bb.rkey()).signaled(),
    ])
    .unwrap();
    expect_ok(&p.cq_a, WcOpcode::Send);
    expect_ok(&p.cq_a, WcOpcode::RdmaWrite);
    let wc = expect_ok(&p.cq_b, WcOpcode::Recv);
    assert_eq!(wc.byte_len, 6000);
    let mut got = vec![0u8; 6000];
    bb.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    // The WRITE landed once the SEND's completion (posted after it) is in.
    std::thread::sleep(Duration::from_millis(20));
    bb.read(8192, &mut got).unwrap();
    assert_eq!(got, data);
    // READ is not a UC operation.
    let e =
        p.a.post_send(&[SendWr::read(3, &[ba.sge(0, 8)], bb.addr(), bb.rkey())])
            .unwrap_err();
    assert_eq!((e.index, e.errno()), (0, libc::EINVAL));
}

#[test]
fn completion_channel_events() {
    let d = daemon(3);
    let ctx = d.open();
    let ch = CompChannel::new().unwrap();
    let p = Pair::with(&ctx, QpType::Rc, None, Some(&ch));
    let mut ba = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    let bb = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    ba.write(0, b"event!").unwrap();
    let wait = Some(Duration::from_secs(10));
    let quiet = Some(Duration::from_millis(200));
    let sge = [bb.sge(0, 64)];
    let recvs: Vec<RecvWr<'_>> = (0..4).map(|i| RecvWr::new(i, &sge)).collect();
    p.b.post_recv(&recvs).unwrap();

    // Not armed: a completion sends no event.
    p.a.post_send(&[SendWr::send(1, &[ba.sge(0, 6)])]).unwrap();
    expect_ok(&p.cq_b, WcOpcode::Recv);
    assert_eq!(ch.get_cq_event_timeout(quiet).unwrap(), None);

    // Armed: exactly one event for the next completion.
    p.cq_b.req_notify(false).unwrap();
    p.a.post_send(&[SendWr::send(2, &[ba.sge(0, 6)])]).unwrap();
    assert_eq!(ch.get_cq_event_timeout(wait).unwrap(), Some(0xb));
    p.cq_b.ack_events(1);
    assert_eq!(p.cq_b.events_acked(), 1);
    expect_ok(&p.cq_b, WcOpcode::Recv);
    p.a.post_send(&[SendWr::send(3, &[ba.sge(0, 6)])]).unwrap();
    expect_ok(&p.cq_b, WcOpcode::Recv);
    assert_eq!(ch.get_cq_event_timeout(quiet).unwrap(), None, "disarmed");

    // Solicited only: a solicited message signals. (An unsolicited one
    // may too: the daemon cannot see the SE bit and errs on waking.)
    p.cq_b.req_notify(true).unwrap();
    p.b.post_recv(&recvs[..1]).unwrap();
    p.a.post_send(&[SendWr::send(5, &[ba.sge(0, 6)]).solicited()])
        .unwrap();
    assert_eq!(ch.get_cq_event_timeout(wait).unwrap(), Some(0xb));
    expect_ok(&p.cq_b, WcOpcode::Recv);
    assert_eq!(ch.events_received(), 2);
}

#[test]
fn srq_feeds_a_qp_and_reports_its_limit() {
    let d = daemon(4);
    let ctx = d.open();
    let pd = Pd::alloc(&ctx).unwrap();
    let srq = Srq::create(&pd, 16, 2, 0, 0x5e1).unwrap();
    assert!(srq.attr().max_wr >= 16);
    let p = Pair::with(&ctx, QpType::Rc, Some(&srq), None);
    assert!(p.b.post_recv(&[]).is_err(), "receives go through the SRQ");
    let mut ba = MrBuf::new(&pd, 4096, ALL_ACCESS).unwrap();
    let bb = MrBuf::new(&pd, 4096, ALL_ACCESS).unwrap();
    let sges: Vec<[Sge; 1]> = (0..4).map(|i| [bb.sge(i * 256, 256)]).collect();
    let wrs: Vec<RecvWr<'_>> = sges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(100 + i as u64, s))
        .collect();
    srq.post_recv(&wrs).unwrap();
    srq.modify(srq_attr_mask::LIMIT, 0, 3).unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 3);

    for i in 0..2u8 {
        ba.write(0, &[i; 100]).unwrap();
        p.a.post_send(&[SendWr::send(u64::from(i), &[ba.sge(0, 100)])])
            .unwrap();
        let wc = expect_ok(&p.cq_b, WcOpcode::Recv);
        assert_eq!(
            (wc.wr_id, wc.qp_num, wc.byte_len),
            (100 + u64::from(i), p.b.qpn(), 100)
        );
        let mut got = [0u8; 100];
        bb.read(usize::from(i) * 256, &mut got).unwrap();
        assert_eq!(got, [i; 100]);
    }
    // Two left, below the limit of 3: one SRQ_LIMIT_REACHED.
    let ev = ctx
        .get_async_event_timeout(Some(Duration::from_secs(10)))
        .unwrap()
        .expect("SRQ limit event");
    assert_eq!(
        ev,
        AsyncEvent {
            element: 0x5e1,
            event_type: event_type::SRQ_LIMIT_REACHED
        }
    );
}

#[test]
fn cq_resize_keeps_unpolled_completions() {
    let d = daemon(5);
    let ctx = d.open();
    let p = Pair::new(&ctx, QpType::Rc);
    let mut ba = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    ba.fill(7);
    let wrs: Vec<SendWr<'_>> = (0..3)
        .map(|i| SendWr::write(i, &[], 0, 0).signaled())
        .collect();
    p.a.post_send(&wrs).unwrap();
    // Let all three land, then resize before polling them.
    std::thread::sleep(Duration::from_millis(100));
    let n = p.cq_a.resize(512).unwrap();
    assert!(n >= 512 && p.cq_a.cqe() == n);
    for i in 0..3 {
        assert_eq!(expect_ok(&p.cq_a, WcOpcode::RdmaWrite).wr_id, i);
    }
    p.a.post_send(&[SendWr::write(9, &[], 0, 0).signaled()])
        .unwrap();
    assert_eq!(expect_ok(&p.cq_a, WcOpcode::RdmaWrite).wr_id, 9);
}

/// A QP moved to RESET loses its unpolled completions (as mlx4/mlx5/hns
/// clean their CQs; rdma-core's test_mr rereg tests restart QPs this way),
/// another QP's completions in the same CQ stay, in order, and the QP
/// works again once connected anew.
#[test]
fn reset_drops_the_qps_unpolled_completions() {
    let d = daemon(10);
    let ctx = d.open();
    let p = Pair::new(&ctx, QpType::Rc);
    let x = Qp::create(&p.pd, &QpInit::new(QpType::Rc, &p.cq_a, &p.cq_a, cap())).unwrap();
    let to = |qp: &Qp, st: QpState| {
        let attr = QpAttr {
            qp_state: st as u8,
            ..QpAttr::default()
        };
        qp.modify(&attr, qp_attr_mask::STATE).unwrap();
    };
    // RESET -> ERR is refused as the kernel refuses it: through INIT.
    x.to_init(&ConnectOpts::default()).unwrap();
    to(&x, QpState::Err);
    let settle = || std::thread::sleep(Duration::from_millis(100));
    let write = |id| SendWr::write(id, &[], 0, 0).signaled();
    p.a.post_send(&[write(0), write(1)]).unwrap();
    settle();
    x.post_recv(&[RecvWr::new(50, &[])]).unwrap();
    settle();
    p.a.post_send(&[write(2)]).unwrap();
    x.post_recv(&[RecvWr::new(51, &[])]).unwrap();
    settle();
    to(&p.a, QpState::Reset);
    for id in [50, 51] {
        let wc = poll_one(&p.cq_a);
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::WrFlushErr as u32));
    }
    assert_quiet(&p.cq_a, 50);
    // Both sides anew (fresh PSNs).
    to(&p.b, QpState::Reset);
    let gid = ctx.query_gid(0).unwrap();
    let (ea, eb) = (
        QpEndpoint {
            qpn: p.a.qpn(),
            psn: 0x500,
            gid,
        },
        QpEndpoint {
            qpn: p.b.qpn(),
            psn: 0x900,
            gid,
        },
    );
    p.a.connect(ea.psn, &eb, &ConnectOpts::default()).unwrap();
    p.b.connect(eb.psn, &ea, &ConnectOpts::default()).unwrap();
    p.a.post_send(&[write(9)]).unwrap();
    assert_eq!(expect_ok(&p.cq_a, WcOpcode::RdmaWrite).wr_id, 9);
}

/// UD sends complete once transmitted; a resize right after posting them
/// counts their completions as unpolled (rdma-core's test_resize_cq fills
/// a CQ with UD sends and shrinks it at once, expecting EINVAL).
#[test]
fn cq_resize_right_after_ud_sends_counts_their_completions() {
    let d = daemon(11);
    let ctx = d.open();
    let p = Pair::new(&ctx, QpType::Ud);
    let ba = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    let qkey = ConnectOpts::default().qkey;
    let ah = Ah::new(
        &p.pd,
        AhAttr {
            dgid: ctx.query_gid(0).unwrap(),
            hop_limit: 64,
            is_global: true,
            port_num: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let n = p.cq_a.resize(7).unwrap();
    for round in 0..20 {
        let sge = [ba.sge(0, 64)];
        let wrs: Vec<SendWr<'_>> = (0..u64::from(n) - 1)
            .map(|i| SendWr::send(i, &sge).ud(&ah, p.b.qpn(), qkey).signaled())
            .collect();
        p.a.post_send(&wrs).unwrap();
        let e = p.cq_a.resize(1).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "round {round}: {e}");
        for i in 0..u64::from(n) - 1 {
            assert_eq!(expect_ok(&p.cq_a, WcOpcode::Send).wr_id, i);
        }
    }
}

/// A thread resizes the CQ (64 and 256 entries, again and again) while
/// this one polls it and another posts (3000 WRITEs): every completion arrives once, in
/// order; a resize below what is unpolled is EINVAL and changes nothing.
#[test]
fn cq_resize_while_polling_loses_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let d = daemon(12);
    let ctx = d.open();
    let p = Pair::new(&ctx, QpType::Rc);
    let bb = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    const N: u64 = 3000;
    let done = AtomicBool::new(false);
    // The three start together, so the resizes meet the traffic even
    // when the machine is loaded.
    let start = std::sync::Barrier::new(3);
    std::thread::scope(|s| {
        let (qp, cq) = (&p.a, &p.cq_a);
        let (addr, rkey) = (bb.addr(), bb.rkey());
        let start = &start;
        s.spawn(move || {
            start.wait();
            for i in 0..N {
                let wr = SendWr::write(i, &[], addr, rkey).signaled();
                // A full SQ drains as the daemon takes it (bounded wait).
                let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
                loop {
                    match qp.post_send(&[wr]) {
                        Ok(()) => break,
                        Err(e)
                            if e.errno() == libc::ENOMEM && std::time::Instant::now() < give_up =>
                        {
                            std::thread::yield_now();
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        });
        let done = &done;
        let resizer = s.spawn(move || {
            start.wait();
            let (mut ok, mut refused) = (0, 0);
            for i in 0..100_000u32 {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                match cq.resize(if i.is_multiple_of(2) { 64 } else { 256 }) {
                    Ok(_) => ok += 1,
                    Err(e) if e.errno() == libc::EINVAL => refused += 1,
                    Err(e) => panic!("resize: {e}"),
                }
            }
            (ok, refused)
        });
        start.wait();
        let seen: Vec<u64> = (0..N)
            .map(|_| expect_ok(&p.cq_a, WcOpcode::RdmaWrite).wr_id)
            .collect();
        done.store(true, Ordering::Relaxed);
        let (ok, _refused) = resizer.join().unwrap();
        assert!(ok > 0, "no resize went through");
        assert_eq!(seen, (0..N).collect::<Vec<_>>());
    });
}

#[test]
fn threads_post_to_one_qp() {
    let d = daemon(6);
    let ctx = d.open();
    let p = Pair::new(&ctx, QpType::Rc);
    let bb = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    const PER: u64 = 200;
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (qp, cq) = (&p.a, &p.cq_a);
            let (addr, rkey) = (bb.addr(), bb.rkey());
            s.spawn(move || {
                let _ = cq;
                for i in 0..PER {
                    let wr = SendWr::write(t * 1000 + i, &[], addr, rkey).signaled();
                    // Bounded retry while the SQ is full.
                    let mut tries = 0;
                    loop {
                        match qp.post_send(&[wr]) {
                            Ok(()) => break,
                            Err(e) if e.errno() == libc::ENOMEM && tries < 100_000 => {
                                tries += 1;
                                std::thread::yield_now();
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            });
        }
        // Poll here, concurrently, so the CQ never overflows.
        let mut seen = Vec::new();
        for _ in 0..2 * PER {
            seen.push(expect_ok(&p.cq_a, WcOpcode::RdmaWrite).wr_id);
        }
        for t in 0..2u64 {
            let mine: Vec<u64> = seen.iter().copied().filter(|w| w / 1000 == t).collect();
            assert_eq!(mine, (0..PER).map(|i| t * 1000 + i).collect::<Vec<_>>());
        }
    });
}

#[test]
fn error_paths() {
    let d = daemon(7);
    let ctx = d.open();
    let pd = Pd::alloc(&ctx).unwrap();
    let cq = Cq::create(&ctx, 16, 0, None, 1).unwrap();
    let qp = Qp::create(&pd, &QpInit::new(QpType::Rc, &cq, &cq, cap())).unwrap();

    // Posting on a RESET QP is refused synchronously.
    let e = qp.post_send(&[SendWr::send(1, &[])]).unwrap_err();
    assert_eq!((e.index, e.errno()), (0, libc::EINVAL));
    let e = qp.post_recv(&[RecvWr::new(1, &[])]).unwrap_err();
    assert_eq!((e.index, e.errno()), (0, libc::EINVAL));
    // And the daemon refuses a transition the verbs API does not allow.
    let rts = QpAttr {
        qp_state: QpState::Rts as u8,
        ..Default::default()
    };
    let e = qp.modify(&rts, qp_attr_mask::STATE).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    // A PD in use cannot go.
    let (pd, e) = pd.dealloc().unwrap_err();
    assert_eq!(e.errno(), libc::EBUSY, "{e}");
    drop(qp);
    drop(cq);

    // A bad lkey completes in error and the QP flushes what follows.
    let p = Pair::new(&ctx, QpType::Rc);
    let buf = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    let mut bad = buf.sge(0, 16);
    bad.lkey ^= 0x5a5a;
    p.a.post_send(&[
        SendWr::write(1, &[bad], buf.addr(), buf.rkey()).signaled(),
        SendWr::write(2, &[buf.sge(0, 16)], buf.addr(), buf.rkey()).signaled(),
    ])
    .unwrap();
    let wc = poll_one(&p.cq_a);
    assert_eq!(
        (wc.wr_id, wc.wc_status()),
        (1, Some(WcStatus::LocProtErr)),
        "{wc:?}"
    );
    let wc = poll_one(&p.cq_a);
    assert_eq!(
        (wc.wr_id, wc.wc_status()),
        (2, Some(WcStatus::WrFlushErr)),
        "{wc:?}"
    );

    // A bad rkey is the responder's complaint.
    let p = Pair::new(&ctx, QpType::Rc);
    let buf = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    p.a.post_send(&[SendWr::write(3, &[buf.sge(0, 16)], buf.addr(), buf.rkey() ^ 1).signaled()])
        .unwrap();
    let wc = poll_one(&p.cq_a);
    assert_eq!(
        (wc.wr_id, wc.wc_status()),
        (3, Some(WcStatus::RemAccessErr)),
        "{wc:?}"
    );
    drop(pd);
}

/// Every WR opcode (and values libibverbs does not define) on every QP
/// type, through `post_send`: what rxu executes is accepted, everything
/// else is EINVAL with the failing WR's index (the `bad_wr` of
/// ibv_post_send). The matrix is spelled out
/// here rather than read from the table it checks.
#[test]
fn post_send_checks_every_opcode_on_every_qp_type() {
    let d = daemon(8);
    let ctx = d.open();
    let accepted: [(QpType, &[u32]); 3] = [
        (QpType::Rc, &[0, 1, 2, 3, 4, 5, 6, 9, 14, 15]),
        (QpType::Uc, &[0, 1, 2, 3]),
        (QpType::Ud, &[2, 3]),
    ];
    let qkey = ConnectOpts::default().qkey;
    for (t, ok) in accepted {
        for v in 0..=17u32 {
            // Fresh QPs for each case: an accepted WR runs, and may fail
            // its QP (a SEND without a receive, say).
            let p = Pair::new(&ctx, t);
            let buf = MrBuf::new(&p.pd, 64, ALL_ACCESS).unwrap();
            let ah = Ah::new(
                &p.pd,
                AhAttr {
                    dgid: ctx.query_gid(0).unwrap(),
                    hop_limit: 64,
                    is_global: true,
                    port_num: 1,
                    ..Default::default()
                },
            )
            .unwrap();
            let sge = [buf.sge(0, 8)];
            let mut good = SendWr::send(1, &sge);
            let mut wr = SendWr {
                wr_id: 2,
                opcode: WrOpcode(v),
                sg_list: &sge,
                remote_addr: buf.addr(),
                rkey: buf.rkey(),
                ..Default::default()
            };
            if t == QpType::Ud {
                good = good.ud(&ah, p.b.qpn(), qkey);
                wr = wr.ud(&ah, p.b.qpn(), qkey);
            }
            let third = good;
            let r = p.a.post_send(&[good, wr, third]);
            if ok.contains(&v) {
                assert!(r.is_ok(), "{t:?} {:?}: {r:?}", WrOpcode(v));
            } else {
                let e = r.expect_err(&format!("{t:?} {:?} accepted", WrOpcode(v)));
                assert_eq!((e.index, e.errno()), (1, libc::EINVAL), "{t:?} {v}");
            }
        }
    }
}

/// SEND_WITH_INV on UC: the IBA has no UC packet for it. It used to be
/// accepted by post_send (0) and then fail the QP in the daemon; it is
/// refused at post time and the QP stays usable.
#[test]
fn send_with_inv_on_uc_is_refused_at_post_time() {
    let d = daemon(9);
    let ctx = d.open();
    let p = Pair::new(&ctx, QpType::Uc);
    let mut ba = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    let bb = MrBuf::new(&p.pd, 4096, ALL_ACCESS).unwrap();
    let sge = [ba.sge(0, 64)];
    let inv = SendWr {
        wr_id: 7,
        opcode: WrOpcode::SEND_WITH_INV,
        sg_list: &sge,
        imm_data: bb.rkey(),
        ..Default::default()
    };
    let e = p.a.post_send(&[inv.signaled()]).unwrap_err();
    assert_eq!((e.index, e.errno()), (0, libc::EINVAL));
    // The QP did not fail: a SEND still goes through.
    let data = pattern(9, 64);
    ba.write(0, &data).unwrap();
    p.b.post_recv(&[RecvWr::new(71, &[bb.sge(0, 64)])]).unwrap();
    p.a.post_send(&[SendWr::send(8, &sge).signaled()]).unwrap();
    assert_eq!(expect_ok(&p.cq_a, WcOpcode::Send).wr_id, 8);
    assert_eq!(expect_ok(&p.cq_b, WcOpcode::Recv).wr_id, 71);
}

/// create_ah is checked as the kernel's rdma_create_ah: port 1 only, a
/// GRH, and a source GID of the table (EINVAL outside it, ENODATA for an
/// empty entry); the device has one address, so one GID.
#[test]
fn create_ah_checks_port_grh_and_source_gid() {
    let d = daemon(10);
    let ctx = d.open();
    let pd = Pd::alloc(&ctx).unwrap();
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.gids.len(), 1);
    let good = AhAttr {
        dgid: ctx.query_gid(0).unwrap(),
        hop_limit: 64,
        is_global: true,
        port_num: 1,
        ..Default::default()
    };
    assert!(Ah::new(&pd, good).is_ok());
    let errno = |a: AhAttr| Ah::new(&pd, a).map(|_| ()).map_err(|e| e.errno());
    let empty = u8::try_from(port.gids.len()).unwrap();
    assert_eq!(
        errno(AhAttr {
            sgid_index: empty,
            ..good
        }),
        Err(libc::ENODATA)
    );
    let beyond = u8::try_from(port.gid_tbl_len).unwrap();
    assert_eq!(
        errno(AhAttr {
            sgid_index: beyond,
            ..good
        }),
        Err(libc::EINVAL)
    );
    assert_eq!(
        errno(AhAttr {
            is_global: false,
            ..good
        }),
        Err(libc::EINVAL)
    );
    for port_num in [0, 2] {
        assert_eq!(errno(AhAttr { port_num, ..good }), Err(libc::EINVAL));
    }
    // The PD is busy while an AH (or a clone of it) lives, as the kernel
    // counts AHs; the daemon never sees them, the client does.
    let busy = |pd: Pd| match pd.dealloc() {
        Err((pd, e)) => {
            assert_eq!(e.errno(), libc::EBUSY, "{e}");
            pd
        }
        Ok(()) => panic!("dealloc_pd with a live AH succeeded"),
    };
    let ah = Ah::new(&pd, good).unwrap();
    let twin = ah.clone();
    let pd = busy(pd);
    drop(ah);
    let pd = busy(pd);
    drop(twin);
    assert!(pd.dealloc().is_ok());
}
