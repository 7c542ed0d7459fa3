//! Test-only fake servers for the external APIs Flynn talks to.
