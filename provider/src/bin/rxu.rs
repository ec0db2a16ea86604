//! The `rxu` command-line tool.
fn main() {}
