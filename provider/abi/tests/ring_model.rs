//! Property test: any sequence of ring operations, on two mappings of one
//! memfd, agrees with a `VecDeque` model — including across the u32 wrap of
//! the free-running indices.

use std::collections::VecDeque;

use proptest::prelude::*;
use rxu_abi::ring::Ring;

#[derive(Clone, Debug)]
enum Op {
    Push(Vec<u8>),
    /// Reserve, write at an offset, then commit or drop.
    Reserve {
        at: usize,
        data: Vec<u8>,
        commit: bool,
    },
    Pop,
    /// Peek, read, then release or drop.
    Peek {
        release: bool,
    },
}

const SLOT: usize = 24;

fn op() -> impl Strategy<Value = Op> {
    let bytes = proptest::collection::vec(any::<u8>(), 0..=SLOT);
    prop_oneof![
        3 => bytes.clone().prop_map(Op::Push),
        1 => (0..SLOT, bytes, any::<bool>()).prop_map(|(at, mut data, commit)| {
            data.truncate(SLOT - at);
            Op::Reserve { at, data, commit }
        }),
        3 => Just(Op::Pop),
        1 => any::<bool>().prop_map(|release| Op::Peek { release }),
    ]
}

fn padded(data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    v.resize(SLOT, 0);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ring_matches_vecdeque(
        slots_log2 in 0u32..4,
        start in prop_oneof![Just(0u32), Just(u32::MAX), u32::MAX - 40..=u32::MAX, any::<u32>()],
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        let slots = 1u32 << slots_log2;
        let (ring, fd) = Ring::create_with_start_index("rxu-model", SLOT as u32, slots, start).unwrap();
        let mut p = ring.into_producer();
        let mut c = Ring::attach(&fd).unwrap().into_consumer();
        let mut model: VecDeque<Vec<u8>> = VecDeque::new();
        // What a reserved slot holds before writing: the last entry that
        // used it (or zeros), per slot position.
        let mut slot_mem = vec![vec![0u8; SLOT]; slots as usize];
        let mut tail = start;

        for op in ops {
            match op {
                Op::Push(data) => {
                    let full = model.len() == slots as usize;
                    prop_assert_eq!(p.try_push(&data).unwrap(), !full);
                    if !full {
                        let v = padded(&data);
                        slot_mem[(tail & (slots - 1)) as usize] = v.clone();
                        model.push_back(v);
                        tail = tail.wrapping_add(1);
                    }
                }
                Op::Reserve { at, data, commit } => {
                    let full = model.len() == slots as usize;
                    match p.reserve().unwrap() {
                        None => prop_assert!(full),
                        Some(mut slot) => {
                            prop_assert!(!full);
                            slot.write(at, &data).unwrap();
                            let mem = &mut slot_mem[(tail & (slots - 1)) as usize];
                            mem[at..at + data.len()].copy_from_slice(&data);
                            if commit {
                                slot.commit();
                                model.push_back(mem.clone());
                                tail = tail.wrapping_add(1);
                            }
                        }
                    }
                }
                Op::Pop => {
                    let mut out = [0u8; SLOT];
                    let got = c.try_pop(&mut out).unwrap();
                    match model.pop_front() {
                        Some(want) => { prop_assert!(got); prop_assert_eq!(&out[..], &want[..]); }
                        None => prop_assert!(!got),
                    }
                }
                Op::Peek { release } => {
                    match c.peek().unwrap() {
                        None => prop_assert!(model.is_empty()),
                        Some(slot) => {
                            let mut out = [0u8; SLOT];
                            slot.read(0, &mut out).unwrap();
                            prop_assert_eq!(Some(&out.to_vec()), model.front());
                            if release {
                                slot.release();
                                model.pop_front();
                            }
                        }
                    }
                }
            }
            let n = model.len() as u32;
            prop_assert_eq!(p.len().unwrap(), n);
            prop_assert_eq!(c.len().unwrap(), n);
            prop_assert_eq!(p.free_slots().unwrap(), slots - n);
            prop_assert_eq!(c.is_empty().unwrap(), n == 0);
            prop_assert_eq!(p.is_empty().unwrap(), n == 0);
        }
    }
}
