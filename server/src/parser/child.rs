//! The parser child: `docflow parse-child`, started by a worker's
//! [`ParserPool`](super::ParserPool). It limits itself with `setrlimit`
//! before it reads anything, then answers one request after another on its
//! standard input and output until the input closes.
//!
//! A document that needs more memory than allowed makes an allocation fail
//! (the process aborts), one that loops runs into `RLIMIT_CPU` (SIGXCPU), one
//! that nests too deeply overflows the stack: each kills only this process,
//! and the worker tells the user which it was.

use std::{
    io::{Read, Write},
    time::{Duration, Instant},
};

use nix::sys::resource::{getrusage, setrlimit, Resource, UsageWho, RLIM_INFINITY};

use super::{
    extract::{self, Progress},
    ocr::Ocr,
    wire,
};

/// At least this long between two progress frames, unless a twentieth of
/// the pages was done meanwhile.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Documents with fewer pages report progress only by time.
const PROGRESS_PAGES: u32 = 20;

/// Runs the child until its input closes. `memory` is the address-space
/// limit in bytes; `ocr` says how pages without text are recognised.
pub fn run(memory: u64, ocr: Ocr) -> anyhow::Result<()> {
    // No core files, no files written, few descriptors: a parser needs
    // none of them, and a hostile document gets nothing from them.
    setrlimit(Resource::RLIMIT_CORE, 0, 0)?;
    setrlimit(Resource::RLIMIT_FSIZE, 0, 0)?;
    setrlimit(Resource::RLIMIT_NOFILE, 16, 16)?;
    setrlimit(Resource::RLIMIT_AS, memory, memory)?;
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    loop {
        let mut head = [0u8; wire::REQUEST_HEAD];
        match input.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let req = wire::Request::decode(&head)?;
        arm_cpu_limit(req.cpu_seconds)?;
        let mut body = vec![0u8; usize::try_from(req.len)?];
        input.read_exact(&mut body)?;
        let mut reporter = Reporter::new();
        let result = extract::read(req.kind, &body, req.caps, &ocr, &mut |p| {
            if reporter.due(p) {
                // A worker that stopped reading finds out from the response.
                let _ = output
                    .write_all(&wire::encode_progress(p))
                    .and_then(|()| output.flush());
            }
        });
        drop(body);
        output.write_all(&wire::encode_response(&result))?;
        output.flush()?;
    }
}

/// Decides which progress reports are sent: a few per long document (every
/// twentieth of its pages), and one a second at most otherwise (the pages of
/// a scan, each recognised in seconds).
struct Reporter {
    last: Instant,
    last_done: u32,
}

impl Reporter {
    fn new() -> Self {
        Self {
            last: Instant::now(),
            last_done: 0,
        }
    }

    fn due(&mut self, p: Progress) -> bool {
        if p.done >= p.total {
            return false;
        }
        let step = (p.total / PROGRESS_PAGES).max(1);
        let by_pages = p.total >= PROGRESS_PAGES && p.done >= self.last_done + step;
        if by_pages || self.last.elapsed() >= PROGRESS_EVERY {
            self.last = Instant::now();
            self.last_done = p.done;
            return true;
        }
        false
    }
}

/// Lets this request use `seconds` more CPU time than the child has used so
/// far: the soft limit (SIGXCPU) is re-armed before every document.
fn arm_cpu_limit(seconds: u32) -> anyhow::Result<()> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)?;
    let used = usage.user_time().tv_sec() + usage.system_time().tv_sec();
    let soft = u64::try_from(used)? + u64::from(seconds) + 1;
    setrlimit(Resource::RLIMIT_CPU, soft, RLIM_INFINITY)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_document_reports_every_twentieth_of_its_pages() {
        let mut r = Reporter::new();
        let sent: Vec<u32> = (1..=300)
            .filter(|done| {
                r.due(Progress {
                    done: *done,
                    total: 300,
                })
            })
            .collect();
        assert_eq!(sent.len(), 19, "{sent:?}");
        assert_eq!(sent[0], 15);
        // A short one, quickly read, says nothing until it is done.
        let mut r = Reporter::new();
        assert!((1..=5).all(|done| !r.due(Progress { done, total: 5 })));
    }
}
