//! The uverbs_command fuzz target on stable, over seeded inputs:
//! CREATE_COMP_CHANNEL writes and ASYNC_EVENT_ALLOC ioctls as libibverbs
//! makes them with random fields, the same with bits flipped or cut, and
//! plain random bytes. `RXU_FUZZ_CASES` sets the number of cases.

use rxu_fuzz::uverbs::{run, Outcome};
use rxu_ucma::uverbs::abi;

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

/// A write: CREATE_COMP_CHANNEL (sometimes another command), words that
/// mostly agree with the length, a random response address.
fn write(r: &mut Rng) -> Vec<u8> {
    let cmd = if r.below(4) == 0 {
        r.below(40) as u32
    } else {
        abi::CMD_CREATE_COMP_CHANNEL
    };
    let extra = 4 * r.below(3) as usize;
    let len = abi::CMD_HDR_LEN + abi::CREATE_COMP_CHANNEL_LEN + extra;
    let in_words = if r.below(4) == 0 {
        r.below(8)
    } else {
        len as u64 / 4
    } as u16;
    let out_words = r.below(3) as u16;
    let mut v = vec![0u8];
    v.extend_from_slice(&cmd.to_ne_bytes());
    v.extend_from_slice(&in_words.to_ne_bytes());
    v.extend_from_slice(&out_words.to_ne_bytes());
    v.extend_from_slice(&r.next().to_ne_bytes());
    v.extend((0..extra).map(|_| if r.below(4) == 0 { r.next() as u8 } else { 0 }));
    v
}

/// An ioctl command: ASYNC_EVENT_ALLOC (sometimes another method) with a
/// few attributes, one of them (usually) the FD handle.
fn ioctl(r: &mut Rng) -> Vec<u8> {
    let n = r.below(4) as usize;
    let len = abi::IOCTL_HDR_LEN + n * abi::IOCTL_ATTR_LEN;
    let mut v = vec![0u8; 1 + len];
    let b = &mut v[1..];
    let length = if r.below(5) == 0 {
        r.next() as u16
    } else {
        len as u16
    };
    b[0..2].copy_from_slice(&length.to_ne_bytes());
    let object = if r.below(4) == 0 {
        r.below(0x20) as u16
    } else {
        abi::OBJECT_ASYNC_EVENT
    };
    b[2..4].copy_from_slice(&object.to_ne_bytes());
    b[4..6].copy_from_slice(&(r.below(2) as u16).to_ne_bytes());
    b[6..8].copy_from_slice(&(n as u16).to_ne_bytes());
    if r.below(6) == 0 {
        b[20] = r.next() as u8;
    }
    for i in 0..n {
        let at = abi::IOCTL_HDR_LEN + i * abi::IOCTL_ATTR_LEN;
        b[at..at + 2].copy_from_slice(&(r.below(3) as u16).to_ne_bytes());
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
    let mut r = Rng(0x5eed_0a7e_0000_0011);
    let mut total = Outcome::default();
    for i in 0..cases() {
        let mut d = if i % 2 == 0 {
            write(&mut r)
        } else {
            ioctl(&mut r)
        };
        match i % 8 {
            0..=3 => {}
            4 | 5 => {
                for _ in 0..1 + r.below(4) {
                    let at = r.below(d.len() as u64) as usize;
                    d[at] ^= 1 << r.below(8);
                }
            }
            6 => {
                d.truncate(r.below(d.len() as u64 + 1) as usize);
                if let Some(b) = d.first_mut() {
                    *b = r.next() as u8;
                }
            }
            _ => d = (0..r.below(100)).map(|_| r.next() as u8).collect(),
        }
        let o = run(&d);
        total.decoded += o.decoded;
        total.passed_on += o.passed_on;
        total.refused += o.refused;
    }
    eprintln!("{total:?}");
    assert!(
        total.decoded > 0 && total.passed_on > 0 && total.refused > 0,
        "{total:?}"
    );
}
