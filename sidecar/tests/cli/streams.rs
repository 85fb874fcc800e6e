//! Streams and hooks (`backup --stream/--hook`, `hooks`, `restore --stream`): the real launcher
//! (`neverwiped-sidecar launch …`) run as a separate process beside the sidecar, as a stream or
//! hook container of the backup pod runs it, talking only through the exchange folder's files.

use super::*;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use sha2::{Digest, Sha256};
use std::ffi::OsStr;

/// A launcher process, in a process group of its own (its container: killed whole).
struct Launcher {
    child: Child,
    what: String,
}

impl Launcher {
    fn start(kind: &str, slot: &Path, timeout: Option<u64>, command: &[&str]) -> Launcher {
        let mut launch = Command::new(SIDECAR_BIN);
        launch.args(["launch", kind, "--slot", text(slot)]);
        if let Some(secs) = timeout {
            launch.args(["--timeout", &secs.to_string()]);
        }
        launch.arg("--").args(command);
        use std::os::unix::process::CommandExt;
        launch
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Launcher {
            child: launch.spawn().expect("start the launcher"),
            what: format!("{kind} {}", slot.display()),
        }
    }

    /// A stream container running `command`.
    fn stream(slot: &Path, command: &[&str]) -> Launcher {
        Launcher::start("stream", slot, None, command)
    }

    /// A restore stream container running the shell `script`.
    fn restore_stream(slot: &Path, script: &str) -> Launcher {
        Launcher::start("restore-stream", slot, None, &["sh", "-c", script])
    }

    /// A hook container running the shell `script` within 30 s: ample, so only the test of the
    /// time limit meets its limit.
    fn hook(slot: &Path, script: &str) -> Launcher {
        Launcher::start("hook", slot, Some(30), &["sh", "-c", script])
    }

    /// Waits up to 20 s for the launcher to exit; panics if it does not (a container left hanging).
    #[track_caller]
    fn expect_exit(mut self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "the launcher of {} did not exit",
                self.what
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the launcher and its command, as a container killed for its memory.
    fn kill_container(&self) {
        self.kill_group().unwrap();
    }

    fn kill_group(&self) -> nix::Result<()> {
        nix::sys::signal::killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL)
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.kill_group();
        let _ = self.child.wait();
    }
}

/// A sidecar command line, built flag by flag so a test names only its streams and hooks.
struct Line(Vec<String>);

impl Line {
    fn of(words: &[&str]) -> Line {
        Line(Vec::new()).and(words)
    }

    /// `backup --stream NAME=SLOT` for each of `streams`.
    fn backup(streams: &[(&str, &Path)]) -> Line {
        streams
            .iter()
            .fold(Line::of(&["backup"]), |line, (name, slot)| {
                line.stream(name, slot)
            })
    }

    fn and(mut self, words: &[&str]) -> Line {
        self.0.extend(words.iter().map(|word| word.to_string()));
        self
    }

    /// `--stream NAME=SLOT`.
    fn stream(self, name: &str, slot: &Path) -> Line {
        self.and(&["--stream", &format!("{name}={}", text(slot))])
    }

    /// `--hook PHASE:NAME=SLOT`, `key` being `PHASE:NAME`.
    fn hook(self, key: &str, slot: &Path) -> Line {
        self.and(&["--hook", &format!("{key}={}", text(slot))])
    }
}

impl IntoIterator for Line {
    type Item = String;
    type IntoIter = std::vec::IntoIter<String>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// The exchange folder of one test, with its slots.
struct Pod {
    work: TempDir,
    sidecar: Sidecar,
}

impl Pod {
    fn new() -> Pod {
        let (work, _repo, sidecar) = initialised_cheaply();
        fs::create_dir(work.path().join("exchange")).unwrap();
        Pod { work, sidecar }
    }

    fn slot(&self, name: &str) -> PathBuf {
        self.work.path().join("exchange").join(name)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    fn result_file(&self) -> PathBuf {
        self.file("result.json")
    }

    /// The sidecar with `args` and its result file, not started yet.
    fn command<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Command {
        let mut command = self.sidecar.command();
        command
            .args(args)
            .arg("--result-file")
            .arg(self.result_file());
        command
    }

    /// Runs the sidecar with `args` and its result file to its end.
    fn run<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Run {
        self.run_with_env(args, &[])
    }

    /// Runs the sidecar with `args`, its result file, and `env` to its end.
    fn run_with_env<S: AsRef<OsStr>>(
        &self,
        args: impl IntoIterator<Item = S>,
        env: &[(&str, &str)],
    ) -> Run {
        let mut command = self.command(args);
        command.envs(env.iter().copied());
        Run::from_output(command.output().unwrap(), Some(&self.result_file()))
    }

    /// Starts the sidecar with `args` and its result file, for a test that acts while it runs.
    fn spawn(&self, args: Line) -> Child {
        let mut command = self.command(args);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        command.spawn().unwrap()
    }

    /// Waits for a sidecar [`Pod::spawn`] started.
    fn finish(&self, sidecar: Child) -> Run {
        Run::from_output(
            sidecar.wait_with_output().unwrap(),
            Some(&self.result_file()),
        )
    }

    fn snapshot_count(&self) -> usize {
        self.sidecar.snapshots().len()
    }
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap()
}

#[track_caller]
fn assert_contains(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle}: {text}");
    }
}

#[test]
fn streams_back_up_and_restore_byte_identical_a_small_and_a_20_mb_one() {
    let pod = Pod::new();
    let big = pod.file("big.bin");
    fs::write(&big, Noise::new(51).bytes(20 << 20)).unwrap();
    let (small_slot, big_slot) = (pod.slot("stream-small"), pod.slot("stream-big"));
    let small = Launcher::stream(&small_slot, &["printf", "SET k v\\n"]);
    let large = Launcher::stream(&big_slot, &["sh", "-c", &format!("cat {}", text(&big))]);
    let run = pod
        .run(Line::backup(&[("small", &small_slot), ("big", &big_slot)]))
        .expect_ok();
    let streams = &run.result().streams;
    assert_eq!(streams.len(), 2, "{streams:?}");
    assert_eq!((streams[0].bytes, streams[0].exit_code), (8, Some(0)));
    assert_eq!(
        (streams[1].bytes, streams[1].exit_code),
        (20 << 20, Some(0))
    );
    assert_eq!((small.expect_exit(), large.expect_exit()), (0, 0));
    let dumped = pod
        .sidecar
        .run(&["dump", "latest", "/streams/small"])
        .expect_ok();
    assert_eq!(dumped.stdout, "SET k v\n");

    // Back through a restore container's standard input, without --target.
    let out = pod.file("restored.bin");
    let restore_slot = pod.slot("stream-big-restore");
    let restorer = Launcher::restore_stream(&restore_slot, &format!("cat > {}", text(&out)));
    let restored = pod
        .run(Line::of(&["restore", "latest"]).stream("big", &restore_slot))
        .expect_ok();
    assert_eq!(restorer.expect_exit(), 0);
    assert_eq!(
        sha256(&fs::read(&out).unwrap()),
        sha256(&fs::read(&big).unwrap())
    );
    assert_eq!(restored.result().streams[0].bytes, 20 << 20);
}

#[test]
fn a_failing_command_fails_the_backup_with_its_exit_and_stderr_and_stores_nothing() {
    let pod = Pod::new();
    let slot = pod.slot("stream-cache");
    let script = "printf partial; echo 'Could not connect to Redis at 127.0.0.1:6379' >&2; exit 3";
    let launcher = Launcher::stream(&slot, &["sh", "-c", script]);
    let run = pod.run(Line::backup(&[("cache", &slot)]));
    assert_contains(
        &run.error(),
        &["stream cache", "exit 3", "Could not connect to Redis"],
    );
    let stream = &run.result().streams[0];
    assert_eq!((stream.exit_code, stream.bytes), (Some(3), 7));
    assert_eq!(
        stream.stderr,
        "Could not connect to Redis at 127.0.0.1:6379"
    );
    assert_eq!(launcher.expect_exit(), 0);
    assert_eq!(pod.snapshot_count(), 0);
}

#[test]
fn an_empty_stream_fails_unless_allowed() {
    let pod = Pod::new();
    let slot = pod.slot("stream-empty");
    let launcher = Launcher::stream(&slot, &["true"]);
    let error = pod.run(Line::backup(&[("empty", &slot)])).error();
    assert!(
        error.ends_with("reading stream empty: it wrote nothing; set allowEmpty: true on the stream if an empty output is right"),
        "{error}"
    );
    launcher.expect_exit();
    assert_eq!(pod.snapshot_count(), 0);
    for name in ["alive", "status", "go"] {
        let _ = fs::remove_file(format!("{}.{name}", slot.display()));
    }
    let launcher = Launcher::stream(&slot, &["true"]);
    pod.run(Line::backup(&[("empty", &slot)]).and(&["--stream-allow-empty", "empty"]))
        .expect_ok();
    launcher.expect_exit();
    assert_eq!(pod.snapshot_count(), 1);
}

#[test]
fn a_container_killed_mid_stream_fails_the_backup_clearly() {
    let pod = Pod::new();
    let slot = pod.slot("stream-db");
    let launcher = Launcher::stream(&slot, &["sh", "-c", "printf 'half a dump'; sleep 60"]);
    let backup = pod.spawn(Line::backup(&[("db", &slot)]));
    // The sidecar has read the first bytes once the status of its command is still missing and
    // the launcher is alive: give it the time, then kill the container.
    std::thread::sleep(Duration::from_secs(2));
    launcher.kill_container();
    let run = pod.finish(backup);
    assert_contains(
        &run.error(),
        &[
            "stream db",
            "its container was killed before its command ended (out of memory?)",
        ],
    );
    assert_eq!(pod.snapshot_count(), 0);
}

#[test]
fn a_command_that_does_not_exist_says_so() {
    let pod = Pod::new();
    let slot = pod.slot("stream-x");
    let launcher = Launcher::stream(&slot, &["/nonexistent/redis-cli", "--rdb", "-"]);
    let run = pod.run(Line::backup(&[("x", &slot)]));
    assert_contains(
        &run.error(),
        &["could not start `/nonexistent/redis-cli --rdb -`"],
    );
    assert_eq!(launcher.expect_exit(), 0);
}

#[test]
fn a_container_that_never_starts_fails_within_the_start_timeout() {
    let pod = Pod::new();
    let slot = pod.slot("stream-never");
    let started = Instant::now();
    let run = pod.run_with_env(
        Line::backup(&[("never", &slot)]),
        &[("NEVERWIPED_STREAM_START_TIMEOUT", "2s")],
    );
    assert_contains(
        &run.error(),
        &[
            "stream never",
            "its container did not start within 2s (is its image right and pulled?)",
        ],
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// A hook's command: appends its name to the log.
fn logging(log: &Path, name: &str) -> String {
    format!("echo {name} >> {}", text(log))
}

#[test]
fn hooks_run_pre_then_the_data_read_then_post_with_their_times() {
    let pod = Pod::new();
    let log = pod.file("order.log");
    let (pre, post, stream) = (
        pod.slot("pre-freeze"),
        pod.slot("post-thaw"),
        pod.slot("stream-db"),
    );
    let pre_launcher = Launcher::hook(&pre, &logging(&log, "pre"));
    let post_launcher = Launcher::hook(&post, &logging(&log, "post"));
    let script = format!("{}; printf dump", logging(&log, "stream"));
    let streamer = Launcher::stream(&stream, &["sh", "-c", &script]);
    let run = pod.run(
        Line::backup(&[("db", &stream)])
            .hook("pre:freeze", &pre)
            .hook("post:thaw", &post),
    );
    let run = run.expect_ok();
    assert_eq!(read(&log), "pre\nstream\npost\n");
    let hooks = &run.result().hooks;
    assert_eq!(
        hooks.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        ["freeze", "thaw"]
    );
    assert!(
        hooks
            .iter()
            .all(|h| h.succeeded && h.started_at.is_some() && h.finished_at.is_some()),
        "{hooks:?}"
    );
    assert!(run.result().paused_secs.is_some_and(|secs| secs > 0.0));
    for launcher in [pre_launcher, post_launcher, streamer] {
        assert_eq!(launcher.expect_exit(), 0);
    }
}

#[test]
fn a_failing_pre_hook_stores_nothing_and_the_post_hook_still_runs() {
    let pod = Pod::new();
    let log = pod.file("post.log");
    let (pre, post, stream) = (
        pod.slot("pre-freeze"),
        pod.slot("post-thaw"),
        pod.slot("stream-db"),
    );
    let failing = Launcher::hook(&pre, "echo 'fsfreeze: Device busy' >&2; exit 3");
    let thaw = Launcher::hook(&post, &logging(&log, "post"));
    let streamer = Launcher::stream(&stream, &["printf", "never read"]);
    let run = pod.run(
        Line::backup(&[("db", &stream)])
            .hook("pre:freeze", &pre)
            .hook("post:thaw", &post),
    );
    assert_eq!(
        run.error(),
        "pre hook freeze failed: exit 3: fsfreeze: Device busy"
    );
    assert_eq!(read(&log), "post\n");
    assert_eq!(pod.snapshot_count(), 0);
    // The stream's launcher, never read, was released.
    assert_eq!(
        (
            failing.expect_exit(),
            thaw.expect_exit(),
            streamer.expect_exit()
        ),
        (0, 0, 0)
    );
    assert!(run.result().streams[0]
        .error
        .as_deref()
        .is_some_and(|e| e.contains("not done")));

    // Continue: a warning, and the snapshot.
    let pod = Pod::new();
    let (pre, stream) = (pod.slot("pre-freeze"), pod.slot("stream-db"));
    let _failing = Launcher::hook(&pre, "exit 3");
    let _streamer = Launcher::stream(&stream, &["printf", "data"]);
    let run = pod.run(
        Line::backup(&[("db", &stream)])
            .hook("pre:freeze", &pre)
            .and(&["--hook-on-error", "pre:freeze=Continue"]),
    );
    let run = run.expect_ok();
    assert_eq!(run.result().warnings, ["pre hook freeze failed: exit 3"]);
    assert_eq!(pod.snapshot_count(), 1);
}

#[test]
fn a_hook_over_its_time_limit_is_killed() {
    let pod = Pod::new();
    let pre = pod.slot("pre-slow");
    let slow = Launcher::start("hook", &pre, Some(1), &["sh", "-c", "sleep 60 & sleep 60"]);
    let started = Instant::now();
    let run = pod.run(
        Line::of(&["backup", text(&small_tree(pod.work.path(), "data"))])
            .hook("pre:slow", &pre)
            .and(&["--hook-timeout", "pre:slow=1"]),
    );
    let error = run.error();
    assert!(
        error.starts_with("pre hook slow failed: outlived its time limit of 1 s"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(slow.expect_exit(), 0);
    assert_eq!(pod.snapshot_count(), 0);
}

#[test]
fn sigterm_during_a_backup_still_runs_the_post_hook() {
    let pod = Pod::new();
    let log = pod.file("post.log");
    let (post, stream) = (pod.slot("post-thaw"), pod.slot("stream-slow"));
    let thaw = Launcher::hook(&post, &logging(&log, "post"));
    let _streamer = Launcher::stream(&stream, &["sh", "-c", "printf start; sleep 60"]);
    let backup = pod.spawn(Line::backup(&[("slow", &stream)]).hook("post:thaw", &post));
    std::thread::sleep(Duration::from_secs(2));
    nix::sys::signal::kill(Pid::from_raw(backup.id() as i32), Signal::SIGTERM).unwrap();
    let run = pod.finish(backup);
    assert_eq!(run.code, 143, "{}", run.stderr);
    assert_eq!(read(&log), "post\n");
    let hooks = &run.result().hooks;
    assert!(hooks.len() == 1 && hooks[0].succeeded, "{hooks:?}");
    assert_eq!(thaw.expect_exit(), 0);
    assert_eq!(pod.snapshot_count(), 0);
}

#[test]
fn the_hooks_command_runs_every_post_hook_and_reports_each() {
    let pod = Pod::new();
    let log = pod.file("post.log");
    let (first, second, pre) = (
        pod.slot("post-one"),
        pod.slot("post-two"),
        pod.slot("pre-freeze"),
    );
    let one = Launcher::hook(
        &first,
        &format!("{}; echo oops >&2; exit 1", logging(&log, "one")),
    );
    let two = Launcher::hook(&second, &logging(&log, "two"));
    let skipped = Launcher::hook(&pre, &logging(&log, "pre"));
    let run = pod.run(
        Line::of(&["hooks", "--phase", "post"])
            .hook("pre:freeze", &pre)
            .hook("post:one", &first)
            .hook("post:two", &second)
            .and(&["--hook-on-error", "post:one=Continue"]),
    );
    let run = run.expect_ok();
    assert_eq!(read(&log), "one\ntwo\n");
    let result = run.result();
    assert_eq!(result.operation, Operation::Hooks);
    assert_eq!(result.hooks.len(), 2);
    assert_eq!(
        (result.hooks[0].exit_code, result.hooks[0].stderr.as_str()),
        (Some(1), "oops")
    );
    assert!(result.hooks[1].succeeded);
    assert_eq!(result.warnings, ["post hook one failed: exit 1: oops"]);
    for launcher in [one, two, skipped] {
        assert_eq!(launcher.expect_exit(), 0);
    }
}

#[test]
fn a_restore_command_that_fails_fails_the_restore_with_its_stderr() {
    let pod = Pod::new();
    let slot = pod.slot("stream-db");
    let _streamer = Launcher::stream(&slot, &["printf", "CREATE TABLE t;"]);
    pod.run(Line::backup(&[("db", &slot)])).expect_ok();
    let restore_slot = pod.slot("stream-db-restore");
    let restorer = Launcher::restore_stream(
        &restore_slot,
        "cat > /dev/null; echo 'ERROR: relation exists' >&2; exit 1",
    );
    let run = pod.run(Line::of(&["restore", "latest"]).stream("db", &restore_slot));
    assert_contains(
        &run.error(),
        &["stream db", "exit 1: ERROR: relation exists"],
    );
    assert_eq!(run.result().streams[0].exit_code, Some(1));
    assert_eq!(restorer.expect_exit(), 0);

    let missing = pod.slot("stream-other");
    let _unused = Launcher::restore_stream(&missing, "cat > /dev/null");
    let error = pod
        .run(Line::of(&["restore", "latest"]).stream("other", &missing))
        .error();
    assert_contains(&error, &["the snapshot has no such stream; it has db"]);
}

#[test]
fn stream_and_hook_flags_are_checked_before_anything_runs() {
    let pod = Pod::new();
    for (args, needle) in [
        (
            vec!["backup", "--stream", "Bad_Name=/x/s"],
            "not a DNS label",
        ),
        (
            vec!["backup", "--stream", "a=/x/a", "--stream", "a=/x/b"],
            "twice",
        ),
        (
            vec!["backup", "--stream", "a=relative/slot"],
            "must be an absolute path",
        ),
        (
            vec!["backup", "--hook", "during:a=/x/a"],
            "pre:NAME or post:NAME",
        ),
    ] {
        let error = pod.run(&args).error();
        assert!(error.contains(needle), "{args:?}: {error}");
    }
}
