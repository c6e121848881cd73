//! mesh-host's integration tests: the built binary, run as an operator would, against temporary
//! roots (and, for the firewall and lab tests, against real kernels in namespaces).

mod apply;
mod crash;
mod util;
