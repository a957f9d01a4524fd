//! Fuzz target `mqtt_payload`: see [`strawberry_spoke_fuzz::harness::mqtt_payload`].
#![no_main]

strawberry_spoke_fuzz::fuzz_target!(strawberry_spoke_fuzz::harness::mqtt_payload);
