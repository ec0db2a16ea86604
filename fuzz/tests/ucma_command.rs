//! The ucma_command fuzz target on stable, over seeded inputs: every
//! command with its real size and random fields, the same with bytes
//! flipped or cut, and plain random bytes. `RXU_FUZZ_CASES` sets the
//! number of cases.

use rxu_fuzz::ucma::{run, Outcome};
use rxu_ucma::abi;

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

/// A command as librdmacm writes it, fields random.
fn command(r: &mut Rng) -> Vec<u8> {
    let c = r.below(24) as u32;
    let body = abi::body_len(c).unwrap_or(r.below(64) as usize);
    let out: u16 = match r.below(3) {
        0 => 0,
        1 => 336,
        _ => r.next() as u16,
    };
    let mut v = vec![0u8];
    v.extend_from_slice(&c.to_ne_bytes());
    v.extend_from_slice(&(body as u16).to_ne_bytes());
    v.extend_from_slice(&out.to_ne_bytes());
    for _ in 0..body {
        v.push(if r.below(3) == 0 { r.next() as u8 } else { 0 });
    }
    // Plausible address families in the address slots.
    if body >= 36 && r.below(2) == 0 {
        v[1 + 8 + 8] = [2u8, 10, 0, 27][r.below(4) as usize];
    }
    v
}

fn cases() -> u64 {
    std::env::var("RXU_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20000)
}

#[test]
fn arbitrary_commands_give_errnos_not_panics() {
    let mut r = Rng(0x5eed_0c3a_0000_0001);
    let mut total = Outcome::default();
    for i in 0..cases() {
        let d = match i % 4 {
            0 => command(&mut r),
            1 => {
                let mut d = command(&mut r);
                for _ in 0..1 + r.below(4) {
                    let at = r.below(d.len() as u64) as usize;
                    d[at] ^= 1 << r.below(8);
                }
                d
            }
            2 => {
                let mut d = command(&mut r);
                d.truncate(r.below(d.len() as u64 + 1) as usize);
                if let Some(b) = d.first_mut() {
                    *b = r.next() as u8;
                }
                d
            }
            _ => (0..r.below(400)).map(|_| r.next() as u8).collect(),
        };
        let o = run(&d);
        total.decoded += o.decoded;
        total.refused += o.refused;
    }
    eprintln!("{total:?}");
    assert!(total.decoded > 0 && total.refused > 0, "{total:?}");
}
