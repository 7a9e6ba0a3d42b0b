//! The parser child: `docflow parse-child`, started by a worker's
//! [`ParserPool`](super::ParserPool). It limits itself with `setrlimit`
//! before it reads anything, then answers one request after another on its
//! standard input and output until the input closes.
//!
//! A document that needs more memory than allowed makes an allocation fail
//! (the process aborts), one that loops runs into `RLIMIT_CPU` (SIGXCPU), one
//! that nests too deeply overflows the stack: each kills only this process,
//! and the worker tells the user which it was.

use std::io::{Read, Write};

use nix::sys::resource::{getrusage, setrlimit, Resource, UsageWho, RLIM_INFINITY};

use super::{extract, wire};

/// Runs the child until its input closes. `memory` is the address-space
/// limit in bytes.
pub fn run(memory: u64) -> anyhow::Result<()> {
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
        let result = extract::extract(req.kind, &body, req.caps);
        drop(body);
        output.write_all(&wire::encode_response(&result))?;
        output.flush()?;
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
