//! Fuzz target `wav`: see [`strawberry_spoke_fuzz::harness::wav`].
#![no_main]

strawberry_spoke_fuzz::fuzz_target!(strawberry_spoke_fuzz::harness::wav);
