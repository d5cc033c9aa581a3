//! A one-line progress bar on stderr. On a terminal it redraws in place; piped (CI logs, files)
//! it prints a line only when the bar itself moves (at most one per 1/24 of the work), so logs
//! stay readable.

use std::io::{IsTerminal, Write};

pub struct ProgressLine {
    terminal: bool,
    last: String,
    /// Filled cells of the last line printed when not on a terminal.
    last_filled: Option<usize>,
    width: usize,
}

impl ProgressLine {
    pub fn new() -> Self {
        ProgressLine {
            terminal: std::io::stderr().is_terminal(),
            last: String::new(),
            last_filled: None,
            width: 24,
        }
    }

    /// Draws `done / total` as a bar followed by `message`.
    pub fn draw(&mut self, done: u64, total: u64, message: &str) {
        let total = total.max(1);
        let filled = ((done.min(total) as usize) * self.width) / total as usize;
        let line = format!(
            "[{}{}] {done}/{total} {message}",
            "#".repeat(filled),
            "-".repeat(self.width - filled)
        );
        if line == self.last {
            return;
        }
        if !self.terminal {
            if self.last_filled == Some(filled) {
                return;
            }
            self.last_filled = Some(filled);
        }
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
        self.last = line;
    }

    /// Prints `line` above the bar (the bar is redrawn by the next `draw`).
    pub fn println(&mut self, line: &str) {
        let mut err = std::io::stderr().lock();
        if self.terminal && !self.last.is_empty() {
            let _ = write!(err, "\r\x1b[2K");
            self.last.clear();
        }
        let _ = writeln!(err, "{line}");
    }

    pub fn finish(&mut self) {
        if self.terminal && !self.last.is_empty() {
            let _ = writeln!(std::io::stderr());
        }
        self.last.clear();
        self.last_filled = None;
    }
}

impl Default for ProgressLine {
    fn default() -> Self {
        Self::new()
    }
}
