//! Multi-process tests (real processes, watchdog, cleanup).
