//! `hintgate log ship`: the audit log, copied record by record to the
//! system log.
//!
//! Each stored record becomes one syslog message on the local socket
//! (`/dev/log`, where journald or rsyslog listens; facility `authpriv`, so
//! the usual setups keep it from users who may not read the log): the same
//! fields as a line of `hintgate log --json` (one per stored record, a
//! record of several outcomes as one line), plus its chain position: `prev`
//! (the link before it) and `link` (its own). A copy held elsewhere is a
//! witness: a record later changed, removed or cut off the end of the log
//! no longer has the link that was shipped, and the links shipped in order
//! show any record missing between two.
//!
//! A cursor file (`--cursor`) remembers the last record shipped and its
//! link; a run starts after it, so a restarted shipper neither repeats nor
//! skips records, and a log whose record at the cursor has another link
//! than the one shipped (rewritten, rolled back, or replaced) is refused
//! with the two links named. A record too large for one datagram is shipped
//! without its fields, its chain position kept (`"truncated"`), never
//! dropped.
//!
//! The messages use the format of the C library's `syslog()`
//! (`<PRI>Mmm dd hh:mm:ss hintgate[PID]: MESSAGE`), which journald and
//! rsyslog both read from that socket; the time is UTC, and the record's
//! own time is in the message as `at`.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use hintgate_store::{AuditLog, Entry, Record};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::args::{LogArgs, ShipArgs};
use crate::exit::Exit;
use crate::output;
use crate::state::Use;

/// The syslog priority: facility `authpriv` (10), severity `info` (6).
const PRIORITY_INFO: u8 = 10 * 8 + 6;
/// The same at severity `notice` (5): a refused call, or a record that
/// cannot be read as the gateway writes records.
const PRIORITY_NOTICE: u8 = 10 * 8 + 5;
/// How long a follower waits for new records before it looks again.
const FOLLOW_WAIT: Duration = Duration::from_secs(1);
/// How long a follower waits before it tries a socket that refused it
/// again (the system logger restarting).
const RETRY_WAIT: Duration = Duration::from_secs(1);
/// Records read from the store at a time.
const BATCH: usize = 1000;

/// Where a run left off: the last record shipped and its link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cursor {
    /// Its sequence number.
    seq: u64,
    /// Its link, as shipped.
    link: String,
}

/// Runs `hintgate log ship`.
///
/// # Errors
///
/// The store cannot be read, the cursor file is unreadable or names a
/// record the log no longer holds as shipped, or (without `--follow`) the
/// system log's socket refuses a message.
pub fn run(args: &LogArgs, ship: &ShipArgs) -> Result<Exit> {
    let store = crate::state::open_store_of(&args.at, None, &Use::Other)?.store;
    if let Some(saved) = &ship.check {
        return check(store.as_ref(), saved);
    }
    let cursor = match &ship.cursor {
        Some(path) => read_cursor(path)?,
        None => None,
    };
    let mut after = match &cursor {
        Some(cursor) => check_cursor(store.as_ref(), cursor)?,
        None => 0,
    };
    let mut sink = Sink::new(ship.socket.clone());
    let mut shipped = 0_u64;
    loop {
        let batch = store.entries(after, BATCH)?;
        for entry in &batch {
            if let Err(error) = sink.send_entry(entry, ship.follow) {
                save(ship.cursor.as_deref(), &batch, after)?;
                return Err(error).with_context(|| {
                    format!(
                        "the system log at {} did not take record {} ({shipped} shipped in this run)",
                        sink.path.display(),
                        entry.seq
                    )
                });
            }
            after = entry.seq;
            shipped += 1;
        }
        if let Some(last) = batch.last() {
            save(ship.cursor.as_deref(), std::slice::from_ref(last), last.seq)?;
        }
        if batch.len() == BATCH {
            continue;
        }
        if !ship.follow {
            break;
        }
        store.wait_for_entries(after, FOLLOW_WAIT)?;
    }
    output::err(&format!(
        "shipped {shipped} {} to {}\n",
        if shipped == 1 { "record" } else { "records" },
        sink.path.display()
    ))?;
    Ok(Exit::Success)
}

/// One shipped record as the check reads it back.
#[derive(Debug, Deserialize)]
struct Shipped {
    seq: u64,
    prev: String,
    link: String,
}

/// `--check FILE`: compares the messages saved from the system log with
/// the log. Every shipped record must still be in the log with the link it
/// was shipped with, and each shipped record's `prev` must be the link of
/// the one shipped before it when that one was shipped too (a record the
/// system log lost shows as a gap, named, not as a change of the log).
fn check(store: &dyn AuditLog, saved: &Path) -> Result<Exit> {
    let text = std::fs::read_to_string(saved)
        .with_context(|| format!("cannot read the saved messages {}", saved.display()))?;
    let mut shipped: Vec<(usize, Shipped)> = Vec::new();
    let mut unreadable = 0_usize;
    for (number, line) in text.lines().enumerate() {
        let message = line
            .find("hintgate[")
            .and_then(|at| line.get(at..))
            .and_then(|rest| rest.split_once("]: "))
            .map_or(line, |(_, message)| message);
        if message.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Shipped>(message) {
            Ok(record) => shipped.push((number + 1, record)),
            Err(_) => unreadable += 1,
        }
    }
    shipped.sort_by_key(|(_, record)| record.seq);
    let mut problems = Vec::new();
    for (index, (line, record)) in shipped.iter().enumerate() {
        let held = match record.seq.checked_sub(1) {
            Some(before) => store.entries(before, 1)?,
            None => Vec::new(),
        };
        match held.first() {
            Some(entry) if entry.seq == record.seq && entry.hash == record.link => {}
            Some(entry) if entry.seq == record.seq => problems.push(format!(
                "record {} (line {line}) was shipped with link {} and the log holds it with link {}: changed since it was shipped",
                record.seq, record.link, entry.hash
            )),
            _ => problems.push(format!(
                "record {} (line {line}) was shipped with link {} and the log no longer holds it",
                record.seq, record.link
            )),
        }
        if let Some((_, before)) = index.checked_sub(1).and_then(|before| shipped.get(before))
            && before.seq + 1 == record.seq
            && before.link != record.prev
        {
            problems.push(format!(
                "records {} and {} were shipped with links that do not chain ({} then prev {}): one of the shipped messages was altered",
                before.seq, record.seq, before.link, record.prev
            ));
        }
    }
    let mut out = String::new();
    for problem in &problems {
        out.push_str(&format!("{problem}\n"));
    }
    let first = shipped.first().map_or(0, |(_, record)| record.seq);
    let last = shipped.last().map_or(0, |(_, record)| record.seq);
    let gaps = shipped
        .windows(2)
        .filter(|pair| matches!(pair, [(_, a), (_, b)] if b.seq > a.seq + 1))
        .count();
    out.push_str(&format!(
        "{} shipped {} checked ({}), {} unreadable {}, {gaps} {} in what was saved: {}\n",
        shipped.len(),
        if shipped.len() == 1 {
            "record"
        } else {
            "records"
        },
        if shipped.is_empty() {
            "none".to_owned()
        } else {
            format!("{first} to {last}")
        },
        unreadable,
        if unreadable == 1 { "line" } else { "lines" },
        if gaps == 1 { "gap" } else { "gaps" },
        if problems.is_empty() {
            "the log holds every one as it was shipped"
        } else {
            "the log does not hold them all as shipped"
        },
    ));
    output::out(&out)?;
    Ok(if problems.is_empty() {
        Exit::Success
    } else {
        Exit::Broken
    })
}

/// Writes the cursor for the last record of `batch` at or before `upto`.
fn save(path: Option<&Path>, batch: &[Entry], upto: u64) -> Result<()> {
    let (Some(path), Some(last)) = (path, batch.iter().rev().find(|entry| entry.seq <= upto))
    else {
        return Ok(());
    };
    write_cursor(
        path,
        &Cursor {
            seq: last.seq,
            link: last.hash.clone(),
        },
    )
}

/// Reads a cursor file; `None` when there is none yet.
fn read_cursor(path: &Path) -> Result<Option<Cursor>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(error)
                .with_context(|| format!("cannot read the cursor {}", path.display()));
        }
    };
    serde_json::from_str(&text).map(Some).with_context(|| {
        format!(
            "the cursor {} is not one `hintgate log ship` wrote (expected {{\"seq\":N,\"link\":\"...\"}})",
            path.display()
        )
    })
}

/// Writes a cursor file whole: a file beside it, then renamed over it, so
/// a crash leaves the old cursor or the new one.
fn write_cursor(path: &Path, cursor: &Cursor) -> Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".new");
    let temporary = PathBuf::from(temporary);
    let text = serde_json::to_string(cursor)?;
    std::fs::write(&temporary, format!("{text}\n"))
        .and_then(|()| std::fs::rename(&temporary, path))
        .with_context(|| format!("cannot write the cursor {}", path.display()))
}

/// Checks that the log still holds the record the cursor names, with the
/// link shipped; returns where to go on from.
fn check_cursor(store: &dyn AuditLog, cursor: &Cursor) -> Result<u64> {
    let Some(previous) = cursor.seq.checked_sub(1) else {
        return Ok(0);
    };
    let found = store.entries(previous, 1)?;
    match found.first() {
        Some(entry) if entry.seq == cursor.seq && entry.hash == cursor.link => Ok(cursor.seq),
        Some(entry) if entry.seq == cursor.seq => bail!(
            "record {} of the log is not the one shipped: its link was {} when it was shipped and is {} now; the log was rewritten or rolled back since (`hintgate log verify` names what changed)",
            cursor.seq,
            cursor.link,
            entry.hash
        ),
        _ => bail!(
            "the log no longer holds record {}, which was shipped with link {}: the log was cut short or replaced since (`hintgate log verify` names what changed)",
            cursor.seq,
            cursor.link
        ),
    }
}

/// The system log's socket, connected when first used and again after it
/// refused a message.
struct Sink {
    path: PathBuf,
    socket: Option<UnixDatagram>,
    pid: u32,
    /// Whether the socket's refusal was already reported (a follower says it
    /// once, then waits for the logger quietly).
    reported: bool,
}

impl Sink {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            socket: None,
            pid: std::process::id(),
            reported: false,
        }
    }

    /// Ships one stored record. A follower (`patient`) waits for a logger
    /// that refuses it and tries again; otherwise the refusal is the error.
    fn send_entry(&mut self, entry: &Entry, patient: bool) -> Result<()> {
        let (priority, message) = message(entry);
        let whole = self.line(priority, &message);
        loop {
            match self.send(&whole) {
                Ok(()) => {
                    self.reported = false;
                    return Ok(());
                }
                Err(error) if is_too_large(&error) => {
                    let cut = self.line(priority, &truncated(entry, message.len()));
                    return self.send(&cut).map_err(Into::into);
                }
                Err(error) if patient => {
                    self.socket = None;
                    if !self.reported {
                        output::err(&format!(
                            "warning: the system log at {} refuses messages ({error}); waiting for it, record {} is next\n",
                            self.path.display(),
                            entry.seq
                        ))?;
                        self.reported = true;
                    }
                    std::thread::sleep(RETRY_WAIT);
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    fn line(&self, priority: u8, message: &str) -> String {
        format!(
            "<{priority}>{} hintgate[{}]: {message}",
            syslog_time(crate::when::unix_now()),
            self.pid
        )
    }

    fn send(&mut self, line: &str) -> io::Result<()> {
        if self.socket.is_none() {
            let socket = UnixDatagram::unbound()?;
            socket.connect(&self.path)?;
            self.socket = Some(socket);
        }
        let Some(socket) = &self.socket else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let result = socket.send(line.as_bytes()).map(|_| ());
        if result.is_err() {
            self.socket = None;
        }
        result
    }
}

/// Whether a send failed for the message's size alone.
fn is_too_large(error: &io::Error) -> bool {
    error.raw_os_error() == Some(rustix::io::Errno::MSGSIZE.raw_os_error())
}

/// A record as shipped, and its priority: the fields of its `hintgate log
/// --json` line (one per stored record), its sequence number, time, kind
/// and call, and its chain position.
fn message(entry: &Entry) -> (u8, String) {
    let mut line = Map::new();
    line.insert("seq".into(), Value::from(entry.seq));
    line.insert("at".into(), Value::from(entry.at));
    let mut priority = PRIORITY_INFO;
    match &entry.record {
        Some(record) => {
            if let Ok(Value::Object(fields)) = serde_json::to_value(record) {
                line.extend(fields);
            }
            line.insert("kind".into(), Value::from(entry.stored_kind.as_str()));
            if let Record::Call(call) = record
                && call.verdict == hintgate_policy::decide::Verdict::Deny
            {
                priority = PRIORITY_NOTICE;
            }
        }
        None => {
            // Shown as `hintgate log --json` shows it: as stored.
            line.insert("kind".into(), Value::from("malformed"));
            line.insert(
                "record".into(),
                serde_json::json!({"kind": entry.stored_kind, "body": entry.stored_body}),
            );
            if let Some(problem) = &entry.malformed {
                line.insert("problem".into(), Value::from(problem.code()));
            }
            priority = PRIORITY_NOTICE;
        }
    }
    if let Some(call) = entry.call {
        line.insert("call".into(), Value::from(call));
    }
    line.insert("prev".into(), Value::from(entry.prev.as_str()));
    line.insert("link".into(), Value::from(entry.hash.as_str()));
    (priority, Value::Object(line).to_string())
}

/// A record too large for one datagram: its place and chain position, and
/// how large its message was.
fn truncated(entry: &Entry, bytes: usize) -> String {
    serde_json::json!({
        "seq": entry.seq,
        "at": entry.at,
        "kind": entry.stored_kind,
        "call": entry.call,
        "prev": entry.prev,
        "link": entry.hash,
        "truncated": {"bytes": bytes},
    })
    .to_string()
}

/// `Mmm dd hh:mm:ss` in UTC, as the C library's `syslog()` writes its time
/// (with the day padded with a space).
fn syslog_time(seconds: i64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let at = hintgate_store::time::civil(seconds);
    let month = usize::try_from(at.month - 1)
        .ok()
        .and_then(|month| MONTHS.get(month))
        .copied()
        .unwrap_or("Jan");
    format!(
        "{month} {:>2} {:02}:{:02}:{:02}",
        at.day, at.hour, at.minute, at.second
    )
}

#[cfg(test)]
mod tests {
    use super::syslog_time;

    #[test]
    fn times_are_written_as_the_c_librarys_syslog_writes_them() {
        assert_eq!(syslog_time(0), "Jan  1 00:00:00");
        // 2026-12-03T09:15:02Z
        assert_eq!(syslog_time(1_796_289_302), "Dec  3 09:15:02");
        assert_eq!(syslog_time(1_781_049_600), "Jun 10 00:00:00");
    }
}
