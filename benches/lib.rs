//! Benchmarks of Troupe side by side with its peers; see `benches/local.rs`
//! and BENCHMARKS.md. This library is empty: the programs are bench targets
//! so that the peer frameworks stay dev-dependencies of this package.
