//! The parse_cm_mad fuzz target on stable, over seeded random inputs:
//! plain random bytes, MADs with a valid header and random data (REQs and
//! SIDR_REQs with an rdma_cm header in their private data among them), and
//! those with a few bits flipped anywhere. `rxu_fuzz::cm_mad::run` panics
//! on a finding. `RXU_FUZZ_CASES` sets the number of cases.

use rxu_fuzz::cm_mad::{run, Outcome};

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
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A MAD with a valid CM header, an attribute near the CM range and
/// random data; REQ (private data at MAD 164) and SIDR_REQ (MAD 40) get an
/// rdma_cm header most of the time.
fn structured(r: &mut Rng) -> Vec<u8> {
    let len = 256
        + if r.below(4) == 0 {
            r.below(64) as usize
        } else {
            0
        };
    let mut b = r.bytes(len);
    b[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    let attr = 0x0f + r.below(0x0d) as u16;
    b[16..18].copy_from_slice(&attr.to_be_bytes());
    let pd = match attr {
        0x10 => Some(164),
        0x17 => Some(40),
        _ => None,
    };
    if let Some(at) = pd.filter(|_| r.below(4) != 0) {
        b[at] = 0;
        b[at + 1] = if r.below(2) == 0 { 0x40 } else { 0x60 };
    }
    b
}

fn cases() -> u64 {
    std::env::var("RXU_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20000)
}

#[test]
fn arbitrary_bytes_never_panic_and_parsed_mads_round_trip() {
    let mut r = Rng(0x5eed_c0de_cafe_0010);
    let mut total = Outcome::default();
    for i in 0..cases() {
        let d = match i % 3 {
            0 => structured(&mut r),
            1 => {
                let mut d = structured(&mut r);
                for _ in 0..1 + r.below(4) {
                    let at = r.below(d.len() as u64) as usize;
                    d[at] ^= 1 << r.below(8);
                }
                if r.below(8) == 0 {
                    d.truncate(r.below(d.len() as u64) as usize);
                }
                d
            }
            _ => {
                let n = r.below(400) as usize;
                r.bytes(n)
            }
        };
        total.add(run(&d));
    }
    eprintln!("{total:?}");
    // The generator reaches both outcomes and the rdma_cm header check.
    assert!(
        total.parsed > 0 && total.refused > 0 && total.cma > 0,
        "{total:?}"
    );
}

/// Writes structured inputs as a libFuzzer seed corpus into the directory
/// `RXU_FUZZ_SEEDS` names (run with --ignored).
#[test]
#[ignore]
fn write_seed_corpus() {
    let Some(dir) = std::env::var_os("RXU_FUZZ_SEEDS") else {
        eprintln!("skipped: RXU_FUZZ_SEEDS not set");
        return;
    };
    std::fs::create_dir_all(&dir).unwrap();
    let mut r = Rng(42);
    for i in 0..100 {
        let d = structured(&mut r);
        std::fs::write(std::path::Path::new(&dir).join(format!("seed-{i:03}")), d).unwrap();
    }
}
