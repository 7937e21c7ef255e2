//! Child processes that sessiond starts on a session's behalf (agent CLIs, commands a model runs).
//!
//! A child may start children of its own (a shell, a build, a background server), and an
//! interrupt or a timeout must stop all of them, not just the first. So every child is started as
//! the leader of its own process group and is stopped by signalling the group: SIGTERM, a short
//! grace, then SIGKILL. Whatever is left in the group when the leader exits is ended too, so
//! nothing a turn started outlives it, and nothing can hold the output pipe open forever.
//!
//! The groups a process has running are recorded on disk (see [`track_in`]), so that when
//! sessiond itself is killed (`kill -9`, a crash, a power cut of the service manager), the next
//! start stops what the previous one left behind instead of letting it work unsupervised.
//!
//! Output is bounded: stdout arrives line by line with a per-line cap (a longer line is reported by
//! its length, never buffered whole), through a bounded channel (a child that writes faster than
//! sessiond reads waits on its pipe), and stderr is kept only as its last few KiB, which is what an
//! error message needs.
//!
//! ```text
//! let mut child = Process::spawn(&ProcessSpec::new("claude", "/data/drive/ws/project"))?;
//! while let Some(out) = child.next().await {
//!     match out {
//!         Output::Line(line) => ...,
//!         Output::LineTooLong(bytes) => ...,
//!         Output::Exited(status) => ...,
//!     }
//! }
//! ```

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::error::{Error, Result};

/// The default cap on one stdout line.
pub const DEFAULT_MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// The default amount of stderr kept (its end).
pub const DEFAULT_STDERR_TAIL_BYTES: usize = 4 * 1024;
/// The default time between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_millis(1500);

/// How long the remaining output is read after the leader exited and its group was ended. A
/// process that left the group (`setsid`) could hold stdout open forever; it is not waited for.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);
/// Lines buffered between the reader task and the consumer.
const LINE_CHANNEL: usize = 256;

/// The folder where running process groups are recorded (one file per group, named by its id,
/// holding the leader's start time so that a reused id is never mistaken for it).
static REGISTRY: OnceLock<PathBuf> = OnceLock::new();

/// Records every child started from now on in `dir`. Call once, after [`stop_orphans`].
pub fn track_in(dir: PathBuf) -> std::io::Result<()> {
    std::fs::create_dir_all(&dir)?;
    let _ = REGISTRY.set(dir);
    Ok(())
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`), which with the pid names
/// one process for good.
fn start_time(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: fields resume after the
    // last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19).map(str::to_owned)
}

fn record(pgid: i32) {
    if let (Some(dir), Some(started)) = (REGISTRY.get(), start_time(pgid)) {
        let _ = std::fs::write(dir.join(pgid.to_string()), started);
    }
}

fn forget(pgid: i32) {
    if let Some(dir) = REGISTRY.get() {
        let _ = std::fs::remove_file(dir.join(pgid.to_string()));
    }
}

/// Kills the process groups recorded in `dir` by an earlier sessiond whose leaders still run, and
/// clears the records. Returns how many groups were stopped.
pub fn stop_orphans(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut stopped = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let recorded = std::fs::read_to_string(&path).unwrap_or_default();
        let pgid = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
            .filter(|p| *p > 1);
        if let Some(pgid) = pgid
            && start_time(pgid).is_some_and(|t| t == recorded.trim())
        {
            // SAFETY: kill(2) on a process group; the start time proved it is the one recorded.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
            stopped += 1;
        }
        let _ = std::fs::remove_file(&path);
    }
    stopped
}

/// What to start.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// The program: a path, or a name looked up on the server's `PATH`.
    pub program: String,
    pub args: Vec<String>,
    /// Variables added to (or replacing in) the server's environment, which the child inherits.
    pub env: BTreeMap<String, String>,
    /// The working directory; it must exist.
    pub cwd: PathBuf,
    /// Written to the child's stdin, which is then closed; `None` gives the child an empty stdin.
    pub stdin: Option<String>,
    pub max_line_bytes: usize,
    pub stderr_tail_bytes: usize,
    pub kill_grace: Duration,
}

impl ProcessSpec {
    pub fn new(program: impl Into<String>, cwd: impl Into<PathBuf>) -> ProcessSpec {
        ProcessSpec {
            program: program.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: cwd.into(),
            stdin: None,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            stderr_tail_bytes: DEFAULT_STDERR_TAIL_BYTES,
            kill_grace: DEFAULT_KILL_GRACE,
        }
    }
}

/// One item of a child's output, in order; `Exited` comes last, once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A stdout line without its line ending (invalid UTF-8 replaced).
    Line(String),
    /// A stdout line longer than the cap, skipped; its length in bytes.
    LineTooLong(usize),
    /// The child exited (after its stdout was read to the end or the drain time ran out).
    Exited(ExitStatus),
}

/// A running child and its process group.
pub struct Process {
    child: tokio::process::Child,
    /// The group id (the leader's pid).
    pgid: Option<i32>,
    lines: mpsc::Receiver<Output>,
    stdout_done: bool,
    stderr: Arc<Mutex<Tail>>,
    status: Option<ExitStatus>,
    reported: bool,
    kill_grace: Duration,
}

impl Process {
    /// Starts `spec.program` as the leader of a new process group. Fails when the program cannot be
    /// started (not found, not executable, missing working directory).
    pub fn spawn(spec: &ProcessSpec) -> Result<Process> {
        let mut cmd = tokio::process::Command::new(&spec.program);
        cmd.args(&spec.args)
            .envs(&spec.env)
            .current_dir(&spec.cwd)
            .process_group(0)
            .stdin(if spec.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::Internal(format!("cannot start `{}`: {e}", spec.program)))?;
        let pgid = child.id().and_then(|id| i32::try_from(id).ok());
        if let Some(pgid) = pgid {
            record(pgid);
        }

        if let (Some(text), Some(mut stdin)) = (spec.stdin.clone(), child.stdin.take()) {
            tokio::spawn(async move {
                // A child that exits without reading its input is not an error here; its exit
                // status says what happened.
                let _ = stdin.write_all(text.as_bytes()).await;
                let _ = stdin.shutdown().await;
            });
        }

        let (tx, lines) = mpsc::channel(LINE_CHANNEL);
        match child.stdout.take() {
            Some(stdout) => {
                tokio::spawn(read_lines(stdout, spec.max_line_bytes.max(1), tx));
            }
            None => drop(tx),
        }
        let stderr = Arc::new(Mutex::new(Tail::new(spec.stderr_tail_bytes)));
        if let Some(err) = child.stderr.take() {
            tokio::spawn(read_tail(err, Arc::clone(&stderr)));
        }
        Ok(Process {
            child,
            pgid,
            lines,
            stdout_done: false,
            stderr,
            status: None,
            reported: false,
            kill_grace: spec.kill_grace,
        })
    }

    /// The leader's pid, which is also the process group id (`None` once it has been reaped).
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// The next stdout line, or the exit status once the child has exited and its output has been
    /// read; `None` after that. When the leader exits, the rest of its group is killed.
    ///
    /// Cancel-safe: dropping the future loses nothing.
    pub async fn next(&mut self) -> Option<Output> {
        loop {
            if self.status.is_none() {
                if self.stdout_done {
                    let status = self.child.wait().await;
                    self.exited(status);
                    continue;
                }
                tokio::select! {
                    line = self.lines.recv() => match line {
                        Some(line) => return Some(line),
                        None => self.stdout_done = true,
                    },
                    status = self.child.wait() => self.exited(status),
                }
            } else {
                if !self.stdout_done {
                    match tokio::time::timeout(DRAIN_AFTER_EXIT, self.lines.recv()).await {
                        Ok(Some(line)) => return Some(line),
                        Ok(None) | Err(_) => self.stdout_done = true,
                    }
                    continue;
                }
                if self.reported {
                    return None;
                }
                self.reported = true;
                return self.status.map(Output::Exited);
            }
        }
    }

    fn exited(&mut self, status: std::io::Result<ExitStatus>) {
        // Whatever the leader left running in its group goes with it.
        self.signal_group(libc::SIGKILL);
        self.forget();
        self.status = Some(status.unwrap_or_else(|_| ExitStatus::from_raw(-1)));
    }

    /// Waits for the child to exit (its output is discarded) and returns its status.
    pub async fn wait(&mut self) -> ExitStatus {
        loop {
            match self.next().await {
                Some(Output::Exited(status)) => return status,
                Some(_) => {}
                None => return self.status.unwrap_or_else(|| ExitStatus::from_raw(-1)),
            }
        }
    }

    /// The end of what the child wrote to stderr so far (at most the spec's tail size; invalid
    /// UTF-8 replaced).
    pub fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .map(|t| t.text())
            .unwrap_or_else(|p| p.into_inner().text())
    }

    /// Stops the whole process group: SIGTERM, then SIGKILL once the leader has exited or the
    /// grace period has passed (members that ignore SIGTERM do not survive it). Returns the
    /// leader's exit status.
    pub async fn kill_group(&mut self) -> ExitStatus {
        if let Some(status) = self.status {
            self.signal_group(libc::SIGKILL);
            return status;
        }
        self.signal_group(libc::SIGTERM);
        let status = match tokio::time::timeout(self.kill_grace, self.child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                self.signal_group(libc::SIGKILL);
                self.child.wait().await
            }
        };
        self.signal_group(libc::SIGKILL);
        self.forget();
        let status = status.unwrap_or_else(|_| ExitStatus::from_raw(-1));
        self.status = Some(status);
        status
    }

    fn forget(&self) {
        if let Some(pgid) = self.pgid {
            forget(pgid);
        }
    }

    fn signal_group(&self, signal: i32) {
        if let Some(pgid) = self.pgid.filter(|p| *p > 0) {
            // SAFETY: kill(2) with a negative pid signals the process group; no memory is shared.
            // A group that no longer exists answers ESRCH, which is fine.
            unsafe {
                libc::kill(-pgid, signal);
            }
        }
    }
}

impl Drop for Process {
    /// A child is never left behind: a consumer that stops early (an aborted turn) kills the group.
    fn drop(&mut self) {
        if self.status.is_none() {
            self.signal_group(libc::SIGKILL);
            self.forget();
        }
    }
}

/// A short human description of an exit status: `exit code 3`, `signal 9 (killed)`.
pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => {
            let name = match sig {
                libc::SIGKILL => " (killed)",
                libc::SIGTERM => " (terminated)",
                libc::SIGSEGV => " (segmentation fault)",
                libc::SIGABRT => " (aborted)",
                _ => "",
            };
            format!("signal {sig}{name}")
        }
        _ => "an unknown status".to_owned(),
    }
}

/// Reads lines of at most `max` bytes; longer ones are skipped and reported by length.
async fn read_lines(stdout: impl AsyncRead + Unpin, max: usize, tx: mpsc::Sender<Output>) {
    let mut reader = BufReader::new(stdout);
    let mut line: Vec<u8> = Vec::new();
    let mut len = 0usize;
    loop {
        let (consumed, ended) = {
            let buf = match reader.fill_buf().await {
                Ok(buf) => buf,
                Err(_) => break,
            };
            if buf.is_empty() {
                break;
            }
            let (chunk, ended) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..i], true),
                None => (buf, false),
            };
            len += chunk.len();
            if len <= max {
                line.extend_from_slice(chunk);
            }
            (chunk.len() + usize::from(ended), ended)
        };
        reader.consume(consumed);
        if ended && !send_line(&tx, &mut line, &mut len, max).await {
            return;
        }
    }
    if len > 0 || !line.is_empty() {
        send_line(&tx, &mut line, &mut len, max).await;
    }
}

async fn send_line(
    tx: &mpsc::Sender<Output>,
    line: &mut Vec<u8>,
    len: &mut usize,
    max: usize,
) -> bool {
    let out = if *len > max {
        Output::LineTooLong(*len)
    } else {
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Output::Line(String::from_utf8_lossy(line).into_owned())
    };
    line.clear();
    *len = 0;
    tx.send(out).await.is_ok()
}

async fn read_tail(mut stderr: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>) {
    let mut buf = [0u8; 4096];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => match tail.lock() {
                Ok(mut t) => t.push(&buf[..n]),
                Err(p) => p.into_inner().push(&buf[..n]),
            },
        }
    }
}

/// The last `cap` bytes of a stream.
#[derive(Debug)]
struct Tail {
    cap: usize,
    bytes: Vec<u8>,
}

impl Tail {
    fn new(cap: usize) -> Tail {
        Tail {
            cap,
            bytes: Vec::new(),
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.cap {
            let cut = self.bytes.len() - self.cap;
            self.bytes.drain(..cut);
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> ProcessSpec {
        let mut spec = ProcessSpec::new("sh", std::env::temp_dir());
        spec.args = vec!["-c".into(), script.into()];
        spec
    }

    async fn collect(p: &mut Process) -> Vec<Output> {
        let mut out = Vec::new();
        while let Some(o) = p.next().await {
            out.push(o);
        }
        out
    }

    fn lines(out: &[Output]) -> Vec<&str> {
        out.iter()
            .filter_map(|o| match o {
                Output::Line(l) => Some(l.as_str()),
                _ => None,
            })
            .collect()
    }

    fn exit_code(out: &[Output]) -> Option<i32> {
        match out.last() {
            Some(Output::Exited(s)) => s.code(),
            _ => None,
        }
    }

    #[tokio::test]
    async fn lines_stdin_env_and_exit_status_arrive_in_order() {
        let mut spec =
            sh("read x; echo \"got $x\"; printf 'a\\r\\nb'; echo \"$EXTRA\" >&2; exit 3");
        spec.stdin = Some("hello\n".into());
        spec.env.insert("EXTRA".into(), "from env".into());
        let mut p = Process::spawn(&spec).expect("spawn");
        let out = collect(&mut p).await;
        assert_eq!(lines(&out), ["got hello", "a", "b"]);
        assert_eq!(exit_code(&out), Some(3));
        assert_eq!(p.stderr_tail(), "from env\n");
        assert!(p.next().await.is_none(), "Exited is reported once");
    }

    #[tokio::test]
    async fn long_lines_are_reported_by_length_not_kept() {
        let mut spec = sh("head -c 5000 /dev/zero | tr '\\0' x; echo; echo short");
        spec.max_line_bytes = 1000;
        let mut p = Process::spawn(&spec).expect("spawn");
        let out = collect(&mut p).await;
        assert_eq!(out[0], Output::LineTooLong(5000));
        assert_eq!(out[1], Output::Line("short".into()));
        assert_eq!(exit_code(&out), Some(0));
    }

    #[tokio::test]
    async fn stderr_keeps_only_its_tail() {
        let mut spec = sh("i=0; while [ $i -lt 300 ]; do echo \"line $i\" >&2; i=$((i+1)); done");
        spec.stderr_tail_bytes = 64;
        let mut p = Process::spawn(&spec).expect("spawn");
        let _ = p.wait().await;
        let tail = p.stderr_tail();
        assert!(tail.len() <= 64, "{tail:?}");
        assert!(tail.ends_with("line 299\n"), "{tail:?}");
    }

    fn alive(pid: &str) -> bool {
        // A killed child that nobody reaped yet is a zombie: it counts as gone.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                let state = s.rsplit(')').next().unwrap_or("").trim_start();
                !state.starts_with('Z') && !state.starts_with('X')
            })
            .unwrap_or(false)
    }

    #[tokio::test]
    async fn kill_group_ends_the_leader_and_its_children() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut spec = sh("sleep 300 >/dev/null 2>&1 & echo $! > bg.pid; echo ready; sleep 300");
        spec.cwd = dir.path().to_path_buf();
        let mut p = Process::spawn(&spec).expect("spawn");
        assert_eq!(p.next().await, Some(Output::Line("ready".into())));
        let bg = std::fs::read_to_string(dir.path().join("bg.pid")).expect("bg.pid");
        let bg = bg.trim().to_owned();
        assert!(alive(&bg), "background child runs");
        let started = std::time::Instant::now();
        let status = p.kill_group().await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "SIGTERM was enough"
        );
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        for _ in 0..100 {
            if !alive(&bg) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("background child {bg} survived kill_group");
    }

    #[tokio::test]
    async fn a_leader_that_ignores_sigterm_is_killed_after_the_grace() {
        let mut spec = sh("trap '' TERM; echo ready; while :; do sleep 1; done");
        spec.kill_grace = Duration::from_millis(200);
        let mut p = Process::spawn(&spec).expect("spawn");
        assert_eq!(p.next().await, Some(Output::Line("ready".into())));
        let status = p.kill_group().await;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    }

    #[tokio::test]
    async fn leftovers_of_an_exited_leader_do_not_hold_the_output_open() {
        // The background child inherits stdout; without ending the group this would wait 300 s.
        let spec = sh("sleep 300 & echo done");
        let mut p = Process::spawn(&spec).expect("spawn");
        let out = tokio::time::timeout(Duration::from_secs(10), collect(&mut p))
            .await
            .expect("output ends when the leader exits");
        assert_eq!(lines(&out), ["done"]);
        assert_eq!(exit_code(&out), Some(0));
    }

    #[tokio::test]
    async fn a_missing_program_is_an_error_not_a_panic() {
        let spec = ProcessSpec::new("/nonexistent/sessiond-no-such-cli", std::env::temp_dir());
        let err = Process::spawn(&spec).err().expect("spawn fails");
        assert!(err.to_string().contains("cannot start"), "{err}");
    }

    #[test]
    fn statuses_are_described() {
        assert_eq!(describe_status(ExitStatus::from_raw(3 << 8)), "exit code 3");
        assert_eq!(
            describe_status(ExitStatus::from_raw(9)),
            "signal 9 (killed)"
        );
    }

    #[test]
    fn a_record_whose_start_time_does_not_match_is_never_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let me = std::process::id() as i32;
        // Our own pid with another start time stands for a pid reused since it was recorded.
        std::fs::write(dir.path().join(me.to_string()), "1").expect("record");
        std::fs::write(dir.path().join("not-a-pid"), "1").expect("junk");
        assert_eq!(stop_orphans(dir.path()), 0);
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
        assert!(start_time(me).is_some());
    }
}
