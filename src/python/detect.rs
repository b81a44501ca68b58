//! Finding CPython in a process (being written).
