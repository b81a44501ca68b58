//! How user stacks are walked (`--unwind`) and whose runtime frames are
//! read (`--python`, `--java`): options every recording carries, kept
//! with the collector contract so that the layers below it (the
//! unwinder, the runtimes) and above it (tools, the command line) name
//! them without importing each other.

use std::str::FromStr;

use super::Runtime;

/// How user stacks are walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnwindMode {
    /// Unwind tables where an object has them, frame pointers elsewhere.
    #[default]
    Auto,
    /// Frame pointers only (the kernel's own walk, as bcc does).
    Fp,
    /// Unwind tables only: code without them ends the stack.
    Dwarf,
}

impl FromStr for UnwindMode {
    type Err = String;

    fn from_str(s: &str) -> Result<UnwindMode, String> {
        match s {
            "auto" => Ok(UnwindMode::Auto),
            "fp" => Ok(UnwindMode::Fp),
            "dwarf" => Ok(UnwindMode::Dwarf),
            _ => Err(format!("unknown unwind mode {s:?} (auto, fp or dwarf)")),
        }
    }
}

impl UnwindMode {
    /// The value of the BPF rodata `unwind_mode` (unwind_types.h).
    pub fn bpf_value(self) -> u32 {
        match self {
            UnwindMode::Fp => 0,
            UnwindMode::Auto => 1,
            UnwindMode::Dwarf => 2,
        }
    }

    /// The mode's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            UnwindMode::Auto => "auto",
            UnwindMode::Fp => "fp",
            UnwindMode::Dwarf => "dwarf",
        }
    }
}

/// The runtimes whose frames the walk reads: each on unless turned off
/// (`--python off`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Runtimes {
    off: u32,
}

impl Runtimes {
    fn bit(runtime: Runtime) -> u32 {
        1 << (runtime.frame_type() % 32)
    }

    /// These runtimes, with `runtime` on or off.
    pub fn with(mut self, runtime: Runtime, on: bool) -> Runtimes {
        if on {
            self.off &= !Self::bit(runtime);
        } else {
            self.off |= Self::bit(runtime);
        }
        self
    }

    /// Whether `runtime`'s frames are read.
    pub fn on(self, runtime: Runtime) -> bool {
        self.off & Self::bit(runtime) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!("auto".parse(), Ok(UnwindMode::Auto));
        assert_eq!("fp".parse(), Ok(UnwindMode::Fp));
        assert_eq!("dwarf".parse(), Ok(UnwindMode::Dwarf));
        assert!("lbr".parse::<UnwindMode>().is_err());
        assert_eq!(UnwindMode::default(), UnwindMode::Auto);
    }

    #[test]
    fn runtimes_turn_off_one_at_a_time() {
        let all = Runtimes::default();
        assert!(all.on(Runtime::Python) && all.on(Runtime::Java));
        let no_java = all.with(Runtime::Java, false);
        assert!(no_java.on(Runtime::Python) && !no_java.on(Runtime::Java));
        assert_eq!(no_java.with(Runtime::Java, true), all);
    }
}
