//! Troupe cluster extension: membership (gossip, vector clocks, phi accrual
//! failure detection, leader actions, split brain resolver), cluster
//! singleton, distributed data, bootstrap and management HTTP.
//!
//! Nothing is implemented here yet; the crate exists so that the workspace
//! has its final shape. It depends only on `troupe-core`.
