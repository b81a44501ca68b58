//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod agent;
pub mod bad_server;
pub mod bpf;
pub mod cgroup;
pub mod fixtures;
pub mod golden;
pub mod java;
pub mod nobody;
pub mod pprof;
pub mod python;
pub mod receivers;
pub mod rich;
pub mod ruby;
pub mod runtimes;
pub mod schema;
pub mod serve;
pub mod session;
pub mod stackcount;
pub mod timed;
pub mod webdriver;
