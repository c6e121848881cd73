//! mesh-host core
