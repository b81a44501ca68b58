//! Code objects read from a live process (being written).
