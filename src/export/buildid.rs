//! GNU build ids of ELF files, for pprof and OTLP mappings: servers use
//! them to find debug information and to tell builds apart.
//!
//! Read with the tree's ELF reader ([`crate::elf`]), which checks a
//! note's owner (`GNU`) with its type: blazesym's reader matches the type
//! alone and so returns a SystemTap probe note (also type 3) as the build
//! id of files that have probes but no build id.

use std::fs::File;
use std::path::Path;

use crate::elf::{Elf, FileSource};

/// The GNU build id of an ELF file, as hex.
pub fn read(path: &Path) -> Option<String> {
    let file = File::open(path).ok()?;
    let id = Elf::parse(FileSource::new(&file)?)?.build_id()?;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_readelf_on_libc() {
        let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
        if !libc.exists() {
            return;
        }
        let out = std::process::Command::new("readelf")
            .arg("-n")
            .arg(libc)
            .output();
        let Ok(out) = out else { return };
        let text = String::from_utf8_lossy(&out.stdout);
        let expected = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: "))
            .map(str::to_string);
        assert!(expected.is_some(), "readelf shows libc's build id");
        assert_eq!(read(libc), expected);
    }
}
