//! Genesis: the in-use and port checks, the node's port settings and the bundle.
