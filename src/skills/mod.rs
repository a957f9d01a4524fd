//! Skills: `.rhai` files a hobbyist drops into a folder (DESIGN.md 2.2).

pub mod deadline;
pub mod host_api;
pub mod storage;
