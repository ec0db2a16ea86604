//! The workloads: the client drives a window of `depth` operations, the
//! server receives and checks; both verify every byte they can see.

use std::time::Instant;

use rxu_client::*;

use crate::args::{Args, Workload};
use crate::ctl::PeerInfo;
use crate::peer::{Peer, Res};

/// Runs the client side; returns bytes moved.
pub fn client(p: &mut Peer, args: &Args, remote: &PeerInfo, deadline: Instant) -> Res<u64> {
    let size = p.size;
    let rslots = (remote.len / size as u64) as usize;
    if rslots == 0 {
        return Err(format!(
            "peer buffer of {} bytes holds no {size}-byte slot",
            remote.len
        ));
    }
    let (mut posted, mut done) = (0u64, 0u64);
    let mut fetched = Vec::new();
    // --secs lowers the count to what was posted when time runs out.
    let mut limit = args.iters;
    let stop_at = args.secs.map(|d| Instant::now() + d);
    while done < limit {
        if stop_at.is_some_and(|t| Instant::now() >= t) {
            limit = posted;
            if done >= limit {
                break;
            }
        }
        while posted < limit && posted - done < u64::from(args.depth) {
            let i = posted;
            let slot = (i % p.slots as u64) as usize;
            let rslot = (i % rslots as u64) as usize;
            let raddr = remote.addr + (rslot * size) as u64;
            let sge = [p.slot_sge(slot)];
            let wr = match args.workload {
                Workload::Send => {
                    p.fill_slot(slot, i)?;
                    SendWr::send(i, &sge)
                }
                Workload::Write => {
                    if !args.no_verify {
                        p.fill_slot(slot, i)?;
                    }
                    SendWr::write(i, &sge, raddr, remote.rkey)
                }
                Workload::Read => SendWr::read(i, &sge, raddr, remote.rkey),
                Workload::Atomic => SendWr::fetch_add(i, &sge, remote.addr, remote.rkey, 1),
                Workload::Mixed | Workload::Violate | Workload::Lat => {
                    return Err("not a one-QP workload".into())
                }
            };
            match p.qp.post_send(&[wr.signaled()]) {
                Ok(()) => posted += 1,
                Err(e) if e.errno() == libc_enomem() => break,
                Err(e) => return Err(format!("post_send: {e}")),
            }
        }
        let wc = p.next_wc(deadline)?;
        if wc.wr_id != done {
            return Err(format!(
                "completion for wr {} while expecting {done}",
                wc.wr_id
            ));
        }
        let slot = (done % p.slots as u64) as usize;
        match args.workload {
            Workload::Read => p.verify_slot(slot, done % rslots as u64)?,
            Workload::Atomic => fetched.push(p.buf.read_u64(slot * 8).map_err(|e| e.to_string())?),
            _ => {}
        }
        done += 1;
    }
    if args.workload == Workload::Write {
        // Tells the server the writes are all in (RC keeps the order).
        let last = SendWr::write_imm(u64::MAX, &[], remote.addr, remote.rkey, limit as u32);
        p.qp.post_send(&[last.signaled()])
            .map_err(|e| format!("post_send: {e}"))?;
        p.next_wc(deadline)?;
    }
    if args.workload == Workload::Atomic {
        fetched.sort_unstable();
        if let Some((i, v)) = fetched.iter().enumerate().find(|(i, v)| **v != *i as u64) {
            return Err(format!("fetch_add results: position {i} holds {v}"));
        }
    }
    Ok(limit * size as u64)
}

/// Runs the server side up to the client's DONE; returns bytes received.
pub fn server(p: &mut Peer, args: &Args, deadline: Instant) -> Res<u64> {
    match args.workload {
        Workload::Send => {
            for k in 0..args.iters {
                let wc = p.next_wc(deadline)?;
                if wc.opcode != WcOpcode::Recv as u32 || wc.byte_len as usize != p.size {
                    return Err(format!("message {k}: {wc:?}"));
                }
                let slot = wc.wr_id as usize;
                if slot >= p.slots {
                    return Err(format!("message {k}: unknown wr_id {}", wc.wr_id));
                }
                p.verify_slot(slot, k)?;
                p.post_recv_slot(slot)?;
            }
            Ok(args.iters * p.size as u64)
        }
        Workload::Write => {
            let wc = p.next_wc(deadline)?;
            let count_ok = args.no_verify || wc.imm_data == args.iters as u32;
            if wc.opcode != WcOpcode::RecvRdmaWithImm as u32 || !count_ok {
                return Err(format!("final WRITE_WITH_IMM: {wc:?}"));
            }
            // Slot k holds the last message i with i % slots == k.
            for k in 0..p.slots as u64 {
                if args.no_verify {
                    break;
                }
                let n = args.iters;
                let last = k + (n - 1 - k) / p.slots as u64 * p.slots as u64;
                if k < n {
                    p.verify_slot(k as usize, last)?;
                }
            }
            // The immediate is the count (lower than --iters after --secs).
            Ok(u64::from(wc.imm_data) * p.size as u64)
        }
        Workload::Read | Workload::Atomic => Ok(0),
        Workload::Mixed | Workload::Violate | Workload::Lat => Err("not a one-QP workload".into()),
    }
}

/// The server's checks after the client said DONE.
pub fn server_after(p: &Peer, args: &Args) -> Res<()> {
    match args.workload {
        Workload::Atomic => {
            let v = p.buf.read_u64(0).map_err(|e| e.to_string())?;
            if v != args.iters {
                return Err(format!("counter is {v}, expected {}", args.iters));
            }
            Ok(())
        }
        Workload::Read => (0..p.slots).try_for_each(|s| p.verify_slot(s, s as u64)),
        _ => Ok(()),
    }
}

fn libc_enomem() -> i32 {
    Error::QueueFull.errno()
}
