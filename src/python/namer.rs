//! Naming Python frames (being written).
