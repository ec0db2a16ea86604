//! The control_message and control_sequence targets on stable, over
//! seeded inputs: encoded messages of every kind with bytes flipped or
//! cut, random bytes, and random decision streams against one in-process
//! device. `RXU_FUZZ_CASES` sets the number of cases.

use rxu_abi::proto::{self, QpType, Request};
use rxu_fuzz::control::{decode, Sequence};
use transport::engine::fault::SplitMix64;


fn cases(default: u64) -> u64 {
    std::env::var("RXU_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sample_requests() -> Vec<Vec<u8>> {
    let reqs = [
        Request::AllocPd,
        Request::DeallocPd { pd: 3 },
        Request::RegMr {
            pd: 1,
            addr: 0x1000,
            len: 4096,
            iova: 0x1000,
            access: 7,
        },
        Request::CreateCq {
            cqe: 16,
            comp_vector: 0,
            user_handle: 9,
            channel: true,
            timestamps: false,
        },
        Request::CreateQp {
            pd: 1,
            qp_type: QpType::Rc,
            send_cq: 2,
            recv_cq: 2,
            srq: None,
            cap: Default::default(),
            sq_sig_all: false,
            user_handle: 1,
        },
        Request::ModifyQp {
            qp: 0x123,
            mask: 0x81,
            attr: Default::default(),
        },
        Request::Status,
        Request::Stats,
    ];
    reqs.iter().map(|r| proto::encode(r).unwrap()).collect()
}

#[test]
fn control_messages_decode_or_refuse_and_round_trip() {
    let samples = sample_requests();
    let mut r = SplitMix64::new(0x5eed_c0de_0000_0001);
    let mut took = 0;
    for i in 0..cases(50_000) {
        let d: Vec<u8> = match i % 3 {
            0 => samples[r.below(samples.len() as u64) as usize].clone(),
            1 => {
                let mut d = samples[r.below(samples.len() as u64) as usize].clone();
                for _ in 0..1 + r.below(3) {
                    let at = r.below(d.len() as u64) as usize;
                    d[at] ^= 1 << r.below(8);
                }
                d.truncate(r.below(d.len() as u64 + 1) as usize);
                d
            }
            _ => (0..r.below(300)).map(|_| r.next_u64() as u8).collect(),
        };
        took += decode(&d);
    }
    assert!(took > 0, "nothing decoded");
}

#[test]
fn request_sequences_leave_the_device_as_they_found_it() {
    let mut seq = Sequence::new([127, 0, 78, 2].into());
    let mut r = SplitMix64::new(0x5eed_c0de_0000_0002);
    let (mut accepted, mut hellos) = (0, 0);
    for _ in 0..cases(3000) {
        // Biased toward a session, a provider Hello and object requests.
        let mut d = vec![0u8, 0, 2, 0];
        for _ in 0..r.below(120) {
            d.push(if r.below(4) == 0 {
                5 + r.below(10) as u8
            } else {
                r.next_u64() as u8
            });
        }
        let o = seq.run(&d);
        accepted += o.accepted;
        hellos += o.hellos_accepted;
    }
    eprintln!("accepted requests {accepted}, Hellos {hellos}");
    assert!(hellos > 0 && accepted > 0, "the sequences never got going");
}
