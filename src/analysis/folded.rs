//! Folded stacks (`frame;frame;frame COUNT`, root first, one per line):
//! the format bcc's `-f`, flare's folded output and Brendan Gregg's
//! `stackcollapse-perf.pl` all write. The parser is strict: a line it cannot
//! read is an error naming the file and the line, never skipped silently.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use std::collections::HashMap;

use crate::profile::{FrameKind, PathKind, Profile};

/// One stack, root first, with its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    pub frames: Vec<String>,
    pub value: u64,
}

/// A list of stacks in input order; the same stack may appear twice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stacks {
    pub stacks: Vec<Stack>,
    /// Frames whose kind no annotation shows (interpreted functions and
    /// labels), by name, for the flame graph's colours; empty for stacks
    /// read from a folded file.
    pub kinds: HashMap<String, FrameKind>,
}

/// Why folded input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{source_name}:{line}: {reason}")]
    Line {
        source_name: String,
        line: usize,
        reason: String,
    },
    #[error("{source_name}: no stacks found (expected folded stacks, one 'frame;frame;... COUNT' per line)")]
    Empty { source_name: String },
    #[error("cannot read {source_name}: {error}")]
    Io {
        source_name: String,
        error: io::Error,
    },
}

impl Stacks {
    /// Sum of all values.
    pub fn total(&self) -> u64 {
        self.stacks
            .iter()
            .fold(0u64, |t, s| t.saturating_add(s.value))
    }

    /// The stacks of a profile as flame graphs draw them: the process name
    /// at the root, then user, kernel and waker frames, with kernel frames
    /// annotated `_[k]`, JIT ones `_[j]`, inlined ones `_[i]` and the
    /// waker's `_[w]` (the annotations FlameGraph and inferno colour by and
    /// hide in labels); interpreted frames and labels, which have no
    /// annotation, are listed in [`Stacks::kinds`].
    pub fn from_profile(profile: &Profile) -> Self {
        let mut kinds = HashMap::new();
        let stacks = profile
            .samples
            .iter()
            .map(|s| Stack {
                frames: s
                    .path()
                    .iter()
                    .map(|p| {
                        let name = crate::profile::folded_safe(p.name).into_owned();
                        let inlined = p.frame.is_some_and(|f| f.inlined);
                        match p.kind {
                            PathKind::Kernel => format!("{name}_[k]"),
                            PathKind::WakerKernel | PathKind::WakerUser => format!("{name}_[w]"),
                            PathKind::User | PathKind::Jit | PathKind::Interpreted if inlined => {
                                format!("{name}_[i]")
                            }
                            PathKind::Jit => format!("{name}_[j]"),
                            PathKind::Interpreted | PathKind::Label => {
                                if let Some(f) = p.frame {
                                    kinds.entry(name.clone()).or_insert(f.kind);
                                }
                                name
                            }
                            _ => name,
                        }
                    })
                    .collect(),
                value: s.value,
            })
            .collect();
        Stacks { stacks, kinds }
    }

    /// The stacks as folded lines (`a;b;c 12`), in order.
    pub fn folded_lines(&self) -> Vec<String> {
        self.stacks
            .iter()
            .map(|s| format!("{} {}", s.frames.join(";"), s.value))
            .collect()
    }
}

/// Reads a folded-stacks file (`-` for standard input).
pub fn parse_file(path: &Path) -> Result<Stacks, ParseError> {
    let name = path.display().to_string();
    if name == "-" {
        return parse(io::stdin().lock(), "<stdin>");
    }
    let file = File::open(path).map_err(|error| ParseError::Io {
        source_name: name.clone(),
        error,
    })?;
    parse(BufReader::new(file), &name)
}

/// The longest line read (a stack of 254 frames of 1,000-byte C++ names
/// is a quarter of it): an input without line breaks (`/dev/zero`) is an
/// error, not all of memory.
pub const MAX_LINE: usize = 4 << 20;

/// Parses folded stacks; `source_name` names the input in errors. Blank
/// lines are skipped; anything else must be `frames COUNT`.
pub fn parse<R: BufRead>(mut reader: R, source_name: &str) -> Result<Stacks, ParseError> {
    let mut stacks = Vec::new();
    let mut buf = Vec::new();
    let mut number = 0;
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|error| ParseError::Io {
                source_name: source_name.to_string(),
                error,
            })?;
        if n == 0 {
            break;
        }
        number += 1;
        let fail = |reason: String| ParseError::Line {
            source_name: source_name.to_string(),
            line: number,
            reason,
        };
        if buf.len() > MAX_LINE {
            return Err(fail(format!(
                "the line is longer than {} MiB (is this folded stacks?)",
                MAX_LINE >> 20
            )));
        }
        let line = std::str::from_utf8(&buf)
            .map_err(|_| fail("the line is not valid UTF-8 text".into()))?
            .trim();
        if line.is_empty() {
            continue;
        }
        stacks.push(parse_line(line).map_err(fail)?);
    }
    if stacks.is_empty() {
        return Err(ParseError::Empty {
            source_name: source_name.to_string(),
        });
    }
    Ok(Stacks {
        stacks,
        kinds: HashMap::new(),
    })
}

fn parse_line(line: &str) -> Result<Stack, String> {
    let shown = || {
        let mut s: String = line.chars().take(60).collect();
        if s.len() < line.len() {
            s.push_str("...");
        }
        s
    };
    let Some((stack, count)) = line.rsplit_once([' ', '\t']) else {
        return Err(format!(
            "no count at the end of '{}' (expected 'frame;frame;... COUNT')",
            shown()
        ));
    };
    let value = count.parse::<u64>().map_err(|_| {
        format!(
            "'{count}' is not a whole-number count (expected 'frame;frame;... COUNT', found '{}')",
            shown()
        )
    })?;
    let stack = stack.trim_end();
    if stack.is_empty() {
        return Err(format!("no frames before the count in '{}'", shown()));
    }
    let frames: Vec<String> = stack.split(';').map(str::to_string).collect();
    if frames.iter().any(|f| f.trim().is_empty()) {
        return Err(format!("an empty frame name in '{}'", shown()));
    }
    Ok(Stack { frames, value })
}
