//! `rxu stats`: the daemon's device and per-QP counters (named like kernel
//! rxe's hw_counters), as aligned text, one JSON object, or the Prometheus
//! text format ([`super::metrics`]).

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::admin::AdminConn;
use super::{CliError, Result};
use rxu_abi::paths;
use rxu_abi::proto::{Counter, Request, Response};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub device: String,
    pub counters: Vec<Counter>,
    pub qps: Vec<(u32, Vec<Counter>)>,
}

pub fn fetch(name: &str) -> Result<Stats> {
    let sock = paths::socket_path(name);
    let mut c = AdminConn::connect(&sock, Duration::from_secs(5)).map_err(|e| match e {
        super::admin::AdminError::NotRunning(_) => CliError::NotUp(name.to_owned()),
        e => CliError::admin(name)(e),
    })?;
    match c.call_ok(&Request::Stats).map_err(CliError::admin(name))? {
        Response::Stats { device, qps } => Ok(Stats {
            device: name.to_owned(),
            counters: device,
            qps,
        }),
        _ => Err(CliError::Daemon(format!(
            "{name}'s daemon sent an unexpected reply to Stats"
        ))),
    }
}

/// Every device whose daemon answers (`--all`), in name order.
pub fn fetch_all() -> Vec<Stats> {
    super::devices::list()
        .into_iter()
        .filter_map(|f| fetch(&f.name).ok())
        .collect()
}

pub fn render_text(s: &Stats) -> String {
    let width = s
        .counters
        .iter()
        .chain(s.qps.iter().flat_map(|(_, c)| c))
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0);
    let mut out = format!("{}\n", s.device);
    for c in &s.counters {
        let _ = writeln!(out, "    {:width$}  {}", c.name, c.value);
    }
    for (qpn, counters) in &s.qps {
        let _ = writeln!(out, "  qp {qpn}");
        for c in counters {
            let _ = writeln!(out, "    {:width$}  {}", c.name, c.value);
        }
    }
    out
}

/// `{"device": name, "counters": {...}, "qps": [{"qpn": n, "counters": {...}}]}`.
pub fn to_json(s: &Stats) -> Value {
    let obj = |cs: &[Counter]| -> Value {
        Value::Object(
            cs.iter()
                .map(|c| (c.name.clone(), Value::from(c.value)))
                .collect::<Map<String, Value>>(),
        )
    };
    json!({
        "device": s.device,
        "counters": obj(&s.counters),
        "qps": s.qps.iter().map(|(qpn, cs)| json!({"qpn": qpn, "counters": obj(cs)})).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, value: u64) -> Counter {
        Counter {
            name: name.into(),
            value,
        }
    }

    fn sample() -> Stats {
        Stats {
            device: "rxu0".into(),
            counters: vec![c("sent_pkts", 10), c("rcvd_pkts", 9), c("icrc_errors", 0)],
            qps: vec![(17, vec![c("sent_pkts", 4), c("retry_exceeded_err", 1)])],
        }
    }

    #[test]
    fn text_is_aligned() {
        let t = render_text(&sample());
        let want = "\
rxu0
    sent_pkts           10
    rcvd_pkts           9
    icrc_errors         0
  qp 17
    sent_pkts           4
    retry_exceeded_err  1
";
        assert_eq!(t, want);
    }

    #[test]
    fn json_round_trips() {
        let v = to_json(&sample());
        let text = serde_json::to_string(&v).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["device"], "rxu0");
        assert_eq!(back["counters"]["sent_pkts"], 10);
        assert_eq!(back["qps"][0]["qpn"], 17);
        assert_eq!(back["qps"][0]["counters"]["retry_exceeded_err"], 1);
    }
}
