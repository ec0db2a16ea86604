//! The data path does not allocate per packet: RC WRITEs of 64 KiB (16
//! packets each at MTU 4096) between two engines, counting heap
//! allocations of the whole process in the steady state.

mod common;

use common::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use transport::qp::{access, send_flags, Payload, QpType, SendOp, SendWqe, Sge, WcStatus};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only
// counts allocations.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const VA: u64 = 0x1_0000_0000;
const MSG: usize = 65536;
const INFLIGHT: usize = 32;

#[test]
fn steady_state_rc_write_does_not_allocate_per_packet() {
    let (a_ip, b_ip) = ("127.0.0.61", "127.0.0.62");
    let conn = Conn::default();
    let ((allocs, pkts, msgs), _) = pair(
        |link| {
            let mut e = engine(a_ip, |_| {});
            let key = e.memory_mut().register(PD, VA, vec![7; MSG * INFLIGHT], 0);
            let qpn = e.create_qp(spec(QpType::Rc)).unwrap();
            link.send(u64::from(qpn));
            let peer = link.recv() as u32;
            let rkey = link.recv() as u32;
            connect(&mut e, qpn, QpType::Rc, Some((peer, ip(b_ip))), &conn);
            let mut posted = 0u64;
            let mut done = 0u64;
            let mut out = vec![
                transport::qp::Completion::new(
                    transport::qp::CqSide::Send,
                    0,
                    WcStatus::Success,
                    transport::qp::WcOpcode::Send,
                    0,
                );
                64
            ];
            let mut mark: Option<(u64, u64, u64)> = None;
            let d = Deadline::after(Duration::from_secs(30));
            while done < 3000 {
                while posted - done < INFLIGHT as u64 {
                    let off = (posted as usize % INFLIGHT) * MSG;
                    let w = SendWqe {
                        wr_id: posted,
                        op: SendOp::Write {
                            remote_addr: VA + off as u64,
                            rkey,
                        },
                        flags: send_flags::SIGNALED,
                        payload: Payload::Sges(vec![Sge {
                            addr: VA + off as u64,
                            length: MSG as u32,
                            lkey: key,
                        }]),
                        ud: None,
                        xrc_srqn: None,
                    };
                    e.post_send(qpn, w).unwrap();
                    posted += 1;
                }
                e.run_once(Some(Duration::from_millis(5))).unwrap();
                let n = e.poll_cq_into(SEND_CQ, &mut out);
                for c in &out[..n] {
                    assert_eq!(c.status, WcStatus::Success, "{c:?}");
                }
                done += n as u64;
                // Measure from the 1000th message on (buffers warmed up).
                if mark.is_none() && done >= 1000 {
                    mark = Some((ALLOCS.load(Ordering::Relaxed), e.counters().rcvd_pkts, done));
                }
                d.check(|| format!("{done} done"));
            }
            let (a0, _, m0) = mark.unwrap();
            let allocs = ALLOCS.load(Ordering::Relaxed) - a0;
            let msgs = done - m0;
            (allocs, msgs * (MSG as u64 / 4096), msgs)
        },
        |link| {
            let mut e = engine(b_ip, |_| {});
            let all = access::LOCAL_WRITE | access::REMOTE_WRITE;
            let key = e
                .memory_mut()
                .register(PD, VA, vec![0; MSG * INFLIGHT], all);
            let qpn = e.create_qp(spec(QpType::Rc)).unwrap();
            let peer = link.recv() as u32;
            link.send(u64::from(qpn));
            link.send(u64::from(key));
            connect(&mut e, qpn, QpType::Rc, Some((peer, ip(a_ip))), &conn);
            while !link.stopped() {
                e.run_once(Some(Duration::from_millis(5))).unwrap();
            }
        },
    );
    let per_pkt = allocs as f64 / pkts as f64;
    let per_msg = allocs as f64 / msgs as f64;
    eprintln!("{allocs} allocations for {msgs} messages / {pkts} data packets: {per_msg:.2} per message, {per_pkt:.3} per packet (both engines, the test's WQEs included)");
    // The one allocation per message is the test's own WQE (its SGE list).
    assert!(per_pkt < 0.25, "{per_pkt:.3} allocations per packet");
}
