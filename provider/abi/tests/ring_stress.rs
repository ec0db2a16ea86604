//! Two threads, two mappings, one million entries: every entry arrives, in
//! order, intact, with the consumer sleeping on the doorbell when idle.

use std::time::{Duration, Instant};

use rxu_abi::ring::{Doorbell, Ring};

const ITEMS: u64 = 1_000_000;
const SLOT: usize = 64;

/// An entry whose every word depends on its sequence number, so a torn or
/// stale slot is detected, not just a wrong first word.
fn entry(seq: u64) -> [u8; SLOT] {
    let mut e = [0u8; SLOT];
    for (i, w) in e.chunks_exact_mut(8).enumerate() {
        let v = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64);
        w.copy_from_slice(&v.to_le_bytes());
    }
    e[..8].copy_from_slice(&seq.to_le_bytes());
    e
}

#[test]
fn million_entries_in_order_with_doorbell() {
    let (ring, fd) = Ring::create("rxu-stress", SLOT as u32, 256).unwrap();
    let mut producer = ring.into_producer();
    let mut consumer = Ring::attach(&fd).unwrap().into_consumer();
    let bell = Doorbell::new().unwrap();
    let bell_p = bell.try_clone().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);

    let t = std::thread::spawn(move || {
        let mut rings = 0u64;
        for seq in 0..ITEMS {
            let e = entry(seq);
            while !producer.try_push(&e).unwrap() {
                assert!(Instant::now() < deadline, "consumer stalled");
                std::thread::yield_now();
            }
            // Batch doorbells like post_send would: check once per 16.
            if seq % 16 == 15 || seq == ITEMS - 1 {
                rings += u64::from(producer.notify(&bell_p).unwrap());
            }
        }
        rings
    });

    let mut out = [0u8; SLOT];
    let mut idle_spins = 0u32;
    let mut sleeps = 0u64;
    for seq in 0..ITEMS {
        loop {
            if consumer.try_pop(&mut out).unwrap() {
                idle_spins = 0;
                break;
            }
            assert!(Instant::now() < deadline, "producer stalled at {seq}");
            idle_spins += 1;
            if idle_spins < 64 {
                std::hint::spin_loop();
            } else {
                // Two shared cores: spin briefly, then sleep properly.
                consumer.wait(&bell, Some(Duration::from_secs(5))).unwrap();
                sleeps += 1;
            }
        }
        assert_eq!(out, entry(seq), "entry {seq} lost, reordered or torn");
    }
    assert!(consumer.is_empty().unwrap());
    let rings = t.join().unwrap();
    println!("{ITEMS} entries, consumer slept {sleeps} times, producer rang {rings} times");
}
