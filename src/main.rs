//! mesh-host binary
fn main() {}
