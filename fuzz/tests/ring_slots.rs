//! The ring_slots fuzz target on stable, over seeded random inputs: well
//! formed work requests (written with the slot views' setters, keys and
//! addresses inside the registered regions or just outside), the same with
//! random bytes flipped, and plain random bytes. `rxu_fuzz::slots::run`
//! panics on a finding. `RXU_FUZZ_CASES` sets the number of cases.

use rxu_abi::proto::abi::{RecvSlot, SendSlot};
use rxu_fuzz::slots::{recv_size, region_addr, run, send_size, Outcome, KEYS};
use transport::verbs::{send_flags, Sge, WrOpcode, ALL_WR_OPCODES};

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// An offset from a region's start: inside mostly, sometimes across its
/// end (regions are 4096 bytes), sometimes anywhere.
fn near(r: &mut Rng) -> u64 {
    match r.below(4) {
        0 => r.below(4096),
        1 => 4096 - r.below(16),
        2 => r.next(),
        _ => u64::MAX - r.below(16),
    }
}

fn send_slot(r: &mut Rng, base: &[u64]) -> Vec<u8> {
    let mut b = vec![0u8; send_size()];
    let mut s = SendSlot::new_unchecked(&mut b[..]);
    let op = ALL_WR_OPCODES[r.below(ALL_WR_OPCODES.len() as u64) as usize];
    s.set_wr_id(r.next());
    s.set_opcode(if r.below(10) == 0 {
        WrOpcode(r.below(20) as u32)
    } else {
        op
    });
    let mut flags = send_flags::SIGNALED;
    if r.below(4) == 0 {
        flags |= send_flags::INLINE;
    }
    s.set_send_flags(flags);
    s.set_imm_data(1 + r.below(u64::from(KEYS) + 1) as u32);
    let key = 1 + r.below(u64::from(KEYS) + 1) as u32;
    let region = base[r.below(base.len() as u64) as usize];
    s.set_rkey(key);
    // Key 2's region is addressed remotely from 0 (zero-based iova).
    let ra = if key == 2 {
        near(r)
    } else {
        region.wrapping_add(near(r) % 4200)
    };
    s.set_remote_addr(if r.below(8) == 0 { ra } else { ra & !7 });
    s.set_compare_add(r.below(5000));
    s.set_swap(r.next());
    s.set_flush(r.below(4) as u32 | (r.below(3) as u32) << 8);
    s.set_ud_qpn(0x22);
    s.set_ud_qkey(0x8000_0000);
    s.set_ud_gid(
        &std::net::Ipv4Addr::new(127, 0, 0, 2)
            .to_ipv6_mapped()
            .octets(),
    );
    if flags & send_flags::INLINE != 0 {
        let n = r.below(80) as usize;
        let data: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
        s.set_inline_data(&data).unwrap_or(());
    } else {
        let sges: Vec<Sge> = (0..r.below(5))
            .map(|_| Sge {
                addr: base[r.below(base.len() as u64) as usize].wrapping_add(near(r) % 4200),
                length: r.below(3000) as u32,
                lkey: 1 + r.below(u64::from(KEYS) + 1) as u32,
            })
            .collect();
        s.set_sges(&sges).unwrap_or(());
    }
    b
}

fn recv_slot(r: &mut Rng, base: &[u64]) -> Vec<u8> {
    let mut b = vec![0u8; recv_size()];
    let mut v = RecvSlot::new_unchecked(&mut b[..]);
    v.set_wr_id(r.next());
    let sges: Vec<Sge> = (0..r.below(5))
        .map(|_| Sge {
            addr: base[r.below(base.len() as u64) as usize] + near(r) % 4200,
            length: r.below(5000) as u32,
            lkey: 1 + r.below(u64::from(KEYS) + 1) as u32,
        })
        .collect();
    v.set_sges(&sges).unwrap_or(());
    b
}

/// One input: a QP type byte, then selector + slot, as `split` reads it.
fn input(r: &mut Rng, base: &[u64]) -> Vec<u8> {
    let mut d = vec![r.below(3) as u8];
    for _ in 0..1 + r.below(5) {
        if r.below(2) == 0 {
            d.push(0);
            d.extend(send_slot(r, base));
        } else {
            d.push(1);
            d.extend(recv_slot(r, base));
        }
    }
    d
}

fn cases() -> u64 {
    std::env::var("RXU_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

#[test]
fn arbitrary_slots_give_errors_not_panics_or_stray_accesses() {
    let mut r = Rng(0x5eed_1234_abcd_0001);
    let base = [region_addr(0), region_addr(1), region_addr(2), 0x1000];
    let mut total = Outcome::default();
    for i in 0..cases() {
        let mut d = match i % 3 {
            0 => input(&mut r, &base),
            1 => {
                let mut d = input(&mut r, &base);
                for _ in 0..1 + r.below(8) {
                    let at = r.below(d.len() as u64) as usize;
                    d[at] ^= 1 << r.below(8);
                }
                d
            }
            _ => (0..r.below(700)).map(|_| r.next() as u8).collect(),
        };
        d.truncate(2000);
        let o = run(&d);
        total.bad_slots += o.bad_slots;
        total.refused += o.refused;
        total.posted += o.posted;
        total.accesses += o.accesses;
        total.denied += o.denied;
        total.completions += o.completions;
    }
    eprintln!("{total:?}");
    // The generator reaches every path: refused slots, posted WQEs that
    // move bytes, and accesses the memory table refuses.
    assert!(total.bad_slots > 0 && total.posted > 0 && total.completions > 0);
    assert!(total.accesses > 0 && total.denied > 0, "{total:?}");
}

/// Writes the structured inputs as a libFuzzer seed corpus into the
/// directory `RXU_FUZZ_SEEDS` names (run with --ignored).
#[test]
#[ignore]
fn write_seed_corpus() {
    let Some(dir) = std::env::var_os("RXU_FUZZ_SEEDS") else {
        eprintln!("skipped: RXU_FUZZ_SEEDS not set");
        return;
    };
    std::fs::create_dir_all(&dir).unwrap();
    let mut r = Rng(42);
    let base = [region_addr(0), region_addr(1), region_addr(2)];
    for i in 0..200 {
        let d = input(&mut r, &base);
        std::fs::write(std::path::Path::new(&dir).join(format!("seed-{i:03}")), d).unwrap();
    }
}

/// Runs every file of the directory `RXU_FUZZ_REPLAY` names (a corpus or
/// crash artifacts) and prints what they did (run with --ignored).
#[test]
#[ignore]
fn replay_corpus() {
    let Some(dir) = std::env::var_os("RXU_FUZZ_REPLAY") else {
        eprintln!("skipped: RXU_FUZZ_REPLAY not set");
        return;
    };
    let mut total = Outcome::default();
    let mut files = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let o = run(&std::fs::read(e.unwrap().path()).unwrap());
        files += 1;
        total.bad_slots += o.bad_slots;
        total.refused += o.refused;
        total.posted += o.posted;
        total.accesses += o.accesses;
        total.denied += o.denied;
        total.completions += o.completions;
    }
    eprintln!("{files} inputs: {total:?}");
}
