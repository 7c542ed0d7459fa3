//! Fake whatsapp API (in progress).
