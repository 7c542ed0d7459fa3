//! whatsapp adapter (in progress).
