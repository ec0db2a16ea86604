//! The mixed workload: `--qps` RC lanes on one CQ; on each, the client
//! runs operation i as kind i % 6 — SEND, WRITE, WRITE_WITH_IMM, READ,
//! CmpSwap, FetchAdd — with `--depth` in flight per lane.
//!
//! What is checked, per lane: every send wr_id completes exactly once and
//! in order (RC completes a QP's sends in order; wr_id = lane << 32 | i);
//! the server's receives likewise (wr_id = lane << 32 | k for its k-th
//! receive). SENDs are compared byte for byte on arrival; WRITE_WITH_IMM
//! carries i as immediate; round m's WRITE and WRITE_WITH_IMM go to the two
//! halves of one target slot, and round m's READ reads the slot back — RC
//! executes a QP's requests in order, so it must see exactly those bytes:
//! every written byte is checked; CmpSwap and FetchAdd results follow from
//! the lane's own history (CmpSwap m swaps m for m + 1, FetchAdd m adds
//! m + 1); at the end the server checks every target slot holds its last
//! writers' bytes and the atomic words their final values.

use std::time::{Duration, Instant};

use rxu_client::*;

use crate::args::{Args, Role};
use crate::ctl::Ctl;
use crate::flow::{self, Outcome};
use crate::lanes::Lanes;
use crate::peer::{connect_opts, Res};

mod client;
mod server;
mod workload;

use client::Client;
use server::{post_initial_recvs, server_after, Server};
pub use workload::pattern;
use workload::*;

fn cap(depth: u32) -> QpCap {
    QpCap {
        max_send_wr: depth,
        max_recv_wr: depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

pub fn run(args: &Args) -> Res<Outcome> {
    if args.iters > u64::from(u32::MAX) {
        return Err("mixed: --iters at most 2^32 - 1".into());
    }
    let deadline = Instant::now() + args.timeout;
    let lay = Layout::new(args);
    let len = match args.role {
        Role::Server => lay.server_len(),
        Role::Client => lay.client_len(),
    };
    let cqe = args.qps * 2 * args.depth + 16;
    let mut l = Lanes::new(&args.device, lay.qps, cap(args.depth), cqe, len)?;
    let mut ctl = Ctl::open(&args.link, args.timeout).map_err(flow::io)?;
    let remote = flow::exchange_info(&mut ctl, &l.info()?)?;
    l.connect(&remote, &connect_opts(args))?;
    match args.role {
        Role::Server => {
            post_initial_recvs(&l, &lay)?;
            flow::ready(&mut ctl)?;
            let start = Instant::now();
            let mut sv = Server::new(lay);
            let outcome = sv.run(&l, &mut ctl, deadline);
            let secs = start.elapsed().as_secs_f64();
            if let Err(err) = &outcome {
                let _ = ctl.send(&format!("VERDICT fail {err}"));
                return Err(err.clone());
            }
            if !sv.done_seen {
                let done = ctl.expect("DONE").map_err(flow::io)?;
                if done != "ok" {
                    let _ = ctl.send("VERDICT fail client failed");
                    return Err(format!("client: {done}"));
                }
            }
            let checked = server_after(&l, &lay, &sv.n);
            match &checked {
                Ok(()) => ctl.send("VERDICT ok"),
                Err(err) => ctl.send(&format!("VERDICT fail {err}")),
            }
            .map_err(flow::io)?;
            checked?;
            let ops: u64 = sv.n.iter().sum();
            Ok(Outcome {
                bytes: sv.bytes,
                secs,
                extra: format!("lanes={} ops={ops}", lay.qps),
            })
        }
        Role::Client => {
            if remote.len != lay.server_len() as u64 {
                return Err(format!(
                    "server buffer is {} bytes, expected {} (same arguments on both sides?)",
                    remote.len,
                    lay.server_len()
                ));
            }
            flow::ready(&mut ctl)?;
            if let Some(f) = &args.go_file {
                await_go(args, f, deadline)?;
            }
            let start = Instant::now();
            let mut c = Client::new(args, lay, &remote);
            c.stop_at = args.secs.map(|d| start + d);
            let mut outcome = c.run(&mut l, &mut ctl, deadline);
            let secs = start.elapsed().as_secs_f64();
            if args.expect_peer_death {
                // The server is gone: no DONE/VERDICT.
                let extra = outcome?;
                return Ok(Outcome {
                    bytes: c.bytes,
                    secs,
                    extra,
                });
            }
            if outcome.is_ok() && args.secs.is_some() {
                let ns: Vec<String> = c.st.iter().map(|s| s.limit.to_string()).collect();
                if let Err(err) = ctl.send(&format!("STOP {}", ns.join(","))) {
                    outcome = Err(flow::io(err));
                }
            }
            let extra = flow::client_done(&mut ctl, outcome)?;
            Ok(Outcome {
                bytes: c.bytes,
                secs,
                extra,
            })
        }
    }
}

/// Waits (bounded by the deadline) for the go file.
fn await_go(args: &Args, f: &std::path::Path, deadline: Instant) -> Res<()> {
    crate::note(args, "WAITING");
    while !f.exists() {
        if Instant::now() >= deadline {
            return Err(format!("{} never appeared", f.display()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_receive_order() {
        assert_eq!(count(1, SEND), 1);
        assert_eq!(count(1, WRITE), 0);
        assert_eq!(count(7, SEND), 2);
        assert_eq!(count(7, WRITE_IMM), 1);
        assert_eq!(count(12, FADD), 2);
        let ops: Vec<u64> = (0..5).map(Layout::recv_op).collect();
        assert_eq!(ops, [0, 2, 6, 8, 12]);
        // Every receive-consuming op of a run is some recv_op(k), k < recvs.
        for n in 1..40u64 {
            let want: Vec<u64> = (0..n).filter(|i| i % 6 == 0 || i % 6 == 2).collect();
            let k = count(n, SEND) + count(n, WRITE_IMM);
            let got: Vec<u64> = (0..k).map(Layout::recv_op).collect();
            assert_eq!(got, want, "n={n}");
        }
    }

    #[test]
    fn patterns_differ_by_lane_and_op() {
        let (mut a, mut b, mut c) = ([0u8; 13], [0u8; 13], [0u8; 13]);
        pattern(0, 1, &mut a);
        pattern(1, 1, &mut b);
        pattern(0, 2, &mut c);
        assert_ne!(a, b);
        assert_ne!(a, c);
    }
}
