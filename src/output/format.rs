//! The file formats flare writes, chosen by name or by a file's extension,
//! and one entry point that writes a profile in any of them.

use std::fmt;
use std::io::{self, Write};
use std::path::Path;

use super::{firefox, folded, offcpu, pprof, speedscope, stackcount, svg, text, StackStyle};
use crate::profile::{Kind, Profile};

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// bcc's multi-line stacks.
    Text,
    /// Folded stacks, one line each.
    Folded,
    /// An interactive flame graph.
    Svg,
    /// Gzipped pprof `profile.proto`.
    Pprof,
    /// A speedscope JSON file.
    Speedscope,
    /// A gzipped Firefox Profiler file (samply's `profile.json.gz`), with
    /// every sample's time.
    Firefox,
}

/// The names `--format` accepts, for messages.
pub const FORMAT_NAMES: &str = "text, folded, svg, pprof, speedscope (or json), firefox";

/// The extensions `-o` recognises, for messages.
pub const EXTENSIONS: &str = ".svg, .folded, .txt, .pb.gz, .pprof, .json, .json.gz";

impl Format {
    /// The format a file name asks for by its extension: `.svg`,
    /// `.folded`/`.txt` (folded stacks), `.pb.gz`/`.pprof`, `.json`
    /// (speedscope), `.json.gz` (the Firefox Profiler).
    pub fn from_path(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        let ext = |e: &str| name.len() > e.len() && name.ends_with(e);
        Some(if ext(".svg") {
            Format::Svg
        } else if ext(".folded") || ext(".txt") {
            Format::Folded
        } else if ext(".pb.gz") || ext(".pprof") {
            Format::Pprof
        } else if ext(".json") {
            Format::Speedscope
        } else if ext(".json.gz") {
            Format::Firefox
        } else {
            return None;
        })
    }

    /// The format with this name.
    pub fn from_name(name: &str) -> Option<Format> {
        Some(match name.to_ascii_lowercase().as_str() {
            "text" | "txt" => Format::Text,
            "folded" => Format::Folded,
            "svg" | "flamegraph" => Format::Svg,
            "pprof" | "pb.gz" => Format::Pprof,
            "speedscope" | "json" => Format::Speedscope,
            "firefox" | "json.gz" => Format::Firefox,
            _ => return None,
        })
    }

    /// True for formats that show when samples happened: a run writing
    /// one keeps each sample's time.
    pub fn keeps_time(self) -> bool {
        match self {
            Format::Text | Format::Folded | Format::Svg | Format::Pprof | Format::Speedscope => {
                false
            }
            Format::Firefox => true,
        }
    }

    /// Writes `profile` in this format. Text and folded output keep the
    /// profile's sample order and follow `style`; the others are complete
    /// files of their own.
    pub fn write<W: Write>(
        self,
        w: &mut W,
        profile: &Profile,
        style: StackStyle,
    ) -> io::Result<()> {
        match self {
            Format::Text => write_text(w, profile, style),
            Format::Folded => write_folded(w, profile, style),
            Format::Svg => svg::write(w, profile),
            Format::Pprof => pprof::write(w, profile),
            Format::Speedscope => speedscope::write(w, profile),
            Format::Firefox => firefox::write(w, profile),
        }
    }
}

/// bcc's multi-line text in the layout of the tool that made the profile.
pub fn write_text<W: Write>(w: &mut W, profile: &Profile, style: StackStyle) -> io::Result<()> {
    let samples = &profile.samples;
    match profile.meta.kind {
        Kind::OffCpu | Kind::Wall => offcpu::offcputime_text(w, samples, style),
        Kind::Wakeup => offcpu::wakeuptime_text(w, samples, style),
        Kind::OffWake => offcpu::offwaketime_text(w, samples, style),
        Kind::Count => {
            let sc = stackcount::Style {
                delimited: style.delimited,
                addresses: false,
                // Stacks of all processes counted together carry no process.
                tasks: samples.iter().any(|s| s.task.pid.is_some()),
                unknown_offsets: style.unknown_offsets,
            };
            stackcount::write(w, samples, sc)
        }
        Kind::Cpu => text::write(w, samples, style),
    }
}

/// Folded stacks in the layout of the tool that made the profile (the
/// off-CPU family appends the waker's side as bcc does).
pub fn write_folded<W: Write>(w: &mut W, profile: &Profile, style: StackStyle) -> io::Result<()> {
    let samples = &profile.samples;
    match profile.meta.kind {
        Kind::Wakeup => offcpu::wakeuptime_folded(w, samples, style),
        Kind::OffWake => offcpu::offwaketime_folded(w, samples, style),
        Kind::Cpu | Kind::OffCpu | Kind::Count | Kind::Wall => folded::write(w, samples, style),
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Text => "text",
            Format::Folded => "folded",
            Format::Svg => "svg",
            Format::Pprof => "pprof",
            Format::Speedscope => "speedscope",
            Format::Firefox => "firefox",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_pick_formats() {
        for (name, f) in [
            ("a.svg", Some(Format::Svg)),
            ("dir/A.SVG", Some(Format::Svg)),
            ("x.folded", Some(Format::Folded)),
            ("x.txt", Some(Format::Folded)),
            ("cpu.pb.gz", Some(Format::Pprof)),
            ("cpu.pprof", Some(Format::Pprof)),
            ("p.json", Some(Format::Speedscope)),
            ("p.gz", None),
            ("profile.json.gz", Some(Format::Firefox)),
            ("P.JSON.GZ", Some(Format::Firefox)),
            (".json.gz", None),
            ("svg", None),
            (".svg", None),
            ("noext", None),
        ] {
            assert_eq!(Format::from_path(Path::new(name)), f, "{name}");
        }
        assert_eq!(Format::from_name("JSON"), Some(Format::Speedscope));
        assert_eq!(Format::from_name("png"), None);
        assert_eq!(Format::from_name("firefox"), Some(Format::Firefox));
        assert!(Format::Firefox.keeps_time());
        assert_eq!(Format::Firefox.to_string(), "firefox");
    }
}
