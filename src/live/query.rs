//! The live server's query strings, parsed strictly: every value a route
//! reads is checked for form and bounds, and a bad one is refused with
//! 400 and the reason, never guessed at.

use std::time::Duration;

use super::{Selection, TimeQuery, DEFAULT_MIN_SHARE};

/// A request that cannot be answered: status and one line of reason.
pub(crate) type Refusal = (u16, String);

/// The widest timeline slice: an hour.
pub const MAX_SLICE_MS: u64 = 3_600_000;
/// The latest time a query may name: about 31 years, in milliseconds.
pub const MAX_TIME_MS: u64 = 1_000_000_000_000;
/// The longest search a timeline query may filter by, in bytes.
pub const MAX_SEARCH: usize = 256;

/// Everything a query string may say; each route reads its part.
#[derive(Debug)]
pub(crate) struct Params {
    pub(crate) sel: Selection,
    pub(crate) min_share: f64,
    pub(crate) time: TimeQuery,
}

/// A query value with `+` as space and `%XX` escapes decoded; `None`
/// when an escape is malformed or the bytes are not UTF-8.
pub(crate) fn decode(v: &str) -> Option<String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

pub(crate) fn parse_query(query: &str) -> std::result::Result<Params, Refusal> {
    let mut p = Params {
        sel: Selection::default(),
        min_share: DEFAULT_MIN_SHARE,
        time: TimeQuery {
            slice_ms: 1000,
            ..TimeQuery::default()
        },
    };
    let bad = |k: &str, v: &str| (400, format!("bad value '{}' for '{k}'", v.escape_debug()));
    let time = |k: &str, v: &str| -> std::result::Result<Option<u64>, Refusal> {
        if v.is_empty() {
            return Ok(None);
        }
        match v.parse::<u64>() {
            Ok(t) if t <= MAX_TIME_MS && v.bytes().all(|c| c.is_ascii_digit()) => Ok(Some(t)),
            _ => Err(bad(k, v)),
        }
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "last" if v.is_empty() || v == "0" => p.sel.last = None,
            "last" => {
                let secs: u64 = v.parse().map_err(|_| bad(k, v))?;
                p.sel.last = Some(Duration::from_secs(secs));
            }
            "pid" if v.is_empty() => p.sel.pid = None,
            "pid" => p.sel.pid = Some(v.parse().map_err(|_| bad(k, v))?),
            "min" => {
                let m: f64 = v.parse().map_err(|_| bad(k, v))?;
                if !(0.0..=1.0).contains(&m) {
                    return Err(bad(k, v));
                }
                p.min_share = m;
            }
            "slice" => match v.parse::<u64>() {
                Ok(s) if (1..=MAX_SLICE_MS).contains(&s) => p.time.slice_ms = s,
                _ => return Err(bad(k, v)),
            },
            "from" => p.time.from_ms = time(k, v)?,
            "to" => p.time.to_ms = time(k, v)?,
            "tid" if v.is_empty() => p.time.tid = None,
            "tid" => p.time.tid = Some(v.parse().map_err(|_| bad(k, v))?),
            "search" => {
                let s = decode(v).ok_or_else(|| bad(k, v))?;
                if s.len() > MAX_SEARCH {
                    return Err((400, format!("'search' is longer than {MAX_SEARCH} bytes")));
                }
                p.time.search = (!s.is_empty()).then_some(s);
            }
            "compare" => {
                p.time.compare = match v {
                    "" | "0" => false,
                    "1" => true,
                    _ => return Err(bad(k, v)),
                }
            }
            // Cache busters and the like.
            _ => {}
        }
    }
    p.time.pid = p.sel.pid;
    Ok(p)
}

/// A range's bounds, both given, start before end.
pub(crate) fn check_range(t: &TimeQuery) -> std::result::Result<(), Refusal> {
    match (t.from_ms, t.to_ms) {
        (Some(f), Some(to)) if f < to => Ok(()),
        (Some(_), Some(_)) => Err((400, "'from' must be before 'to'".into())),
        _ => Err((400, "a range needs 'from' and 'to' (milliseconds)".into())),
    }
}
