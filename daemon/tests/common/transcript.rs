//! Executed documentation: the `console` blocks of a Markdown page run as tests.
//!
//! A page is read top to bottom, in one working directory, against one daemon the test
//! started there:
//!
//! - a fenced block whose info string holds `file=NAME` (e.g. ```` ```python file=agent.py ````)
//!   is written to `NAME` in the working directory, so a later command can run it;
//! - a ```` ```console ```` block is a transcript: each `$ ` line is a command (a line ending in
//!   `\`, or inside an open single quote, continues on the next), run by `sh -c` on a pseudo-terminal exactly as a person at a
//!   terminal would see it (stdout and stderr interleaved; `[y/N]` prompts are answered `y`,
//!   and the typed `y` shows). The lines up to the next `$ ` line are its expected output.
//!   `$ export NAME=VALUE` sets `NAME` for the rest of the page, as in one terminal;
//! - ```` ```console requires=node ```` blocks run only where Node is available (see
//!   `clients::node_modules`);
//! - every other block is prose and is not run.
//!
//! Expected output matches with two wildcards: `…` inside a line stands for any text, and a
//! line that is only `…` stands for any number of lines. A command must exit 0 unless its
//! output ends with a line `[exit N]`. Before matching, the daemon's real address is written
//! as `127.0.0.1:7644` (and commands get the real address wherever they say `127.0.0.1:7644`),
//! `\r\n` becomes `\n` and terminal colour codes are removed.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// One block of a page.
#[derive(Debug)]
pub struct Block {
    /// 1-based line of the opening fence.
    pub line: usize,
    pub info: String,
    pub body: Vec<String>,
}

/// The text of a page of this repository, by its path from the repository's root
/// (`docs/operators.md`).
pub fn page(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fenced blocks of a Markdown text. A block indented under a list item loses its fence's
/// indentation from every line, as Markdown renders it.
pub fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(Block, usize)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let text = line.trim_start();
        let fence = text.starts_with("```");
        match (&mut open, fence) {
            (None, true) => {
                let block = Block {
                    line: i + 1,
                    info: text.trim_start_matches('`').trim().to_owned(),
                    body: Vec::new(),
                };
                open = Some((block, line.len() - text.len()));
            }
            (Some(_), true) => out.push(open.take().unwrap().0),
            (Some((b, indent)), false) => {
                let cut = line.len() - line.trim_start_matches(' ').len();
                b.body.push(line[cut.min(*indent)..].to_owned());
            }
            (None, false) => {}
        }
    }
    out
}

/// The text of `markdown` under the heading line `title` (`## Name`), up to the next heading
/// of its level or above; headings inside fenced blocks do not count. Panics when the page has
/// no such heading: a test reading a section its page lost must say so.
pub fn section<'a>(markdown: &'a str, title: &str) -> &'a str {
    let level = title.bytes().take_while(|&b| b == b'#').count();
    let mut start = None;
    let mut fenced = false;
    let mut at = 0;
    for line in markdown.split_inclusive('\n') {
        let text = line.trim_end_matches('\n');
        if text.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            let hashes = text.bytes().take_while(|&b| b == b'#').count();
            let heading = hashes > 0 && text[hashes..].starts_with(' ');
            match start {
                None if text == title => start = Some(at),
                Some(from) if heading && hashes <= level => return &markdown[from..at],
                _ => {}
            }
        }
        at += line.len();
    }
    match start {
        Some(from) => &markdown[from..],
        None => panic!("the page has no heading {title:?}"),
    }
}

/// The code spans of a Markdown table cell: `` `a` `` and, for text holding a backtick,
/// ``` `` a `b` `` ```.
pub fn code_spans(cell: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut rest = cell;
    while let Some(at) = rest.find('`') {
        let ticks = rest[at..].len() - rest[at..].trim_start_matches('`').len();
        let fence = "`".repeat(ticks);
        let body = &rest[at + ticks..];
        let Some(end) = body.find(&fence) else { break };
        spans.push(body[..end].trim().to_owned());
        rest = &body[end + ticks..];
    }
    spans
}

/// One command of a transcript and what it should print.
#[derive(Debug)]
pub struct Step {
    pub line: usize,
    pub command: String,
    pub expected: Vec<String>,
    pub exit: i32,
}

pub fn steps(block: &Block) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut continuing = false;
    for (i, line) in block.body.iter().enumerate() {
        if continuing {
            let step = out.last_mut().unwrap();
            step.command.push('\n');
            step.command.push_str(line);
            continuing = continues(&step.command);
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            continuing = continues(cmd);
            out.push(Step {
                line: block.line + 1 + i,
                command: cmd.to_owned(),
                expected: Vec::new(),
                exit: 0,
            });
        } else if let Some(step) = out.last_mut() {
            step.expected.push(line.clone());
        }
    }
    for step in &mut out {
        while step.expected.last().is_some_and(|l| l.trim().is_empty()) {
            step.expected.pop();
        }
        if let Some(code) = step
            .expected
            .last()
            .and_then(|l| l.strip_prefix("[exit "))
            .and_then(|l| l.strip_suffix(']'))
            .and_then(|n| n.parse().ok())
        {
            step.exit = code;
            step.expected.pop();
        }
    }
    out
}

/// A command goes on after a trailing `\` or inside an open single quote.
fn continues(command: &str) -> bool {
    command.ends_with('\\') || command.matches('\'').count() % 2 == 1
}

/// `…` in `pattern` matches any text of `line`.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whole-output match, with `…` lines standing for any number of lines.
pub fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((p, rest)) if p.trim() == "…" => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((p, rest)) => {
            !actual.is_empty() && line_matches(p, actual[0]) && matches(rest, &actual[1..])
        }
    }
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Run `command` with `sh -c` in `cwd` on a new pseudo-terminal that is its controlling
/// terminal and its stdin, stdout and stderr; answer `[y/N] ` prompts with `y`. Returns the
/// exit code and everything the terminal showed.
pub fn run_on_terminal(command: &str, cwd: &Path, env: &[(String, String)]) -> (i32, String) {
    let (mut master, slave) = open_pty();
    let stdio = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(stdio(&slave))
        .stdout(stdio(&slave))
        .stderr(stdio(&slave));
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: only async-signal-safe calls between fork and exec: a new session, then the
    // terminal on stdin (fd 0) becomes its controlling terminal.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    // The terminal's last holders must be the command's processes, so that reading the
    // master ends when they do: drop our copies (the command keeps its stdio handles).
    drop(cmd);
    drop(slave);
    let mut shown = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                shown.extend_from_slice(&buf[..n]);
                if shown.ends_with(b"[y/N] ") {
                    master.write_all(b"y\n").unwrap();
                }
            }
            // EIO: every process holding the terminal has closed it.
            Err(_) => break,
        }
    }
    let status = child.wait().unwrap();
    let text = String::from_utf8_lossy(&shown).replace("\r\n", "\n");
    (status.code().unwrap_or(-1), strip_ansi(&text))
}

fn open_pty() -> (std::fs::File, OwnedFd) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the integers we pass; the name, termios
    // and window-size arguments may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and are owned by nothing else.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

/// The wildcard rules, checked.
pub fn self_test() {
    {
        assert!(line_matches("a…c", "abbbc"));
        assert!(line_matches("a…c", "ac"));
        assert!(!line_matches("a…c", "ab"));
        assert!(line_matches("…", "anything"));
        assert!(line_matches("x…y…z", "x1y2z"));
        assert!(!line_matches("x…y…z", "x1z2y"));
        let e = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(matches(&e(&["a", "…", "d"]), &["a", "b", "c", "d"]));
        assert!(matches(&e(&["a", "…", "d"]), &["a", "d"]));
        assert!(!matches(&e(&["a", "…", "d"]), &["a", "b"]));
        assert!(!matches(&e(&["a"]), &["a", "b"]));
    }
}
