//! Tolerances keyed by op × lane × backend. Being written.
