//! The firewall engine: detects the found firewall, converges marked openings through it and keeps the guard.
