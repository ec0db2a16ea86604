//! CQ resize and overrun, and the armed completion channel.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use super::spec::SendSpec;
use crate::daemon::device::Device;
use crate::daemon::session::event;
use crate::verbs::mask;
use rxu_abi::proto::abi::Cqe;
use rxu_abi::proto::{QpAttr, QpType, Request, Response};
use rxu_abi::ring::Ring;
use rxu_testkit::seqpacket_pair;
use transport::verbs::WrOpcode;

use super::harness::*;

#[test]
fn cq_with_timestamps_stamps_each_entry_when_made_and_keeps_them_over_resize() {
    let mut dev = device(50);
    let c = hello(&mut dev);
    let pd = alloc_pd(&mut dev, c.id);
    let (plain, mut plain_ring) = create_cq(&mut dev, c.id, 4);
    let (cq, ring) = create_cq_with(&mut dev, c.id, 4, true);
    assert_eq!((plain_ring.slot_size(), ring.slot_size()), (64, 80));
    let mut qp = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
    let mut qp2 = create_qp(&mut dev, c.id, pd, plain, QpType::Rc);
    let (m0, w0) = rxu_abi::clock::completion_stamps();
    // Error completions (posts in RESET): one to each CQ.
    for q in [&mut qp, &mut qp2] {
        post_send(
            q,
            &SendSpec {
                wr_id: 5,
                opcode: WrOpcode::SEND,
                ..Default::default()
            },
        );
    }
    dev.consume();
    let (m1, w1) = rxu_abi::clock::completion_stamps();
    let p = pop_cqe(&mut plain_ring).unwrap();
    assert_eq!(
        (p.wr_id, p.completion_ts, p.completion_wallclock_ns),
        (5, 0, 0)
    );
    let (resp, fds) = ok(call(&mut dev, c.id, Request::ResizeCq { cq, cqe: 60 }));
    assert_eq!(resp, Response::Cq { cq, cqe: 63 });
    let mut new = Ring::attach(&fds[0]).unwrap().into_consumer();
    assert_eq!(new.slot_size(), 80, "a resized CQ keeps its timestamps");
    let e = pop_cqe(&mut new).unwrap();
    assert_eq!(e.wr_id, 5);
    assert!(
        (m0..=m1).contains(&e.completion_ts),
        "{m0} {} {m1}",
        e.completion_ts
    );
    assert!((w0..=w1).contains(&e.completion_wallclock_ns));
}

#[test]
fn cq_resize_keeps_unread_entries_and_overrun_raises_cq_err() {
    let mut dev = device(8);
    let c = hello(&mut dev);
    let pd = alloc_pd(&mut dev, c.id);
    let (cq, ring) = create_cq(&mut dev, c.id, 3);
    let mut qp = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
    // Three error completions (posts in RESET) fill the 4-slot ring
    // short of one.
    for i in 0..3 {
        post_send(
            &mut qp,
            &SendSpec {
                wr_id: i,
                opcode: WrOpcode::SEND,
                ..Default::default()
            },
        );
    }
    dev.consume();
    assert_eq!(ring.len().unwrap(), 3);
    assert_eq!(
        errno(call(&mut dev, c.id, Request::ResizeCq { cq, cqe: 2 })),
        libc::EINVAL,
        "fewer entries than are unread"
    );
    let (resp, fds) = ok(call(&mut dev, c.id, Request::ResizeCq { cq, cqe: 100 }));
    assert_eq!(resp, Response::Cq { cq, cqe: 127 });
    let mut new = Ring::attach(&fds[0]).unwrap().into_consumer();
    let ids: Vec<u64> = (0..3)
        .filter_map(|_| pop_cqe(&mut new))
        .map(|e| e.wr_id)
        .collect();
    assert_eq!(ids, vec![0, 1, 2]);
    assert!(pop_cqe(&mut new).is_none());
    // Overrun: a CQ of 1 entry (2 slots) and completions the engine
    // produces all at once (flushes of posted receives).
    let (cq1, _r1) = create_cq(&mut dev, c.id, 1);
    let mut q1 = create_qp(&mut dev, c.id, pd, cq1, QpType::Rc);
    connect_rc(&mut dev, c.id, q1.qpn, 0x55, addr(8));
    for i in 0..6 {
        post_recv(&mut q1, 100 + i, &[]);
    }
    dev.consume();
    let to_err = QpAttr {
        qp_state: 6,
        ..QpAttr::default()
    };
    ok(call(
        &mut dev,
        c.id,
        Request::ModifyQp {
            qp: q1.qpn,
            mask: mask::STATE,
            attr: to_err,
        },
    ));
    dev.deliver();
    assert!(events(&c).contains(&(0xc1, event::CQ_ERR)));
    assert_eq!(dev.counters.cq_overruns, 1);
}

#[test]
fn armed_cq_notifies_its_channel_once() {
    let mut dev = device(9);
    let c = hello(&mut dev);
    let pd = alloc_pd(&mut dev, c.id);
    let (ch_rd, ch_wr) = seqpacket_pair();
    let r = dev.handle(
        c.id,
        Request::CreateCq {
            cqe: 8,
            comp_vector: 0,
            user_handle: 0xabc,
            channel: true,
            timestamps: false,
        },
        vec![ch_wr],
    );
    let (cq, fds) = match ok(r) {
        (Response::Cq { cq, .. }, fds) => (cq, fds),
        r => panic!("{:?}", r.0),
    };
    let ring = Ring::attach(&fds[0]).unwrap().into_consumer();
    let mut qp = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
    let read_ch = || {
        let mut b = [0u8; 8];
        // SAFETY: b is a valid 8-byte buffer.
        let n = unsafe {
            libc::recv(
                ch_rd.as_fd().as_raw_fd(),
                b.as_mut_ptr().cast(),
                8,
                libc::MSG_DONTWAIT,
            )
        };
        (n == 8).then(|| u64::from_ne_bytes(b))
    };
    let post = |qp: &mut TestQp, id| {
        post_send(
            qp,
            &SendSpec {
                wr_id: id,
                opcode: WrOpcode::SEND,
                ..Default::default()
            },
        )
    };
    post(&mut qp, 1);
    dev.consume();
    assert_eq!(read_ch(), None, "not armed");
    ring.set_flag(1);
    post(&mut qp, 2);
    post(&mut qp, 3);
    dev.consume();
    assert_eq!(read_ch(), Some(0xabc));
    assert_eq!(read_ch(), None, "one record per arming");
    // A channel fd that is not a socket is refused.
    let file: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let r = dev.handle(
        c.id,
        Request::CreateCq {
            cqe: 8,
            comp_vector: 0,
            user_handle: 1,
            channel: true,
            timestamps: false,
        },
        vec![file],
    );
    assert_eq!(errno(r), libc::EINVAL);
}

/// A QP moved to RESET: its completions still waiting for room in the CQ
/// ring are dropped (the client drops those in the ring), another QP's
/// stay.
#[test]
fn reset_drops_the_qps_completions_from_the_backlog() {
    let mut dev = device(12);
    let c = hello(&mut dev);
    let pd = alloc_pd(&mut dev, c.id);
    // 7 entries: a ring of 8 slots, the rest waits in the backlog (which
    // holds up to the CQ's depth).
    let (cq, mut ring) = create_cq(&mut dev, c.id, 4);
    let mut q1 = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
    let mut q2 = create_qp(&mut dev, c.id, pd, cq, QpType::Rc);
    let to = |dev: &mut Device, qpn, st: u8| {
        let attr = QpAttr {
            qp_state: st,
            ..QpAttr::default()
        };
        ok(call(
            dev,
            c.id,
            Request::ModifyQp {
                qp: qpn,
                mask: mask::STATE,
                attr,
            },
        ));
    };
    connect_rc(&mut dev, c.id, q1.qpn, 0x55, addr(12));
    connect_rc(&mut dev, c.id, q2.qpn, 0x56, addr(12));
    let post = |dev: &mut Device, qp: &mut TestQp, base: u64| {
        for i in 0..2 {
            post_recv(qp, base + i, &[]);
        }
        dev.consume();
    };
    // Receives wait in RTS; ERR flushes them all at once.
    for base in [100, 102, 104, 106] {
        post(&mut dev, &mut q1, base);
    }
    post(&mut dev, &mut q2, 200);
    post(&mut dev, &mut q1, 300);
    to(&mut dev, q1.qpn, 6);
    to(&mut dev, q2.qpn, 6);
    dev.deliver();
    let backlog = |dev: &Device| -> Vec<u64> {
        let s = dev.objects.session(c.id).unwrap();
        s.cqs[&cq]
            .backlog
            .iter()
            .map(|e| Cqe::new_unchecked(e).wr_id())
            .collect()
    };
    assert_eq!(backlog(&dev), [300, 301, 200, 201]);
    to(&mut dev, q1.qpn, 0);
    assert_eq!(backlog(&dev), [200, 201]);
    let ids: Vec<u64> = std::iter::from_fn(|| pop_cqe(&mut ring))
        .map(|w| w.wr_id)
        .collect();
    assert_eq!(
        ids,
        (100..108).collect::<Vec<u64>>(),
        "the ring is the client's to clean"
    );
    dev.deliver();
    let ids: Vec<u64> = std::iter::from_fn(|| pop_cqe(&mut ring))
        .map(|w| w.wr_id)
        .collect();
    assert_eq!(ids, [200, 201]);
}

/// One resize of a CQ whose 8 unread entries (wr_ids 0..8) the client's
/// consumer index keeps flipping between "all unread" and "the last two
/// unread" (a poller racing the resize, or a lying client), to `cqe` 3:
/// Ok with exactly the two newest entries in the new ring, or EINVAL.
/// `Err(ids)`: an Ok whose new ring held anything else.
fn resize_while_the_index_flips(dev: &mut Device, id: u32, pd: u32) -> Result<(), Vec<u64>> {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let (cq, fds) = match ok(call(
        dev,
        id,
        Request::CreateCq {
            cqe: 15,
            comp_vector: 0,
            user_handle: 1,
            channel: false,
            timestamps: false,
        },
    )) {
        (Response::Cq { cq, .. }, fds) => (cq, fds),
        r => panic!("{:?}", r.0),
    };
    let mut qp = create_qp(dev, id, pd, cq, QpType::Rc);
    for wr_id in 0..8 {
        // Posts in RESET: error completions.
        let send = SendSpec {
            wr_id,
            opcode: WrOpcode::SEND,
            ..Default::default()
        };
        post_send(&mut qp, &send);
    }
    dev.consume();
    let len = Ring::mapped_len(&fds[0]).unwrap();
    // SAFETY: a shared read-write mapping of the CQ ring's memfd, `len`
    // bytes as the ring says; unmapped below after the flipper stopped.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fds[0].as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    // SAFETY: the consumer index is an aligned u32 at byte 128 of the
    // mapping (rxu_abi::ring::layout), live while `map` is.
    let cons = unsafe { &*(map.cast::<u8>().add(128).cast::<AtomicU32>()) };
    let all = cons.load(Ordering::Acquire);
    let stop = AtomicBool::new(false);
    let flips = AtomicU32::new(0);
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) && n < 50_000_000 {
                let v = if n.is_multiple_of(2) { all } else { all + 6 };
                cons.store(v, Ordering::Release);
                n += 1;
                flips.store(n, Ordering::Relaxed);
            }
        });
        // Resize once it flips (a thread starts in some 50 us).
        let t0 = std::time::Instant::now();
        while flips.load(Ordering::Relaxed) < 1000 && t0.elapsed().as_secs() < 5 {
            std::hint::spin_loop();
        }
        let r = call(dev, id, Request::ResizeCq { cq, cqe: 3 });
        stop.store(true, Ordering::Relaxed);
        r
    });
    // SAFETY: the mapping made above; the flipper has stopped.
    unsafe { libc::munmap(map, len) };
    match result.resp {
        Response::Error { errno, .. } => {
            assert_eq!(errno, libc::EINVAL);
            Ok(())
        }
        Response::Cq { .. } => {
            let mut new = Ring::attach(&result.fds[0]).unwrap().into_consumer();
            let ids: Vec<u64> = std::iter::from_fn(|| pop_cqe(&mut new))
                .map(|e| e.wr_id)
                .take(16)
                .collect();
            if ids == [6, 7] {
                Ok(())
            } else {
                Err(ids)
            }
        }
        other => panic!("{other:?}"),
    }
}

/// A CQ resize racing the client's consumer index copies what one look
/// at the index showed, all of it, or refuses (EINVAL, as a resize below
/// the outstanding count on the kernel): never a part with the rest
/// silently dropped. Before, the count was checked at one look and the
/// copy made at another, and a new ring too small lost the surplus.
#[test]
fn cq_resize_racing_the_consumer_index_loses_nothing() {
    let mut dev = device(16);
    let c = hello(&mut dev);
    let pd = alloc_pd(&mut dev, c.id);
    for trial in 0..60 {
        if let Err(ids) = resize_while_the_index_flips(&mut dev, c.id, pd) {
            panic!("trial {trial}: the resized CQ holds {ids:?}, not [6, 7]");
        }
    }
}
