//! Fuzz target `skill_file`: see [`strawberry_spoke_fuzz::harness::skill_file`].
#![no_main]

strawberry_spoke_fuzz::fuzz_target!(strawberry_spoke_fuzz::harness::skill_file);
