//! mesh-host's integration tests: the built binary, run as an operator would, against temporary
//! roots (and, for the firewall and lab tests, against real kernels in namespaces).

mod apply;
mod architecture;
mod bed;
mod beneath;
mod boot_bed;
mod bounds;
mod containers;
mod corpus;
mod crash;
mod deadlines;
mod digests;
mod firewall_lab;
mod genesis_lab;
mod integrity;
mod interrupt;
mod inventory_lab;
mod launcher;
mod link;
mod logs;
mod manpages;
mod one_host;
mod output;
mod package_files;
mod packages;
mod preview;
mod prompt;
mod recover;
mod refused_beforehand;
mod release_local;
mod rouse;
mod services;
mod tarball;
mod under_root;
mod upgrade;
mod util;
