//! The client's side of the violate workload: what must work, what must
//! be refused remotely (one QP each), what must be refused locally.

use std::time::{Duration, Instant};

use rxu_client::*;

use super::*;
use crate::args::Args;
use crate::lanes::Lanes;
use crate::peer::{e, Idle, Res};

fn wait_one(cq: &Cq, deadline: Instant) -> Res<Wc> {
    let mut wc = [Wc::default()];
    let mut idle = Idle::default();
    // Bounded by the deadline.
    loop {
        if cq.poll(&mut wc).map_err(e("poll_cq"))? == 1 {
            return Ok(wc[0]);
        }
        if Instant::now() >= deadline {
            return Err("timed out waiting for a completion".into());
        }
        idle.wait();
    }
}

/// Posts one WR on lane `q` and returns its completion.
fn one(l: &Lanes, q: usize, wr: SendWr<'_>, deadline: Instant) -> Res<Wc> {
    l.qps[q]
        .post_send(&[wr.signaled()])
        .map_err(|err| format!("lane {q}: post_send: {err}"))?;
    let wc = wait_one(&l.cq, deadline)?;
    if wc.wr_id != wr.wr_id || wc.qp_num != l.qps[q].qpn() {
        return Err(format!("lane {q}: unexpected completion {wc:?}"));
    }
    Ok(wc)
}

fn ok(wc: Wc, what: &str) -> Res<()> {
    if wc.is_success() {
        Ok(())
    } else {
        Err(format!("{what}: {} (must work)", wc.status_str()))
    }
}

pub(super) fn client(args: &Args, l: &mut Lanes, t: &[Remote], deadline: Instant) -> Res<()> {
    let a = t[0];
    let (pa, pw) = (p1(), p2());
    // Before: what the MRs allow works.
    l.buf.write(0, &pa).map_err(e("write buffer"))?;
    ok(
        one(
            l,
            0,
            SendWr::write(1, &[l.buf.sge(0, pa.len() as u32)], a.addr, a.rkey),
            deadline,
        )?,
        "WRITE A",
    )?;
    ok(
        one(
            l,
            0,
            SendWr::read(2, &[l.buf.sge(PAGE, pa.len() as u32)], a.addr, a.rkey),
            deadline,
        )?,
        "READ A",
    )?;
    expect(l, PAGE, &pa, "READ A")?;
    ok(
        one(
            l,
            0,
            SendWr::fetch_add(3, &[l.buf.sge(2 * PAGE, 8)], a.addr, a.rkey, ADD),
            deadline,
        )?,
        "FETCH_ADD A",
    )?;
    expect(l, 2 * PAGE, &pa[..8], "FETCH_ADD A result")?;
    let ro = t[1];
    ok(
        one(
            l,
            0,
            SendWr::read(4, &[l.buf.sge(PAGE, ro.len as u32)], ro.addr, ro.rkey),
            deadline,
        )?,
        "READ RO",
    )?;
    let want: Vec<u8> = (ro.off..ro.off + ro.len as usize).map(guard_byte).collect();
    expect(l, PAGE, &want, "READ RO")?;
    let wo = t[2];
    l.buf.write(0, &pw).map_err(e("write buffer"))?;
    ok(
        one(
            l,
            0,
            SendWr::write(5, &[l.buf.sge(0, pw.len() as u32)], wo.addr, wo.rkey),
            deadline,
        )?,
        "WRITE WO",
    )?;

    // The violations, one lane each.
    let valid: Vec<u32> = t.iter().map(|r| r.rkey).chain([l.buf.rkey()]).collect();
    for (c, cs) in CASES.iter().enumerate() {
        let q = c + 1;
        let r = t[TARGETS.iter().position(|x| *x == cs.target).unwrap_or(0)];
        let end = r.addr + r.len;
        let atomic = matches!(cs.op, Op::Cas | Op::Fadd);
        let (mut addr, mut len, mut rkey) = (r.addr, if atomic { 8 } else { 16 }, r.rkey);
        match cs.at {
            Where::BadKey => {
                rkey = r.rkey ^ 0x00a5_5a00;
                if valid.contains(&rkey) {
                    rkey ^= 0x0100_0001;
                }
            }
            Where::Start => {}
            Where::EndCross => addr = end - 8,
            Where::BeforeStart => addr = r.addr - 8,
            Where::Past => addr = end,
            Where::Large => len = 8192,
        }
        let wr_id = 100 + c as u64;
        let sge = [l.buf.sge(PAGE, len)];
        let wr = match cs.op {
            Op::Write => SendWr::write(wr_id, &sge, addr, rkey),
            Op::Read => SendWr::read(wr_id, &sge, addr, rkey),
            Op::Cas => SendWr::cmp_swap(wr_id, &sge, addr, rkey, 0, 0xdead),
            Op::Fadd => SendWr::fetch_add(wr_id, &sge, addr, rkey, 0xdead),
        };
        let wc = one(l, q, wr, deadline)?;
        let qpn = l.qps[q].qpn();
        crate::note(
            args,
            &format!("CASE {} qpn={qpn:#x} status={}", cs.name, wc.status_str()),
        );
        if wc.wc_status() != Some(WcStatus::RemAccessErr) {
            return Err(format!(
                "{}: completed with {}, expected IBV_WC_REM_ACCESS_ERR",
                cs.name,
                wc.status_str()
            ));
        }
        let (attr, _) = l.qps[q].query(qp_attr_mask::STATE).map_err(e("query_qp"))?;
        if attr.qp_state != QpState::Err as u8 {
            return Err(format!(
                "{}: requester QP in state {} after the refusal, expected ERR",
                cs.name, attr.qp_state
            ));
        }
    }

    // Local misuse: the server's keys in our SGEs.
    for (c, (name, how)) in LOCAL.iter().enumerate() {
        let q = FIRST_LOCAL + c;
        let wr_id = 200 + c as u64;
        let from_a = [Sge {
            addr: a.addr,
            length: 16,
            lkey: a.rkey,
        }];
        let into_wo = [Sge {
            addr: wo.addr,
            length: if *how == Local::FaddInto { 8 } else { 16 },
            lkey: wo.rkey,
        }];
        let wr = match how {
            Local::SendFrom => SendWr::send(wr_id, &from_a),
            Local::WriteFrom => SendWr::write(wr_id, &from_a, a.addr, a.rkey),
            Local::ReadInto => SendWr::read(wr_id, &into_wo, a.addr, a.rkey),
            Local::FaddInto => SendWr::fetch_add(wr_id, &into_wo, a.addr, a.rkey, 0),
        };
        let wc = one(l, q, wr, deadline)?;
        let qpn = l.qps[q].qpn();
        crate::note(
            args,
            &format!("LOCAL {name} qpn={qpn:#x} status={}", wc.status_str()),
        );
        if wc.wc_status() != Some(WcStatus::LocProtErr) {
            return Err(format!(
                "{name}: completed with {}, expected IBV_WC_LOC_PROT_ERR",
                wc.status_str()
            ));
        }
    }

    // After: A still reads back what the allowed operations left.
    let img = expected_arena();
    ok(
        one(
            l,
            AFTER,
            SendWr::read(6, &[l.buf.sge(PAGE, a.len as u32)], a.addr, a.rkey),
            deadline,
        )?,
        "READ A after the violations",
    )?;
    expect(l, PAGE, &img[a.off..a.off + a.len as usize], "READ A after")?;
    // Nothing else completes anywhere (no late, duplicate completions).
    let quiet = Instant::now() + Duration::from_millis(50);
    let mut wc = [Wc::default()];
    while Instant::now() < quiet {
        if l.cq.poll(&mut wc).map_err(e("poll_cq"))? > 0 {
            return Err(format!("stray completion {:?}", wc[0]));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn expect(l: &Lanes, off: usize, want: &[u8], what: &str) -> Res<()> {
    let mut got = vec![0u8; want.len()];
    l.buf.read(off, &mut got).map_err(e("read buffer"))?;
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(j) => Err(format!(
            "{what}: byte {j} is {:#04x}, expected {:#04x}",
            got[j], want[j]
        )),
    }
}
