//! The verbs surface comparison: the `key=value` dump of
//! `tests/c/verbs_surface` on rxu against the kernel rxe's reference
//! (`tests/vectors/rxe-verbs-surface.txt`), where a line may differ only
//! when the table of documented differences
//! (`tests/vectors/verbs-surface-differences.txt`) names its key.
//!
//! The interop phase "surface" (`scripts/interop/iop/surface.py`) reads the
//! same table and compares the same way: a change here is made there too.

/// The program's lines as (key, value), in order. Blank lines and `#`
/// comments (the reference's header) are skipped; a key printed twice
/// keeps both, the second as `key#2`.
pub fn parse(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or((line, "(no '=')"));
        let mut k = key.to_owned();
        let mut n = 1;
        while out.iter().any(|(o, _)| *o == k) {
            n += 1;
            k = format!("{key}#{n}");
        }
        out.push((k, value.to_owned()));
    }
    out
}

/// One documented difference: a key pattern (`*` matches any run of
/// characters) and why rxu may differ there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    pub pattern: String,
    pub reason: String,
}

/// The table: one entry per line, the pattern then its reason; blank lines
/// and `#` comments skipped.
pub fn parse_table(text: &str) -> Vec<Allowed> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (p, r) = l.split_once(' ').unwrap_or((l, ""));
            Allowed {
                pattern: p.to_owned(),
                reason: r.trim().to_owned(),
            }
        })
        .collect()
}

/// Whether `key` matches `pattern`, a glob whose only wildcard is `*`.
pub fn matches(pattern: &str, key: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    // One part: no wildcard.
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == key;
    };
    let Some(mut rest) = key.strip_prefix(first) else {
        return false;
    };
    for mid in middle {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// A line that differs: its key, the reference's value and rxu's
/// (`(missing)` when one side has no such line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub key: String,
    pub rxe: String,
    pub rxu: String,
    /// The table's reason, when the table names the key.
    pub reason: Option<String>,
}

/// The result of one comparison.
#[derive(Debug, Default)]
pub struct Comparison {
    pub equal: usize,
    pub differences: Vec<Difference>,
    /// Table patterns that matched no differing line (fixed since, or a
    /// difference of another environment).
    pub unused: Vec<String>,
}

const MISSING: &str = "(missing)";

impl Comparison {
    /// Compares rxu's lines with the reference's under `table`.
    pub fn new(
        reference: &[(String, String)],
        rxu: &[(String, String)],
        table: &[Allowed],
    ) -> Self {
        let mut c = Comparison::default();
        let mut used = vec![false; table.len()];
        let find = |lines: &[(String, String)], k: &str| {
            lines
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let keys = reference.iter().map(|(k, _)| k).chain(
            rxu.iter()
                .map(|(k, _)| k)
                .filter(|k| find(reference, k).is_none()),
        );
        for key in keys {
            let a = find(reference, key).unwrap_or_else(|| MISSING.into());
            let b = find(rxu, key).unwrap_or_else(|| MISSING.into());
            if a == b {
                c.equal += 1;
                continue;
            }
            let allowed = table.iter().position(|t| matches(&t.pattern, key));
            if let Some(i) = allowed {
                used[i] = true;
            }
            c.differences.push(Difference {
                key: key.clone(),
                rxe: a,
                rxu: b,
                reason: allowed.map(|i| table[i].reason.clone()),
            });
        }
        c.unused = table
            .iter()
            .zip(used)
            .filter(|(_, u)| !u)
            .map(|(t, _)| t.pattern.clone())
            .collect();
        c
    }

    /// The differences the table does not name.
    pub fn undocumented(&self) -> impl Iterator<Item = &Difference> {
        self.differences.iter().filter(|d| d.reason.is_none())
    }

    pub fn ok(&self) -> bool {
        self.undocumented().next().is_none()
    }

    /// Every difference, undocumented ones first, and the unused entries.
    pub fn report(&self) -> String {
        let documented = self.differences.len() - self.undocumented().count();
        let mut s = format!(
            "{} lines equal, {} documented differences, {} undocumented\n",
            self.equal,
            documented,
            self.differences.len() - documented
        );
        for d in self.undocumented() {
            s += &format!("UNDOCUMENTED {}: rxe {:?}, rxu {:?}\n", d.key, d.rxe, d.rxu);
        }
        for d in self.differences.iter().filter(|d| d.reason.is_some()) {
            s += &format!(
                "documented {}: rxe {:?}, rxu {:?} ({})\n",
                d.key,
                d.rxe,
                d.rxu,
                d.reason.as_deref().unwrap_or("")
            );
        }
        for p in &self.unused {
            s += &format!("table entry matching no difference here: {p}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_with_star_only() {
        assert!(matches("device.fw_ver", "device.fw_ver"));
        assert!(!matches("device.fw_ver", "device.fw_ver2"));
        assert!(matches("device.*", "device.max_qp"));
        assert!(matches("*.sl", "wc.ud.send.responder.sl"));
        assert!(!matches("*.sl", "wc.ud.send.responder.slid"));
        assert!(matches("wc*.ud.*.sl", "wcx.ud.send.responder.sl"));
        assert!(matches("a*b*c", "abc"));
        assert!(!matches("a*b*c", "acb"));
        // The middle and the end may not overlap.
        assert!(!matches("ab*ba", "aba"));
        assert!(matches("*", ""));
        assert!(!matches("a?c", "abc"));
    }

    #[test]
    fn parse_skips_comments_and_numbers_repeats() {
        let p = parse("# header\n\na=1\nb=x=y\na=2\nnoeq\n");
        let want: Vec<(String, String)> =
            [("a", "1"), ("b", "x=y"), ("a#2", "2"), ("noeq", "(no '=')")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(p, want);
    }

    #[test]
    fn table_lines_are_pattern_then_reason() {
        let t = parse_table("# c\n\ndevice.fw_ver  rxu's version\n*.sl pending: ud — sl\nbare\n");
        assert_eq!(
            t,
            vec![
                Allowed {
                    pattern: "device.fw_ver".into(),
                    reason: "rxu's version".into()
                },
                Allowed {
                    pattern: "*.sl".into(),
                    reason: "pending: ud — sl".into()
                },
                Allowed {
                    pattern: "bare".into(),
                    reason: String::new()
                },
            ]
        );
    }

    #[test]
    fn comparison_sorts_lines_into_equal_documented_undocumented() {
        let rxe = parse("a=1\nb=2\nc=3\nonly_rxe=4\n");
        let rxu = parse("a=1\nb=20\nc=30\nonly_rxu=5\n");
        let table = parse_table("b why b\nonly_* one side\nnever matches\n");
        let c = Comparison::new(&rxe, &rxu, &table);
        assert_eq!(c.equal, 1);
        let undoc: Vec<&str> = c.undocumented().map(|d| d.key.as_str()).collect();
        assert_eq!(undoc, ["c"]);
        let doc: Vec<(&str, &str, &str)> = c
            .differences
            .iter()
            .filter(|d| d.reason.is_some())
            .map(|d| (d.key.as_str(), d.rxe.as_str(), d.rxu.as_str()))
            .collect();
        assert_eq!(
            doc,
            [
                ("b", "2", "20"),
                ("only_rxe", "4", MISSING),
                ("only_rxu", MISSING, "5")
            ]
        );
        assert_eq!(c.unused, ["never"]);
        assert!(!c.ok());
        assert!(c.report().contains("UNDOCUMENTED c: rxe \"3\", rxu \"30\""));
    }
}
