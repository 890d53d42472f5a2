//! Helpers shared by the cluster crate's integration tests.

pub mod dns_server;
