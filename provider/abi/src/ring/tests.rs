//! Unit tests of the ring with two mappings of one memfd standing in for the
//! two processes. The hostile peer is simulated with pwrite on the memfd,
//! which lands in the same pages the mappings see.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use proptest::prelude::*;

use super::layout::{self, CONS_OFFSET, DATA_OFFSET, HEADER_LEN, PROD_OFFSET, SLEEP_OFFSET};
use super::*;

fn pair(slot_size: u32, slots: u32) -> (Producer, Consumer, File) {
    let (ring, fd) = Ring::create("rxu-test", slot_size, slots).unwrap();
    let other = Ring::attach(&fd).unwrap();
    (ring.into_producer(), other.into_consumer(), File::from(fd))
}

fn poke_u32(file: &File, offset: usize, value: u32) {
    file.write_all_at(&value.to_ne_bytes(), offset as u64)
        .unwrap();
}

#[test]
fn push_pop_across_two_mappings() {
    let (mut p, mut c, _f) = pair(16, 4);
    assert!(c.is_empty().unwrap());
    assert!(p.try_push(b"hello").unwrap());
    assert!(p.try_push(&[7u8; 16]).unwrap());
    assert_eq!(c.len().unwrap(), 2);
    assert_eq!(p.free_slots().unwrap(), 2);
    let mut out = [0xffu8; 20];
    assert!(c.try_pop(&mut out).unwrap());
    assert_eq!(&out[..16], b"hello\0\0\0\0\0\0\0\0\0\0\0");
    assert_eq!(&out[16..], &[0xff; 4], "bytes past the slot untouched");
    assert!(c.try_pop(&mut out).unwrap());
    assert_eq!(&out[..16], &[7u8; 16]);
    assert!(!c.try_pop(&mut out).unwrap());
    assert!(p.is_empty().unwrap());
}

#[test]
fn full_ring_refuses_and_size_errors() {
    let (mut p, mut c, _f) = pair(8, 2);
    assert!(p.try_push(b"a").unwrap());
    assert!(p.try_push(b"b").unwrap());
    assert!(!p.try_push(b"c").unwrap());
    assert_eq!(p.free_slots().unwrap(), 0);
    assert!(matches!(
        p.try_push(&[0; 9]),
        Err(RingError::TooLarge { len: 9, .. })
    ));
    let mut small = [0u8; 7];
    assert!(matches!(
        c.try_pop(&mut small),
        Err(RingError::BufferTooSmall { .. })
    ));
    assert_eq!(c.len().unwrap(), 2, "failed pop consumed nothing");
}

#[test]
fn reserve_commit_and_peek_release() {
    let (mut p, mut c, _f) = pair(16, 4);
    {
        let mut slot = p.reserve().unwrap().unwrap();
        slot.write(0, &[1; 16]).unwrap();
        // Dropped without commit: nothing published.
    }
    assert!(c.is_empty().unwrap());
    let mut slot = p.reserve().unwrap().unwrap();
    assert_eq!(slot.len(), 16);
    slot.write(3, b"abc").unwrap();
    assert!(matches!(
        slot.write(14, b"abc"),
        Err(RingError::OutOfSlot { .. })
    ));
    assert!(slot.write(usize::MAX, b"a").is_err());
    slot.commit();

    let mut buf = [0u8; 3];
    {
        let peeked = c.peek().unwrap().unwrap();
        peeked.read(3, &mut buf).unwrap();
        assert!(peeked.read(15, &mut buf).is_err());
        // Dropped without release: still there.
    }
    assert_eq!(&buf, b"abc");
    assert_eq!(c.len().unwrap(), 1);
    let peeked = c.peek().unwrap().unwrap();
    let mut whole = [0u8; 16];
    peeked.read(0, &mut whole).unwrap();
    assert_eq!(
        &whole[..6],
        &[1, 1, 1, b'a', b'b', b'c'],
        "stale bytes stay"
    );
    peeked.release();
    assert!(c.is_empty().unwrap());
    assert!(c.peek().unwrap().is_none());
}

#[test]
fn unaligned_partial_reads_and_writes() {
    let (mut p, mut c, _f) = pair(32, 2);
    let data: Vec<u8> = (0..32).collect();
    let mut slot = p.reserve().unwrap().unwrap();
    slot.zero_from(0);
    slot.write(5, &data[5..27]).unwrap();
    slot.commit();
    let mut out = [0u8; 32];
    let peeked = c.peek().unwrap().unwrap();
    peeked.read(0, &mut out).unwrap();
    let mut expect = [0u8; 32];
    expect[5..27].copy_from_slice(&data[5..27]);
    assert_eq!(out, expect);
    let mut mid = [0u8; 11];
    peeked.read(3, &mut mid).unwrap();
    assert_eq!(mid, expect[3..14]);
}

#[test]
fn indices_wrap_around_u32() {
    let (ring, fd) = Ring::create_with_start_index("rxu-wrap", 8, 4, u32::MAX - 5).unwrap();
    let mut p = ring.into_producer();
    let mut c = Ring::attach(&fd).unwrap().into_consumer();
    let mut out = [0u8; 8];
    for i in 0u64..40 {
        assert!(p.try_push(&i.to_le_bytes()).unwrap());
        if i % 3 != 0 {
            assert!(p.try_push(&(i + 1000).to_le_bytes()).unwrap());
        }
        assert!(c.try_pop(&mut out).unwrap());
        assert_eq!(u64::from_le_bytes(out), i);
        if i % 3 != 0 {
            assert!(c.try_pop(&mut out).unwrap());
            assert_eq!(u64::from_le_bytes(out), i + 1000);
        }
    }
    assert!(c.is_empty().unwrap());
}

#[test]
fn hostile_producer_index_is_an_error_not_a_read() {
    let (mut p, mut c, f) = pair(8, 4);
    assert!(p.try_push(b"x").unwrap());
    // Producer claims 5 entries in a 4-slot ring.
    poke_u32(&f, PROD_OFFSET, 5);
    let mut out = [0u8; 8];
    assert!(matches!(
        c.try_pop(&mut out),
        Err(RingError::Corrupt {
            prod: 5,
            cons: 0,
            slots: 4
        })
    ));
    assert!(c.peek().is_err());
    assert!(c.prepare_sleep().is_err());
    // Producer index "behind" the consumer is just as invalid.
    poke_u32(&f, PROD_OFFSET, u32::MAX);
    assert!(c.len().is_err());
}

#[test]
fn hostile_consumer_index_is_an_error_not_a_write() {
    let (mut p, _c, f) = pair(8, 4);
    assert!(p.try_push(b"x").unwrap());
    // A consumer index no producer position can be consistent with.
    poke_u32(&f, CONS_OFFSET, 1000);
    assert!(p.free_slots().is_err());
    assert!(p.len().is_err());
    // Pushes go on while the cached consumer index says there is room,
    // i.e. into slots that were free anyway; the first reload fails.
    let mut pushed = 1;
    let err = loop {
        match p.try_push(b"y") {
            Ok(true) => pushed += 1,
            Ok(false) => panic!("full instead of corrupt"),
            Err(e) => break e,
        }
        assert!(pushed <= 4, "wrote past the ring's capacity");
    };
    assert_eq!(pushed, 4);
    assert!(
        matches!(
            err,
            RingError::Corrupt {
                prod: 4,
                cons: 1000,
                slots: 4
            }
        ),
        "{err}"
    );
    assert!(p.reserve().is_err());
}

#[test]
fn peer_overwriting_our_own_index_is_ignored() {
    let (mut p, mut c, f) = pair(8, 4);
    for i in 0u8..3 {
        assert!(p.try_push(&[i]).unwrap());
    }
    let mut out = [0u8; 8];
    assert!(c.try_pop(&mut out).unwrap());
    // A confused producer rewinds the consumer index; the consumer keeps
    // its own count and republishes it on the next release.
    poke_u32(&f, CONS_OFFSET, 0);
    assert!(c.try_pop(&mut out).unwrap());
    assert_eq!(out[0], 1);
    assert_eq!(p.len().unwrap(), 1);
}

#[test]
fn sleep_flag_protocol() {
    let (mut p, mut c, f) = pair(8, 4);
    let bell = Doorbell::new().unwrap();
    assert!(!p.wake_needed());
    assert!(c.prepare_sleep().unwrap(), "empty ring: may sleep");
    assert!(p.wake_needed());
    assert!(p.try_push(b"1").unwrap());
    assert!(p.notify(&bell).unwrap(), "rings a sleeping consumer");
    // The consumer, having decided to sleep, blocks and is woken.
    assert!(bell.wait(Some(Duration::from_secs(5))).unwrap());
    c.end_sleep();
    assert_eq!(bell.drain().unwrap(), 1);
    assert!(!p.wake_needed(), "end_sleep lowered the flag");
    // wait() with an entry present returns at once, flag lowered.
    assert!(c.wait(&bell, Some(Duration::from_secs(5))).unwrap());
    assert!(!p.wake_needed());

    // Entry already there: prepare_sleep refuses and lowers the flag.
    assert!(!c.prepare_sleep().unwrap());
    assert!(!p.wake_needed());
    assert!(!p.notify(&bell).unwrap());
    let mut out = [0u8; 8];
    assert!(c.try_pop(&mut out).unwrap());

    // Timed wait on an empty ring times out.
    assert!(!c.wait(&bell, Some(Duration::from_millis(5))).unwrap());
    let mut flag = [0u8; 4];
    f.read_exact_at(&mut flag, SLEEP_OFFSET as u64).unwrap();
    assert_eq!(u32::from_ne_bytes(flag), 0);
}

/// Producer and consumer threads on two mappings; the consumer sleeps
/// whenever the ring is empty and the producer pauses often, so the sleep
/// protocol runs thousands of times. A lost wake-up shows as a wait that
/// times out while items are still due.
#[test]
fn no_lost_wakeups() {
    const N: u64 = 20_000;
    let (mut p, mut c, _f) = pair(8, 16);
    let bell = Doorbell::new().unwrap();
    let bell2 = bell.try_clone().unwrap();
    let producer = std::thread::spawn(move || {
        let mut rang = 0u32;
        for i in 0..N {
            while !p.try_push(&i.to_le_bytes()).unwrap() {
                std::thread::yield_now();
            }
            if p.notify(&bell2).unwrap() {
                rang += 1;
            }
            if i % 32 == 0 {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        rang
    });
    let mut next = 0u64;
    let mut timeouts = 0;
    let mut out = [0u8; 8];
    while next < N {
        if c.try_pop(&mut out).unwrap() {
            assert_eq!(u64::from_le_bytes(out), next);
            next += 1;
        } else {
            // The producer never pauses for more than a few ms, so a wait
            // that runs into its timeout means a wake-up went missing.
            let t = std::time::Instant::now();
            c.wait(&bell, Some(Duration::from_secs(2))).unwrap();
            if t.elapsed() >= Duration::from_secs(2) {
                timeouts += 1;
            }
        }
    }
    let rang = producer.join().unwrap();
    assert_eq!(timeouts, 0, "a wake-up was lost");
    assert!(rang > 0, "the consumer never slept: test exercised nothing");
}

/// The window the re-check in `prepare_sleep` exists for, held open on
/// purpose: the consumer sees the ring empty, tells the producer, dawdles,
/// and only then raises its flag. The producer pushes during the dawdle, so
/// it often finds no flag and does not ring; only the re-check saves the
/// consumer from sleeping on a non-empty ring.
#[test]
fn recheck_closes_the_sleep_window() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const ROUNDS: u64 = 2_000;
    let (mut p, mut c, _f) = pair(8, 4);
    let bell = Doorbell::new().unwrap();
    let bell2 = bell.try_clone().unwrap();
    let empty_seen = std::sync::Arc::new(AtomicBool::new(false));
    let hint = empty_seen.clone();
    let producer = std::thread::spawn(move || {
        for i in 0..ROUNDS {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !hint.swap(false, Ordering::AcqRel) {
                // Bounded: if the consumer died, stop instead of spinning on.
                if std::time::Instant::now() > deadline {
                    return;
                }
                std::thread::yield_now();
            }
            assert!(p.try_push(&i.to_le_bytes()).unwrap());
            p.notify(&bell2).unwrap();
        }
    });
    let mut out = [0u8; 8];
    for i in 0..ROUNDS {
        assert!(c.is_empty().unwrap());
        empty_seen.store(true, Ordering::Release);
        for _ in 0..(i % 7) * 300 {
            std::hint::spin_loop();
        }
        if c.prepare_sleep().unwrap() {
            let woke = bell.wait(Some(Duration::from_secs(2))).unwrap();
            c.end_sleep();
            bell.drain().unwrap();
            assert!(woke, "round {i}: slept through a published entry");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !c.try_pop(&mut out).unwrap() {
            assert!(std::time::Instant::now() < deadline, "producer stalled");
            std::thread::yield_now();
        }
        assert_eq!(u64::from_le_bytes(out), i);
    }
    producer.join().unwrap();
}

#[test]
fn attach_rejects_unsealed_and_foreign_fds() {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("rxu-ring-plain-{}", std::process::id()));
    let plain = File::create(&path).unwrap();
    plain.set_len(4096).unwrap();
    assert!(matches!(Ring::attach(&plain), Err(RingError::NotSealed)));
    std::fs::remove_file(&path).unwrap();
    let null = File::open("/dev/null").unwrap();
    assert!(matches!(Ring::attach(&null), Err(RingError::NotSealed)));
}

#[test]
fn attach_rejects_bad_headers() {
    let (_ring, fd) = Ring::create("rxu-hdr", 8, 4).unwrap();
    let f = File::from(fd);
    // Header claiming more slots than the memfd holds.
    f.write_all_at(&1024u32.to_le_bytes(), 16).unwrap();
    assert!(matches!(Ring::attach(&f), Err(RingError::Truncated { .. })));
    f.write_all_at(b"NOTARING", 0).unwrap();
    assert!(matches!(Ring::attach(&f), Err(RingError::BadHeader(_))));
}

#[test]
fn sealed_ring_cannot_shrink() {
    let (_ring, fd) = Ring::create("rxu-seal", 8, 4).unwrap();
    let f = File::from(fd);
    assert!(f.set_len(0).is_err());
    assert!(f.set_len(1 << 20).is_err());
}

#[test]
fn create_rejects_bad_arguments() {
    assert!(Ring::create("x", 12, 4).is_err());
    assert!(Ring::create("x", 8, 3).is_err());
    assert!(matches!(
        Ring::create("a\0b", 8, 4),
        Err(RingError::BadName)
    ));
    assert!(matches!(
        Ring::create(&"n".repeat(300), 8, 4),
        Err(RingError::BadName)
    ));
}

fn sealed_memfd_with(len: u64, header: &[u8; HEADER_LEN]) -> OwnedFd {
    memfd::create_sealed("rxu-fuzz", len, |f| f.write_all_at(header, 0))
        .unwrap()
        .into()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any header and any memory size: attach errs or yields a geometry that
    /// fits the memory; never a panic.
    #[test]
    fn hostile_headers_never_panic(
        slot_size in prop_oneof![any::<u32>(), (0u32..512).prop_map(|s| s * 8)],
        slots in prop_oneof![any::<u32>(), (0u32..12).prop_map(|b| 1 << b)],
        len in prop_oneof![0u64..DATA_OFFSET as u64 * 2, 0u64..(1 << 20)],
        flip in proptest::option::of(0usize..24),
    ) {
        let geo_ok = layout::Geometry::new(8, 1).unwrap();
        let mut header = layout::encode_header(geo_ok);
        header[12..16].copy_from_slice(&slot_size.to_le_bytes());
        header[16..20].copy_from_slice(&slots.to_le_bytes());
        if let Some(bit) = flip {
            header[bit] ^= 0x10;
        }
        let fd = sealed_memfd_with(len.max(HEADER_LEN as u64), &header);
        if let Ok(ring) = Ring::attach(&fd) {
            let need = DATA_OFFSET as u64
                + u64::from(ring.slot_size()) * u64::from(ring.slots());
            prop_assert!(need <= len.max(HEADER_LEN as u64));
            prop_assert!(ring.slots().is_power_of_two());
            // And the ring is usable.
            let mut p = ring.into_producer();
            let _ = p.try_push(&[1]);
        }
    }

    /// A peer writing arbitrary index values between our operations causes
    /// errors at most; never a panic, and never an entry from outside the ring.
    #[test]
    fn hostile_indices_never_panic(
        pokes in proptest::collection::vec((any::<bool>(), any::<u32>(), 0u8..4), 1..64)
    ) {
        let (mut p, mut c, f) = pair(8, 8);
        let mut out = [0u8; 8];
        for (prod_side, value, op) in pokes {
            poke_u32(&f, if prod_side { PROD_OFFSET } else { CONS_OFFSET }, value);
            match op {
                0 => { let _ = p.try_push(&[0xab; 8]); }
                1 => {
                    if let Ok(true) = c.try_pop(&mut out) {
                        // Slot memory only ever holds 0 or what we pushed.
                        prop_assert!(out == [0xab; 8] || out == [0; 8]);
                    }
                }
                2 => { let _ = c.prepare_sleep(); c.end_sleep(); }
                _ => { let _ = (p.len(), c.len(), p.free_slots()); }
            }
        }
    }
}

#[test]
fn consumer_flag_arms_and_clears_once() {
    let (mut p, c, _f) = pair(8, 4);
    assert_eq!(p.flag(), 0);
    c.set_flag(2);
    assert!(p.try_push(b"cqe").unwrap());
    assert_eq!(p.flag(), 2);
    assert!(!p.clear_flag(1), "only the value seen is cleared");
    assert!(p.clear_flag(2));
    assert!(!p.clear_flag(2), "a second clear finds nothing");
    assert_eq!(p.flag(), 0);
}

#[test]
fn producer_reads_back_unconsumed_entries() {
    let (mut p, mut c, f) = pair(8, 4);
    for i in 0..4u8 {
        assert!(p.try_push(&[i; 8]).unwrap());
    }
    let mut out = [0u8; 8];
    assert!(c.try_pop(&mut out).unwrap());
    let mut seen = Vec::new();
    let mut buf = [0u8; 8];
    assert_eq!(p.read_unconsumed(&mut buf, |b| seen.push(b[0])).unwrap(), 3);
    assert_eq!(seen, [1, 2, 3]);
    assert!(p.read_unconsumed(&mut [0u8; 4], |_| ()).is_err());
    // A consumer index beyond the producer's is refused, nothing read.
    poke_u32(&f, CONS_OFFSET, 100);
    assert!(matches!(
        p.read_unconsumed(&mut buf, |_| panic!("read a slot")),
        Err(RingError::Corrupt { .. })
    ));
}

#[test]
fn consumer_reads_unconsumed_entries_in_order_without_consuming() {
    let (ring, fd) = Ring::create_with_start_index("rxu-wrap", 8, 4, u32::MAX - 1).unwrap();
    let mut p = ring.into_producer();
    let mut c = Ring::attach(&fd).unwrap().into_consumer();
    let f = File::from(fd);
    let mut out = [0u8; 8];
    for i in 0..4u8 {
        assert!(p.try_push(&[i; 8]).unwrap());
    }
    assert!(c.try_pop(&mut out).unwrap());
    assert!(p.try_push(&[4; 8]).unwrap());
    // Indices wrap past u32::MAX between the entries read.
    let mut seen = Vec::new();
    let mut buf = [0u8; 8];
    assert_eq!(c.read_unconsumed(&mut buf, |b| seen.push(b[0])).unwrap(), 4);
    assert_eq!(seen, [1, 2, 3, 4]);
    assert_eq!(c.len().unwrap(), 4, "nothing consumed");
    assert!(c.try_pop(&mut out).unwrap());
    assert_eq!(out, [1; 8]);
    assert!(matches!(
        c.read_unconsumed(&mut [0u8; 4], |_| ()),
        Err(RingError::BufferTooSmall { .. })
    ));
    // A producer index further ahead than the ring holds is refused,
    // nothing read.
    poke_u32(&f, PROD_OFFSET, 100);
    assert!(matches!(
        c.read_unconsumed(&mut buf, |_| panic!("read a slot")),
        Err(RingError::Corrupt { .. })
    ));
}

#[test]
fn retain_drops_entries_in_place_and_keeps_the_order() {
    let (ring, fd) = Ring::create_with_start_index("rxu-wrap", 8, 8, u32::MAX - 2).unwrap();
    let mut p = ring.into_producer();
    let mut c = Ring::attach(&fd).unwrap().into_consumer();
    let mut out = [0u8; 8];
    assert!(p.try_push(&[9; 8]).unwrap());
    assert!(c.try_pop(&mut out).unwrap());
    for i in 0..7u8 {
        assert!(p.try_push(&[i; 8]).unwrap());
    }
    assert_eq!(p.free_slots().unwrap(), 1);
    let mut buf = [0u8; 8];
    // Drop the odd ones: 0, 2, 4, 6 stay, across the u32 wrap.
    assert_eq!(c.retain(&mut buf, |b| b[0] % 2 == 0).unwrap(), 3);
    assert_eq!(c.len().unwrap(), 4);
    assert_eq!(p.free_slots().unwrap(), 4, "the producer sees the room");
    // The producer goes on after the compaction.
    assert!(p.try_push(&[7; 8]).unwrap());
    let mut got = Vec::new();
    while c.try_pop(&mut out).unwrap() {
        got.push(out[0]);
    }
    assert_eq!(got, [0, 2, 4, 6, 7]);
    assert_eq!(c.retain(&mut buf, |_| false).unwrap(), 0, "empty");
    assert!(p.try_push(&[1; 8]).unwrap());
    assert_eq!(c.retain(&mut buf, |_| true).unwrap(), 0);
    assert_eq!(c.retain(&mut buf, |_| false).unwrap(), 1);
    assert!(c.is_empty().unwrap());
    assert!(matches!(
        c.retain(&mut [0u8; 4], |_| true),
        Err(RingError::BufferTooSmall { .. })
    ));
}

#[test]
fn read_ahead_keeps_slots_until_released() {
    let (ring, fd) = Ring::create_with_start_index("rxu-ahead", 8, 4, u32::MAX - 1).unwrap();
    let mut p = ring.into_producer();
    let mut c = Ring::attach(&fd).unwrap().into_consumer();
    let mut out = [0u8; 8];
    for i in 0..3u8 {
        assert!(p.try_push(&[i; 8]).unwrap());
    }
    // Read two ahead: the next peek shows the third, the producer still
    // sees three of four slots taken.
    for want in 0..2u8 {
        let slot = c.peek().unwrap().unwrap();
        slot.read(0, &mut out).unwrap();
        assert_eq!(out[0], want);
        slot.keep();
    }
    assert_eq!(c.read_ahead(), 2);
    assert_eq!((c.len().unwrap(), c.unread().unwrap()), (3, 1));
    assert_eq!(p.free_slots().unwrap(), 1);
    assert!(c.try_pop(&mut out).unwrap(), "the third, released at once");
    assert_eq!(out[0], 2);
    assert!(c.is_empty().unwrap(), "nothing left to read");
    assert!(c.peek().unwrap().is_none());
    assert_eq!(p.free_slots().unwrap(), 2, "the kept two still count");
    assert!(matches!(
        c.retain(&mut out, |_| true),
        Err(RingError::ReadAhead(2))
    ));
    assert_eq!(c.release_read(5), 2, "no more than were kept");
    assert_eq!(c.release_read(1), 0);
    assert_eq!(p.free_slots().unwrap(), 4);
    // A producer index rewound behind what was read is corrupt, not a read.
    assert!(p.try_push(&[3; 8]).unwrap());
    c.peek().unwrap().unwrap().keep();
    let file = File::from(fd);
    poke_u32(&file, PROD_OFFSET, 2u32.wrapping_add(u32::MAX - 1));
    assert!(matches!(c.unread(), Err(RingError::Corrupt { .. })));
    assert!(matches!(c.peek(), Err(RingError::Corrupt { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Against a model: pushes, reads ahead, releases of what was read
    /// and plain pops in any order give every entry once, in order, and
    /// the producer's room is always the slots less what is unread or kept.
    #[test]
    fn read_ahead_matches_a_model(ops in proptest::collection::vec(0u8..4, 1..200)) {
        let (mut p, mut c, _f) = pair(8, 8);
        let (mut pushed, mut read, mut released) = (0u32, 0u32, 0u32);
        let mut out = [0u8; 8];
        for op in ops {
            match op {
                0 => {
                    let ok = p.try_push(&pushed.to_le_bytes()).unwrap();
                    prop_assert_eq!(ok, pushed - released < 8);
                    pushed += u32::from(ok);
                }
                1 => match c.peek().unwrap() {
                    Some(slot) => {
                        slot.read(0, &mut out).unwrap();
                        prop_assert_eq!(u32::from_le_bytes(out[..4].try_into().unwrap()), read);
                        slot.keep();
                        read += 1;
                    }
                    None => prop_assert_eq!(read, pushed),
                },
                2 => released += c.release_read(2),
                _ => {
                    if c.try_pop(&mut out).unwrap() {
                        prop_assert_eq!(u32::from_le_bytes(out[..4].try_into().unwrap()), read);
                        read += 1;
                        released += 1;
                    }
                }
            }
            prop_assert_eq!(c.read_ahead(), read - released);
            prop_assert_eq!(c.unread().unwrap(), pushed - read);
            prop_assert_eq!(p.free_slots().unwrap(), 8 - (pushed - released));
        }
    }
}

/// Memory as an application allocator hands it out: `pages` anonymous
/// pages filled with 0xaa. Freed by the test with munmap.
fn app_pages(pages: usize) -> std::ptr::NonNull<u8> {
    let len = pages * page_size();
    // SAFETY: a fresh private anonymous mapping; nothing else uses it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: the len bytes just mapped.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0xaa, len) };
    std::ptr::NonNull::new(p.cast()).unwrap()
}

fn released() -> (
    std::sync::Arc<std::sync::atomic::AtomicU32>,
    Box<dyn FnOnce() + Send>,
) {
    let n = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let m = n.clone();
    (
        n,
        Box::new(move || {
            m.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }),
    )
}

#[test]
fn ring_placed_in_lent_memory_lives_there_and_gives_it_back_zeroed() {
    use std::sync::atomic::Ordering::SeqCst;
    let (ring, fd) = Ring::create("rxu-test", 64, 8).unwrap();
    let len = Ring::mapped_len(&fd).unwrap();
    assert_eq!(len, DATA_OFFSET + 64 * 8);
    let pages = len.div_ceil(page_size());
    let mem = app_pages(pages);
    let (count, release) = released();
    // SAFETY: the pages are this test's and untouched until released.
    let place = unsafe { Place::new(mem, pages * page_size(), release) };
    let mut c = Ring::attach_at(&fd, place).unwrap().into_consumer();
    let mut p = ring.into_producer();
    // SAFETY: reading the first bytes of the lent range (the ring header).
    let head = unsafe { std::slice::from_raw_parts(mem.as_ptr(), 8) }.to_vec();
    assert_eq!(
        head,
        layout::encode_header(Geometry::new(64, 8).unwrap())[..8]
    );
    assert!(p.try_push(b"placed").unwrap());
    let mut out = [0u8; 64];
    assert!(c.try_pop(&mut out).unwrap());
    assert_eq!(&out[..6], b"placed");
    assert_eq!(count.load(SeqCst), 0, "given back while in use");
    drop(c);
    assert_eq!(count.load(SeqCst), 1, "given back once");
    // The range is ordinary zeroed memory again, no longer the ring's.
    assert!(p.try_push(b"after").unwrap());
    // SAFETY: the range is mapped (anonymous) and ours.
    let all = unsafe { std::slice::from_raw_parts(mem.as_ptr(), pages * page_size()) };
    assert!(all.iter().all(|&b| b == 0));
    // SAFETY: the test's own mapping.
    unsafe { libc::munmap(mem.as_ptr().cast(), pages * page_size()) };
}

#[test]
fn a_place_that_cannot_hold_the_ring_is_refused_and_given_back() {
    use std::sync::atomic::Ordering::SeqCst;
    let (_ring, fd) = Ring::create("rxu-test", 64, 64).unwrap();
    let mem = app_pages(2);
    for (addr, len) in [
        // Not page-aligned.
        (mem.as_ptr().wrapping_add(8), page_size()),
        // Too small: the ring needs more than one page.
        (mem.as_ptr(), page_size()),
    ] {
        let (count, release) = released();
        let addr = std::ptr::NonNull::new(addr).unwrap();
        // SAFETY: inside the test's pages, unused meanwhile.
        let place = unsafe { Place::new(addr, len, release) };
        assert!(Ring::attach_at(&fd, place).is_err());
        assert_eq!(count.load(SeqCst), 1);
    }
    // SAFETY: the pages are still mapped and untouched (0xaa).
    let all = unsafe { std::slice::from_raw_parts(mem.as_ptr(), 2 * page_size()) };
    assert!(all.iter().all(|&b| b == 0xaa));
    // SAFETY: the test's own mapping.
    unsafe { libc::munmap(mem.as_ptr().cast(), 2 * page_size()) };
}
