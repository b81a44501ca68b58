//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod bpf;
pub mod fixtures;
pub mod golden;
pub mod serve;
pub mod webdriver;
