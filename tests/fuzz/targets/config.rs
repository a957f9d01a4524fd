//! Fuzz target `config`: see [`strawberry_spoke_fuzz::harness::config`].
#![no_main]

strawberry_spoke_fuzz::fuzz_target!(strawberry_spoke_fuzz::harness::config);
