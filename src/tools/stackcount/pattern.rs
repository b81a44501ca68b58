//! bcc stackcount's event patterns: which kind of probe a pattern names,
//! in which binary, and the expression its names must match.
//!
//! `func` and `p::func` are kernel functions, `lib:func` and `p:lib:func`
//! user functions, `t:category:event` tracepoints and `u:lib:probe` USDT
//! probes. Without `-r`, `*` matches any run of characters and everything
//! else matches itself; with `-r` the expression is a regular expression
//! anchored at the start of the name, as Python's `re.match` is in bcc.

use regex_lite::Regex;

use crate::error::{Error, Result};

/// What kind of probe a pattern attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    /// Kernel functions (kprobes or fentry).
    Kernel,
    /// User functions (uprobes).
    User,
    /// Kernel tracepoints, named `category:event`.
    Tracepoint,
    /// USDT (SDT) probes.
    Usdt,
}

impl ProbeKind {
    /// True when the probe fires in the kernel (no user binary involved).
    pub fn is_kernel(self) -> bool {
        matches!(self, ProbeKind::Kernel | ProbeKind::Tracepoint)
    }

    /// What the probe kind's matches are called, in messages.
    pub fn noun(self) -> &'static str {
        match self {
            ProbeKind::Kernel => "kernel functions",
            ProbeKind::User => "user functions",
            ProbeKind::Tracepoint => "tracepoints",
            ProbeKind::Usdt => "USDT probes",
        }
    }
}

/// A parsed pattern.
#[derive(Clone, Debug)]
pub struct Pattern {
    /// The pattern as the user gave it.
    pub text: String,
    pub kind: ProbeKind,
    /// The library or binary for user functions and USDT probes, as given
    /// (empty: the binary of `-p PID`).
    pub library: String,
    /// The name part (`category:event` for tracepoints).
    pub name: String,
    matcher: Regex,
}

impl Pattern {
    /// Parses `text`; `regex` is bcc's `-r`.
    pub fn parse(text: &str, regex: bool) -> Result<Self> {
        let bad = |reason: String| Error::BadPattern {
            pattern: text.to_string(),
            reason,
        };
        let parts: Vec<&str> = text.split(':').collect();
        let (kind, library, name) = match parts[..] {
            [name] => (ProbeKind::Kernel, "", name.to_string()),
            [lib, name] | ["p", lib, name] => {
                let kind = if lib.is_empty() {
                    ProbeKind::Kernel
                } else {
                    ProbeKind::User
                };
                (kind, lib, name.to_string())
            }
            ["t", cat, event] => (ProbeKind::Tracepoint, "", format!("{cat}:{event}")),
            ["u", lib, name] => (ProbeKind::Usdt, lib, name.to_string()),
            [kind, _, _] => {
                return Err(bad(format!(
                    "type must be 'p', 't', or 'u', but got '{kind}'"
                )))
            }
            _ => {
                return Err(bad(
                    "too many ':'-separated components (use func, lib:func, p:lib:func, t:category:event or u:lib:probe)".into(),
                ))
            }
        };
        if name.is_empty() || name.ends_with(':') || name.starts_with(':') {
            return Err(bad("the name to match is empty".into()));
        }
        let expr = if regex {
            format!("^(?:{name})")
        } else {
            glob_to_regex(&name)
        };
        let matcher = Regex::new(&expr).map_err(|e| {
            bad(format!(
                "not a valid regular expression: {}",
                e.to_string().lines().last().unwrap_or("")
            ))
        })?;
        Ok(Pattern {
            text: text.to_string(),
            kind,
            library: library.to_string(),
            name,
            matcher,
        })
    }

    /// True when `name` is matched.
    pub fn matches(&self, name: &str) -> bool {
        self.matcher.is_match(name)
    }

    /// The error for a pattern that matched nothing.
    pub fn no_match(&self, hint: impl Into<String>) -> Error {
        Error::NoMatch {
            pattern: self.text.clone(),
            what: self.kind.noun(),
            hint: hint.into(),
        }
    }
}

/// A glob with `*` wildcards as an anchored regular expression.
fn glob_to_regex(glob: &str) -> String {
    let parts: Vec<String> = glob.split('*').map(regex_lite::escape).collect();
    format!("^{}$", parts.join(".*"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Pattern {
        Pattern::parse(text, false).expect("valid pattern")
    }

    #[test]
    fn kinds_follow_bcc() {
        let cases = [
            ("submit_bio", ProbeKind::Kernel, "", "submit_bio"),
            ("p::submit_bio", ProbeKind::Kernel, "", "submit_bio"),
            ("c:malloc", ProbeKind::User, "c", "malloc"),
            (
                "p:/bin/bash:readline",
                ProbeKind::User,
                "/bin/bash",
                "readline",
            ),
            (
                "t:sched:sched_switch",
                ProbeKind::Tracepoint,
                "",
                "sched:sched_switch",
            ),
            (
                "u:/usr/bin/node:gc*",
                ProbeKind::Usdt,
                "/usr/bin/node",
                "gc*",
            ),
        ];
        for (text, kind, lib, name) in cases {
            let pat = p(text);
            assert_eq!(
                (pat.kind, pat.library.as_str(), pat.name.as_str()),
                (kind, lib, name),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_patterns_say_why() {
        for (text, needle) in [
            ("x:a:b", "type must be 'p', 't', or 'u'"),
            ("a:b:c:d", "too many"),
            ("t:sched:", "empty"),
            ("", "empty"),
        ] {
            let err = Pattern::parse(text, false).expect_err(text).to_string();
            assert!(err.contains(needle), "{text}: {err}");
            assert!(err.contains(&format!("\"{text}\"")), "{err}");
        }
        let err = Pattern::parse("tcp_(", true).unwrap_err().to_string();
        assert!(err.contains("regular expression"), "{err}");
    }

    #[test]
    fn globs_match_whole_names_only() {
        let pat = p("tcp_send*");
        assert!(pat.matches("tcp_sendmsg"));
        assert!(pat.matches("tcp_send"));
        assert!(!pat.matches("__tcp_sendmsg"));
        // Other characters are literal: '.' is not "any character".
        let pat = p("a.b");
        assert!(pat.matches("a.b") && !pat.matches("axb"));
        let pat = p("t:sched:sched_*");
        assert!(pat.matches("sched:sched_switch") && !pat.matches("irq:sched_x"));
    }

    #[test]
    fn regexes_are_anchored_at_the_start() {
        let pat = Pattern::parse("^tcp_send.*", true).unwrap();
        assert!(pat.matches("tcp_sendmsg") && !pat.matches("__tcp_sendmsg"));
        // As re.match: anchored at the start only.
        let pat = Pattern::parse("leaf", true).unwrap();
        assert!(pat.matches("leaf_fn") && !pat.matches("a_leaf"));
        let pat = Pattern::parse("caller_(a|b)$", true).unwrap();
        assert!(pat.matches("caller_a") && !pat.matches("caller_c"));
    }
}
