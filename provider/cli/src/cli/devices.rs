//! Which devices exist in the runtime directory, found from what is on
//! disk: control sockets (`<name>.sock`), pid files and the device tree's
//! `class/infiniband_verbs/uverbsN/ibdev` entries. A device whose daemon
//! died still shows up here, so `rxu down` can clean it.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rxu_abi::paths;
use rxud::devnode::{self, DevNode, Paths};

/// What is on disk for one device name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub name: String,
    pub uverbs: Option<u32>,
    pub pid: Option<u32>,
    pub socket: bool,
}

/// The device tree paths for this runtime directory.
pub fn devnode_paths() -> Paths {
    Paths::new(paths::sysfs_root())
}

pub fn verbs_class(sysfs: &Path) -> PathBuf {
    sysfs.join("class/infiniband_verbs")
}

/// Every device that has any file in the runtime directory, by name.
pub fn list() -> Vec<Found> {
    let mut by_name: BTreeMap<String, Found> = BTreeMap::new();
    let entry = |m: &mut BTreeMap<String, Found>, name: &str| -> Option<()> {
        if !valid_name(name) {
            return None;
        }
        m.entry(name.to_owned()).or_insert_with(|| Found {
            name: name.to_owned(),
            ..Found::default()
        });
        Some(())
    };
    if let Ok(rd) = fs::read_dir(paths::runtime_dir()) {
        for e in rd.flatten() {
            let f = e.file_name().to_string_lossy().into_owned();
            for suffix in [".sock", ".pid"] {
                if let Some(name) = f.strip_suffix(suffix) {
                    let _ = entry(&mut by_name, name);
                }
            }
        }
    }
    for (idx, name) in uverbs_entries(&paths::sysfs_root()) {
        if entry(&mut by_name, &name).is_some() {
            if let Some(f) = by_name.get_mut(&name) {
                f.uverbs = Some(idx);
            }
        }
    }
    for f in by_name.values_mut() {
        f.pid = read_pid(&f.name);
        f.socket = paths::socket_path(&f.name).exists();
    }
    by_name.into_values().collect()
}

/// One device by name, if anything of it is on disk.
pub fn find(name: &str) -> Option<Found> {
    list().into_iter().find(|f| f.name == name)
}

/// `(N, ibdev)` for each `uverbsN` in the tree, in index order.
pub fn uverbs_entries(sysfs: &Path) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(verbs_class(sysfs)) else {
        return out;
    };
    for e in rd.flatten() {
        let f = e.file_name().to_string_lossy().into_owned();
        let Some(idx) = f.strip_prefix("uverbs").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(s) = fs::read_to_string(e.path().join("ibdev")) {
            out.push((idx, s.trim_end().to_owned()));
        }
    }
    out.sort();
    out
}

/// The device node of `name`, if its tree is there.
pub fn open_devnode(name: &str) -> Option<DevNode> {
    let p = devnode_paths();
    uverbs_entries(&p.sysfs)
        .into_iter()
        .find(|(_, n)| n == name)
        .and_then(|(i, _)| DevNode::open(&p, i).ok())
}

/// Names rxu accepts: what the device tree accepts (1..=63 of
/// `[A-Za-z0-9_.-]`, no leading dot), so they are safe in paths.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

pub fn read_pid(name: &str) -> Option<u32> {
    parse_pid(&fs::read_to_string(paths::pid_path(name)).ok()?)
}

pub fn parse_pid(s: &str) -> Option<u32> {
    s.trim().parse::<u32>().ok().filter(|p| *p > 1)
}

/// Writes the pid file atomically (the daemon may write the same value).
pub fn write_pid(name: &str, pid: u32) -> io::Result<()> {
    let path = paths::pid_path(name);
    let tmp = path.with_extension(format!("pid.{}.tmp", std::process::id()));
    fs::write(&tmp, format!("{pid}\n"))?;
    fs::rename(&tmp, &path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// Whether `pid` is a live (not zombie) rxud process: pids get reused, and
/// rxu must never signal someone else's process.
pub fn is_rxud(pid: u32) -> bool {
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    comm.trim_end() == "rxud" && alive(pid)
}

/// Whether `pid` exists and is not a zombie (an rxud whose parent exited
/// may linger as a zombie where PID 1 does not reap).
pub fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// `/dev/infiniband/uverbsN` for index N (for messages).
pub fn cdev_path(paths: &Paths, idx: u32) -> PathBuf {
    paths.dev_dir.join(devnode::uverbs_name(idx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("rxu0"));
        assert!(valid_name("my-dev_1.a"));
        assert!(!valid_name(""));
        assert!(!valid_name(".hidden"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name("a b"));
        assert!(!valid_name(&"x".repeat(64)));
    }

    #[test]
    fn pids() {
        assert_eq!(parse_pid("1234\n"), Some(1234));
        assert_eq!(parse_pid(" 77 "), Some(77));
        assert_eq!(parse_pid("0"), None);
        assert_eq!(parse_pid("1"), None);
        assert_eq!(parse_pid("-5"), None);
        assert_eq!(parse_pid("abc"), None);
    }

    #[test]
    fn liveness() {
        assert!(alive(std::process::id()));
        assert!(!is_rxud(std::process::id()));
        assert!(!alive(u32::MAX - 1));
    }

    #[test]
    fn uverbs_entries_are_read_and_sorted() {
        let dir = std::env::temp_dir().join(format!("rxu-devices-{}", std::process::id()));
        let class = verbs_class(&dir);
        for (n, name) in [(3, "rxu3"), (0, "rxu0")] {
            let d = class.join(format!("uverbs{n}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("ibdev"), format!("{name}\n")).unwrap();
        }
        fs::create_dir_all(class.join("uverbsX")).unwrap();
        fs::write(class.join("abi_version"), "6\n").unwrap();
        assert_eq!(
            uverbs_entries(&dir),
            vec![(0, "rxu0".to_owned()), (3, "rxu3".to_owned())]
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
