//! State-machine cost, without sockets: two RC QPs back to back moving
//! 64 KiB WRITEs at MTU 4096. Run with
//! `cargo test --release -p transport --lib qp::tests::bench -- --ignored --nocapture`.

use super::harness::*;
use crate::qp::*;
use crate::wire::{Packet, MAX_PACKET};
use std::time::Instant;

#[test]
#[ignore]
fn bench_rc_write_64k() {
    let mut h = Harness::new(&Setup {
        mtu: Mtu::M4096,
        sq_sig_all: false,
        ..Setup::default()
    });
    const MSG: usize = 64 << 10;
    let src = h.a.reg(0x1000_0000, MSG, 0, pat(1));
    let dst = h.b.reg(0x2000_0000, MSG, access::REMOTE_WRITE, |_| 0);
    let meta_b = RxMeta {
        src: h.a.addr,
        src_port: 0xC000,
        dst: h.b.addr,
        tos: 0,
        ttl: 64,
        ip_id: 0,
        flow_label: 0,
    };
    let meta_a = RxMeta {
        src: h.b.addr,
        src_port: 0xC000,
        dst: h.a.addr,
        tos: 0,
        ttl: 64,
        ip_id: 0,
        flow_label: 0,
    };
    let mut buf = vec![0u8; MAX_PACKET];
    let now = h.now;
    let start = Instant::now();
    let (mut posted, mut pkts) = (0u64, 0u64);
    let total: u64 = 20_000;
    let mut done = 0u64;
    while done < total {
        while posted < total && h.a.qp.send_queue_len() < 32 {
            let mut w = wqe(
                posted,
                SendOp::Write {
                    remote_addr: 0x2000_0000,
                    rkey: dst,
                },
                vec![sge(0x1000_0000, MSG as u32, src)],
            );
            w.flags = if posted % 16 == 15 {
                send_flags::SIGNALED
            } else {
                0
            };
            h.a.qp.post_send(w).unwrap();
            posted += 1;
        }
        // A sends a batch; B takes it and answers; A takes the ACKs.
        for _ in 0..64 {
            let (qp, mut env) = h.a.env();
            let Some(t) = qp.poll_transmit(now, &mut env, &mut buf) else {
                break;
            };
            pkts += 1;
            let p = Packet::parse(&buf[..t.len]).unwrap();
            let (qp, mut env) = h.b.env();
            qp.handle_packet(now, &p, &meta_b, &mut env);
        }
        loop {
            let (qp, mut env) = h.b.env();
            let Some(t) = qp.poll_transmit(now, &mut env, &mut buf) else {
                break;
            };
            let p = Packet::parse(&buf[..t.len]).unwrap();
            let (qp, mut env) = h.a.env();
            qp.handle_packet(now, &p, &meta_a, &mut env);
        }
        while h.a.qp.poll_completion().is_some() {
            done += 16;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = total as f64 * MSG as f64;
    println!(
        "RC WRITE 64 KiB @4096: {:.2} GB/s, {:.0} ns/packet (both QPs, memcpy included)",
        bytes / secs / 1e9,
        secs * 1e9 / pkts as f64
    );
}
