//! The Flynn agent loop: model calls, tool calls and events for one turn.
