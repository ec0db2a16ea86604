//! `QpCounters`: the one field list gives `rxu stats` its names (rxe's
//! hw_counters names where rxe has them) and the device totals their sum.

use crate::qp::QpCounters;

#[test]
fn list_names_every_field_once_in_order_and_add_sums_each() {
    let a = QpCounters {
        sent_pkts: 1,
        rcvd_pkts: 2,
        retransmitted_pkts: 3,
        credit_probes: 4,
        ..QpCounters::default()
    };
    let names: Vec<&str> = a.list().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "sent_pkts",
            "rcvd_pkts",
            "duplicate_request",
            "out_of_seq_request",
            "rcvd_rnr_err",
            "send_rnr_err",
            "rcvd_seq_err",
            "retry_exceeded_err",
            "rnr_nak_retry_err",
            "completer_retry_err",
            "retransmitted_pkts",
            "local_ack_timeout_err",
            "dropped_pkts",
            "qkey_violations",
            "credit_updates",
            "credit_probes",
        ]
    );
    let mut t = QpCounters {
        sent_pkts: 10,
        credit_probes: 1,
        ..QpCounters::default()
    };
    t.add(&a);
    t.add(&a);
    let got: Vec<u64> = t.list().into_iter().map(|(_, v)| v).collect();
    let mut want = vec![0u64; 16];
    (want[0], want[1], want[10], want[15]) = (12, 4, 6, 9);
    assert_eq!(got, want);
    // The device's sums: without the driver-level sent/rcvd, the QPs'
    // drops renamed.
    let d = t.device_totals();
    assert_eq!(d.len(), 14);
    assert_eq!(d[0], ("duplicate_request", 0));
    assert!(d.contains(&("retransmitted_pkts", 6)));
    assert!(d.contains(&("qp_dropped_pkts", 0)));
    assert!(!d
        .iter()
        .any(|(n, _)| matches!(*n, "sent_pkts" | "rcvd_pkts" | "dropped_pkts")));
}
