//! Golden-file comparison: `FLARE_BLESS=1 cargo test` rewrites the expected
//! files after an intended change; otherwise a mismatch fails with both
//! texts shown line by line.

use std::fs;
use std::path::PathBuf;

pub fn check(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    if std::env::var_os("FLARE_BLESS").is_some() {
        fs::write(&path, actual).expect("writing golden file");
        return;
    }
    let expected = fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with FLARE_BLESS=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        let mut diff = String::new();
        let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
        for i in 0..e.len().max(a.len()) {
            let (x, y) = (e.get(i).copied(), a.get(i).copied());
            if x != y {
                diff.push_str(&format!(
                    "line {}:\n  expected: {:?}\n  actual:   {:?}\n",
                    i + 1,
                    x,
                    y
                ));
            }
        }
        panic!("{} differs from the output:\n{diff}", path.display());
    }
}
