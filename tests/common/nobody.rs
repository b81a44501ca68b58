//! Running a program as user nobody from a test run as root: tests of
//! flare without root (tests/nonroot.rs) and of other users' processes
//! met by root's flare (tests/hostile_processes.rs).

use std::process::Command;

/// User and group id of nobody (and nogroup) on Debian.
pub const NOBODY: u32 = 65534;

/// Why a program cannot be run as nobody here (no `setpriv`, no user
/// nobody), or `None` when it can.
pub fn missing() -> Option<&'static str> {
    let setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let nobody = std::fs::read_to_string("/etc/passwd")
        .is_ok_and(|p| p.lines().any(|l| l.starts_with("nobody:x:65534:")));
    match (setpriv, nobody) {
        (false, _) => Some("no setpriv"),
        (true, false) => Some("no user nobody"),
        (true, true) => None,
    }
}

/// `setpriv` with nobody's user and group and no other groups: the
/// program to run (and any more of setpriv's options) follows.
pub fn setpriv() -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]);
    c
}
