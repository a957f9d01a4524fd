//! Fuzz target `sse`: see [`strawberry_spoke_fuzz::harness::sse`].
#![no_main]

strawberry_spoke_fuzz::fuzz_target!(strawberry_spoke_fuzz::harness::sse);
