//! One line to standard error in one `write(2)`: [`say!`](crate::say!).
//!
//! `eprintln!` hands standard error (unbuffered) each piece of its format string and each
//! argument as a separate write. Processes that share a standard error (the demo and the
//! `echo` and aggregator it starts, a broker and the consumers it supervises) then interleave
//! mid-line, and a line a script or a test reads (`snapbus demo: emitted 18 of 18 events`)
//! arrives cut in two with another process's line inside it. `say!` formats the whole line
//! first and writes it at once: a line of up to `PIPE_BUF` (4 KiB) bytes reaches a pipe whole.
//! It goes through `eprint!` (one argument: one write), so a test harness that captures a
//! test's output captures it too.
//!
//! ```
//! snapbus_bus::say!("snapbus demo: emitted {} of {} events", 18, 18);
//! ```

use std::fmt;

/// `eprintln!`, formatted first and written to standard error in one piece (see the
/// [module](mod@crate::say)).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say::line(::std::format_args!($($arg)*))
    };
}

/// Writes `args` and a newline to standard error in one write (what [`say!`] calls).
pub fn line(args: fmt::Arguments<'_>) {
    let mut text = fmt::format(args);
    text.push('\n');
    // Never a panic (`eprint!` panics on a closed stderr): a message nobody reads is dropped.
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
}
