//! A string's code units as the V8 heap reader takes them, and the line
//! table counted from a script's source: megabytes of text (the
//! TypeScript compiler's 9 MiB) scanned per process, so the units that
//! end no line, nearly all, cost one compare each, and a one-byte
//! source's are skipped many at a time.

/// Where a script's line table came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineSource {
    /// `Script.line_ends`, which V8 fills the first time it needs a line.
    LineEnds,
    /// The source's line terminators, counted here.
    Source,
}

/// Where a script's lines end: a line's number from a source position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineTable {
    /// The position of each line's terminator, ascending (V8's
    /// `line_ends`, the source's length last).
    pub(super) ends: Vec<u32>,
    /// Positions up to here have a line.
    pub(super) covers: u32,
    pub from: LineSource,
}

impl LineTable {
    /// The 1-based line of source position `position` (a UTF-16 offset),
    /// as V8 counts it (`Script::GetPositionInfo`): the first line whose
    /// end is at or past it. `None` past what the table covers.
    pub fn line(&self, position: u32) -> Option<u32> {
        if position > self.covers {
            return None;
        }
        let index = self.ends.partition_point(|&end| end < position);
        u32::try_from(index).ok()?.checked_add(1)
    }
}

impl crate::runtime::tracker::Weight for LineTable {
    fn weight(&self) -> usize {
        self.ends.len() * std::mem::size_of::<u32>() + std::mem::size_of::<Self>()
    }
}

/// A string's code units, as read so far: kept (a name), or only
/// counted into line ends (a script's source, megabytes long, is never
/// held whole).
pub(super) struct Units {
    pub(super) out: Vec<u16>,
    pub(super) lines: Option<Lines>,
    /// Units taken so far.
    pub(super) taken: usize,
    /// Units taken at most.
    pub(super) limit: usize,
    /// Parts read so far.
    pub(super) parts: u32,
}

impl Units {
    pub(super) fn new(limit: usize, lines: bool) -> Self {
        Units {
            out: Vec::new(),
            lines: lines.then(Lines::default),
            taken: 0,
            limit,
            parts: 0,
        }
    }

    /// Takes the units `bytes` hold: a byte each when `one_byte`, else
    /// two (native order).
    pub(super) fn extend(&mut self, bytes: &[u8], one_byte: bool) {
        match (&mut self.lines, one_byte) {
            (Some(lines), true) => self.taken += lines.scan_bytes(bytes),
            (_, true) => self.take(bytes.iter().map(|&b| u16::from(b))),
            (_, false) => self.take(wide(bytes)),
        }
    }

    fn take(&mut self, units: impl Iterator<Item = u16>) {
        match &mut self.lines {
            Some(lines) => self.taken += lines.scan(units),
            None => {
                self.out.extend(units);
                self.taken = self.out.len();
            }
        }
    }
}

/// The two-byte units of `bytes`, native order.
fn wide(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_ne_bytes([c[0], c[1]]))
}

/// Whether unit `c` may end a line: a line terminator (the common unit
/// costs a few compares, with no write).
fn may_end_line(c: u16) -> bool {
    c == 0x0a || c == 0x0d || c & 0xfffe == 0x2028
}

/// Line ends counted unit by unit as V8 computes them
/// (`String::CalculateLineEnds`): `\n`, a `\r` not before `\n`, U+2028
/// and U+2029 end a line.
#[derive(Default)]
pub(super) struct Lines {
    ends: Vec<u32>,
    /// Units seen.
    at: u32,
    /// The last unit seen was a `\r`.
    cr: bool,
}

impl Lines {
    /// Pushes each of `units`, counting the runs that end no line at
    /// once (a source is millions of units, few of them line ends);
    /// returns how many there were.
    fn scan(&mut self, units: impl Iterator<Item = u16>) -> usize {
        let mut run = 0usize;
        let mut n = 0usize;
        for c in units {
            n += 1;
            if may_end_line(c) {
                self.skip(run);
                run = 0;
                self.push(c);
            } else {
                run += 1;
            }
        }
        self.skip(run);
        n
    }

    /// [`Lines::scan`] for one-byte (Latin-1) units, which hold no
    /// U+2028 or U+2029: only `\n` and `\r` are looked at, found by
    /// `memchr` many bytes at a time.
    fn scan_bytes(&mut self, bytes: &[u8]) -> usize {
        let mut from = 0;
        for at in memchr::memchr2_iter(b'\n', b'\r', bytes) {
            self.skip(at - from);
            self.push(u16::from(bytes[at]));
            from = at + 1;
        }
        self.skip(bytes.len() - from);
        bytes.len()
    }

    /// Pushes `n` units that end no line and are not `\n`.
    fn skip(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        if std::mem::take(&mut self.cr) {
            self.ends.push(self.at - 1);
        }
        self.at = u32::try_from(n)
            .ok()
            .and_then(|n| self.at.checked_add(n))
            .unwrap_or(u32::MAX);
    }

    fn push(&mut self, c: u16) {
        if std::mem::take(&mut self.cr) && c != 0x0a {
            self.ends.push(self.at - 1);
        }
        match c {
            0x0a | 0x2028 | 0x2029 => self.ends.push(self.at),
            0x0d => self.cr = true,
            _ => {}
        }
        self.at = self.at.saturating_add(1);
    }

    /// The table; the source's length ends the last line when `whole`
    /// (else positions past the last terminator have no line, and a `\r`
    /// last may be the first half of a `\r\n` cut off).
    pub(super) fn finish(mut self, whole: bool) -> LineTable {
        let covers = if whole {
            if self.cr {
                self.ends.push(self.at - 1);
            }
            self.ends.push(self.at);
            self.at
        } else {
            self.ends.last().copied().unwrap_or(0)
        };
        LineTable {
            ends: self.ends,
            covers,
            from: LineSource::Source,
        }
    }
}

/// The line ends of source `units` (all of it when `whole`), as
/// [`Lines`] counts them.
#[cfg(test)]
pub(super) fn count_lines(units: &[u16], whole: bool) -> LineTable {
    let mut lines = Lines::default();
    for &u in units {
        lines.push(u);
    }
    lines.finish(whole)
}

/// [`count_lines`] through [`Lines::scan`], the units given in pieces
/// `cuts` long in turn.
#[cfg(test)]
pub(super) fn scan_lines(units: &[u16], cuts: &[usize], whole: bool) -> LineTable {
    let mut lines = Lines::default();
    in_pieces(units, cuts, |piece| {
        assert_eq!(lines.scan(piece.iter().copied()), piece.len());
    });
    lines.finish(whole)
}

/// [`count_lines`] of one-byte units, taken as the heap reader takes a
/// one-byte source ([`Units::extend`]), in pieces `cuts` long in turn.
#[cfg(test)]
pub(super) fn scan_byte_lines(bytes: &[u8], cuts: &[usize], whole: bool) -> LineTable {
    let mut units = Units::new(usize::MAX, true);
    in_pieces(bytes, cuts, |piece| units.extend(piece, true));
    assert_eq!(units.taken, bytes.len());
    units.lines.expect("counting lines").finish(whole)
}

/// Hands `items` to `take` in pieces `cuts` long in turn (cycling; a
/// piece is at least one item).
#[cfg(test)]
fn in_pieces<T>(items: &[T], cuts: &[usize], mut take: impl FnMut(&[T])) {
    let mut rest = items;
    for &n in cuts.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (piece, tail) = rest.split_at(n.clamp(1, rest.len()));
        take(piece);
        rest = tail;
    }
}
