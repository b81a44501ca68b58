//! `-o DIR`: one gzipped pprof file per window, named by the window's
//! start (`flare-<unix ms>.pb.gz`, so that names sort by time; windows of
//! other profiles than CPU samples add their kind: `flare-<unix
//! ms>-offcpu.pb.gz`, `-wall`; a window of a service adds it,
//! `flare-<unix ms>.checkout.pb.gz`), written to a temporary file and
//! renamed into place, the oldest removed beyond a bounded count.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::pprof::Encoder;
use super::{DeliveryError, Destination, Encode, Payload};
use crate::profile::Kind;

const PREFIX: &str = "flare-";
const SUFFIX: &str = ".pb.gz";

/// A directory of window files.
pub struct Dir {
    path: PathBuf,
    keep: usize,
}

impl Dir {
    /// Creates `path` if needed; at most `keep` window files stay in it.
    pub fn new(path: &Path, keep: usize) -> std::io::Result<Self> {
        fs::create_dir_all(path)?;
        Ok(Dir {
            path: path.to_path_buf(),
            keep: keep.max(1),
        })
    }

    /// The window files in the directory, oldest first.
    pub fn files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
        let mut files: Vec<PathBuf> = fs::read_dir(path)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(SUFFIX))
            })
            .collect();
        files.sort();
        Ok(files)
    }
}

/// What a window file's name adds for its profile's kind: nothing for
/// CPU samples (the names of before), else `-offcpu`, `-wall`.
fn kind_suffix(kind: Kind) -> String {
    match kind {
        Kind::Cpu => String::new(),
        _ => format!("-{}", super::kind_name(kind)),
    }
}

impl Destination for Dir {
    fn name(&self) -> String {
        format!("dir {}", self.path.display())
    }

    fn encoder(&self) -> Box<dyn Encode> {
        Box::new(Encoder::new())
    }

    /// A local write: the timeout does not apply.
    fn deliver(&mut self, payload: &Payload, _: Duration) -> Result<(), DeliveryError> {
        let fail = |e: std::io::Error| DeliveryError::Retry(format!("{}: {e}", self.name()));
        let service = payload.service.as_deref().map_or_else(String::new, |s| {
            // Within a file name's 255 bytes.
            let key: String = super::push::spool_key(s).chars().take(120).collect();
            format!(".{key}")
        });
        let name = format!(
            "{PREFIX}{:015}{}{service}{SUFFIX}",
            payload.start_ns / 1_000_000,
            kind_suffix(payload.kind)
        );
        let mut tmp = tempfile::Builder::new()
            .prefix(".flare-window")
            .tempfile_in(&self.path)
            .map_err(fail)?;
        tmp.write_all(&payload.body).map_err(fail)?;
        tmp.as_file().sync_data().map_err(fail)?;
        tmp.persist(self.path.join(name))
            .map_err(|e| fail(e.error))?;
        let files = Dir::files(&self.path).map_err(fail)?;
        for old in files.iter().take(files.len().saturating_sub(self.keep)) {
            let _ = fs::remove_file(old);
        }
        Ok(())
    }
}
