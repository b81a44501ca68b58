//! Lines for the person running flare (warnings, notes, "wrote FILE"),
//! from anywhere in the library and from any thread, handed to one place.
//!
//! The library never writes to stderr itself: it calls [`note`], and the
//! program that embeds it says where lines go ([`set_handler`]; the `flare`
//! binary prints them on stderr). Until a handler is set, lines wait in a
//! bounded queue that [`take_pending`] empties (tests read it), so nothing
//! said before start-up is lost and nothing grows without end.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

type Handler = Box<dyn Fn(&str) + Send + Sync>;

static HANDLER: RwLock<Option<Handler>> = RwLock::new(None);
static PENDING: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// Lines kept while no handler is set; older ones go first.
const MAX_PENDING: usize = 256;

fn pending() -> MutexGuard<'static, VecDeque<String>> {
    PENDING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hands `line` to the handler, or keeps it until one is set.
pub fn note(line: impl AsRef<str>) {
    let line = line.as_ref();
    let handler = HANDLER.read().unwrap_or_else(PoisonError::into_inner);
    match handler.as_ref() {
        Some(h) => h(line),
        None => {
            let mut q = pending();
            if q.len() == MAX_PENDING {
                q.pop_front();
            }
            q.push_back(line.to_string());
        }
    }
}

/// Sends every line from now on to `handler`, after the lines kept so far.
pub fn set_handler(handler: impl Fn(&str) + Send + Sync + 'static) {
    let mut slot = HANDLER.write().unwrap_or_else(PoisonError::into_inner);
    for line in pending().drain(..) {
        handler(&line);
    }
    *slot = Some(Box::new(handler));
}

/// The lines kept while no handler was set, oldest first.
pub fn take_pending() -> Vec<String> {
    pending().drain(..).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_wait_bounded_until_taken() {
        // Other tests may add lines meanwhile: ours are the newest, in
        // order, and no more than the bound is kept.
        let n = MAX_PENDING + 10;
        for i in 0..n {
            note(format!("pending {i}"));
        }
        let kept = take_pending();
        assert!(kept.len() <= MAX_PENDING, "{}", kept.len());
        let ours: Vec<usize> = kept
            .iter()
            .filter_map(|l| l.strip_prefix("pending ")?.parse().ok())
            .collect();
        assert_eq!(ours.last(), Some(&(n - 1)));
        assert!(ours.windows(2).all(|w| w[1] == w[0] + 1));
        assert!(ours.len() >= MAX_PENDING / 2, "{}", ours.len());
    }
}
