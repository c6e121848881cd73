//! The lab: machines as network namespaces with real firewalls and a real Docker engine, and probes.
