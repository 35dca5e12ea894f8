//! Writing to standard output: a reader that has gone ends the demo quietly.

use std::io::Write;

/// Writes to standard output. A reader that has gone (`pooler-demo --plain | head`) ends the
/// demo quietly, as command-line tools do, rather than with a panic on the closed pipe.
pub(crate) fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

/// `println!` through [`say`].
macro_rules! sayln {
    ($($arg:tt)*) => {{
        let mut line = format!($($arg)*);
        line.push('\n');
        $crate::say::say(&line);
    }};
}
