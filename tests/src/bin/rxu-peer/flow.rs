//! The control-line sequence every workload follows: INFO both ways,
//! READY both ways, then the client's `DONE ok|fail ...` and the server's
//! `VERDICT ok|fail ...`.

use crate::ctl::{Ctl, PeerInfo};
use crate::peer::Res;

/// What a successful run reports on its RESULT line.
#[derive(Default)]
pub struct Outcome {
    /// Payload bytes moved by the workload phase.
    pub bytes: u64,
    /// Seconds of the workload phase.
    pub secs: f64,
    /// Extra `key=value` words.
    pub extra: String,
}

pub fn io(e: std::io::Error) -> String {
    format!("control channel: {e}")
}

/// Sends our INFO, returns the peer's.
pub fn exchange_info(ctl: &mut Ctl, mine: &PeerInfo) -> Res<PeerInfo> {
    ctl.send(&mine.line()).map_err(io)?;
    PeerInfo::parse(&ctl.expect("INFO").map_err(io)?)
}

/// Both sides are connected and prepared.
pub fn ready(ctl: &mut Ctl) -> Res<()> {
    ctl.send("READY").map_err(io)?;
    ctl.expect("READY").map_err(io)?;
    Ok(())
}

/// Client: reports its outcome, then (on success) waits for the verdict.
pub fn client_done<T>(ctl: &mut Ctl, outcome: Res<T>) -> Res<T> {
    match &outcome {
        Ok(_) => ctl.send("DONE ok"),
        Err(e) => ctl.send(&format!("DONE fail {e}")),
    }
    .map_err(io)?;
    let v = outcome?;
    let verdict = ctl.expect("VERDICT").map_err(io)?;
    if verdict != "ok" {
        return Err(format!("server: {verdict}"));
    }
    Ok(v)
}

/// Server: after its own part, waits for the client's DONE, runs the
/// final checks and sends the verdict.
pub fn server_verdict<T>(
    ctl: &mut Ctl,
    outcome: Res<T>,
    after: impl FnOnce() -> Res<()>,
) -> Res<T> {
    if let Err(e) = &outcome {
        let _ = ctl.send(&format!("VERDICT fail {e}"));
        return outcome;
    }
    let done = ctl.expect("DONE").map_err(io)?;
    if done != "ok" {
        let _ = ctl.send("VERDICT fail client failed");
        return Err(format!("client: {done}"));
    }
    let checked = after();
    match &checked {
        Ok(()) => ctl.send("VERDICT ok"),
        Err(e) => ctl.send(&format!("VERDICT fail {e}")),
    }
    .map_err(io)?;
    checked?;
    outcome
}
