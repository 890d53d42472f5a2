//! Shared helpers of the Troupe examples.
