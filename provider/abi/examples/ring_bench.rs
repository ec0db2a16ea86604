//! Ring throughput: `cargo run --release -p rxu-abi --example ring_bench`.
//!
//! Prints ns per push+pop for 64-byte slots, on one thread (pure cost of the
//! ring) and across two threads on two mappings (what SQ/CQ traffic sees,
//! including cache-line transfers; on a shared 2-core machine this mostly
//! measures scheduling).

use std::time::Instant;

use rxu_abi::ring::Ring;

const SLOT: u32 = 64;

fn single_thread(n: u64) -> f64 {
    let (ring, fd) = Ring::create("bench", SLOT, 1024).unwrap();
    let mut p = ring.into_producer();
    let mut c = Ring::attach(&fd).unwrap().into_consumer();
    let entry = [7u8; SLOT as usize];
    let mut out = [0u8; SLOT as usize];
    let t = Instant::now();
    for _ in 0..n / 32 {
        for _ in 0..32 {
            assert!(p.try_push(&entry).unwrap());
        }
        for _ in 0..32 {
            assert!(c.try_pop(&mut out).unwrap());
        }
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

/// Yield rather than spin: the other thread may need this very core.
fn backoff() {
    std::thread::yield_now();
}

fn two_threads(n: u64) -> f64 {
    let (ring, fd) = Ring::create("bench2", SLOT, 1024).unwrap();
    let mut p = ring.into_producer();
    let mut c = Ring::attach(&fd).unwrap().into_consumer();
    let t = Instant::now();
    let prod = std::thread::spawn(move || {
        let mut entry = [0u8; SLOT as usize];
        for i in 0..n {
            entry[..8].copy_from_slice(&i.to_le_bytes());
            while !p.try_push(&entry).unwrap() {
                backoff();
            }
        }
    });
    let mut out = [0u8; SLOT as usize];
    for _ in 0..n {
        while !c.try_pop(&mut out).unwrap() {
            backoff();
        }
    }
    prod.join().unwrap();
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let n = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000u64);
    let one = single_thread(n);
    println!(
        "single thread: {one:.1} ns per push+pop ({:.1} M entries/s)",
        1e3 / one
    );
    let two = two_threads(n);
    println!(
        "two threads:   {two:.1} ns per push+pop ({:.1} M entries/s)",
        1e3 / two
    );
}
