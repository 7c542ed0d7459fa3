//! Context management for Flynn: token budgets and estimation.
