//! Unwinding user stacks without frame pointers (`--unwind`): unwind
//! tables built from each object's call-frame information ([`table`]),
//! cached on disk ([`cache`]), and loaded into the BPF maps the in-kernel
//! unwinder (bpf/unwind.h) walks stacks with.

pub mod cache;
pub mod elf;
pub mod table;
