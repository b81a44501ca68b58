//! Java workloads (tests/workloads/NAME.java) compiled once per test
//! binary, with Debian's JDK (`scripts/deps.sh --test`), for JDK 11 on;
//! and the JREs Debian 12 lacks, from `scripts/runtimes`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The directory holding `tests/workloads/NAME.java`'s classes, compiled
/// on first use (or, without javac, compiled beforehand into it: NAME.class
/// there) for JDK 11, the oldest JVM flare names; `None` (said on stderr)
/// without either, unless the tests must run (FLARE_REQUIRE_BPF), when it
/// panics.
pub fn classes(name: &str) -> Option<PathBuf> {
    classes_for(name, 11)
}

/// [`classes`] compiled for the JDK `release` (8 for JDK 8).
pub fn classes_for(name: &str, release: u32) -> Option<PathBuf> {
    // By (name, release): the directory, or None without a JDK.
    type Built = HashMap<(String, u32), Option<PathBuf>>;
    static BUILT: Mutex<Option<Built>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    if let Some(dir) = built.get(&(name.to_string(), release)) {
        return dir.clone();
    }
    // JDK 11's in `java-NAME`, where scripts/vmtest puts them.
    let leaf = match release {
        11 => format!("java-{name}"),
        r => format!("java-{name}-{r}"),
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(leaf);
    let src =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/workloads/{name}.java"));
    std::fs::create_dir_all(&dir).expect("a directory for the classes");
    let javac = Command::new("javac")
        .args(["--release", &release.to_string(), "-d"])
        .arg(&dir)
        .arg(&src)
        .status();
    let out = match javac {
        Ok(s) if s.success() => Some(dir),
        Ok(s) => panic!("javac failed on {}: {s}", src.display()),
        // No javac: classes compiled beforehand. scripts/vmtest's guests
        // (arm64) have a JRE but no JDK, so it compiles the workloads on
        // the host into this very directory of the guest's tree.
        Err(_) if dir.join(format!("{name}.class")).is_file() => Some(dir),
        Err(e) => {
            assert!(
                std::env::var_os("FLARE_REQUIRE_BPF").is_none(),
                "no javac ({e}): scripts/deps.sh --test installs default-jdk-headless"
            );
            eprintln!("skipping: no JDK ({e})");
            None
        }
    };
    built.insert((name.to_string(), release), out.clone());
    out
}

/// Where a Java thread's stack (folded frames, the command first) starts:
/// at `start_thread`, or, where libc's local symbols are not installed
/// (the arm64 guests), at the unnamed frame below the launcher's
/// `ThreadJavaMain`. `None` when the walk did not get there.
pub fn thread_start(frames: &[String]) -> Option<usize> {
    if let Some(i) = frames.iter().position(|x| x == "start_thread") {
        return Some(i);
    }
    let i = frames.iter().position(|x| x == "ThreadJavaMain")?;
    (i >= 2 && frames[i - 1] == "[unknown]").then_some(i - 1)
}

/// Whether a Java thread's stack (folded frames, the command first) goes
/// down to where the thread starts: through the launcher's `JavaMain` to
/// [`thread_start`] below it; or, for a JVM whose launcher names no
/// function (`stripped`, see [`stripped_launcher`]), through the call
/// stub and at least four frames below it (the JNI call, `JavaMain`, the
/// thread's start), all unnamed.
pub fn rooted(frames: &[String], stripped: bool) -> bool {
    let main = frames.iter().position(|x| x == "JavaMain");
    let start = thread_start(frames);
    if start.is_some() && main.is_some() && start < main {
        return true;
    }
    let stub = frames.iter().position(|x| x == "[StubRoutines (1)]");
    stripped && stub.is_some_and(|i| i >= 5 && frames[1..i].iter().all(|x| x == "[unknown]"))
}

/// `tests/workloads/NAME.java`'s classes for the JVM `java`: compiled for
/// JDK 8 where `java` is one (its libraries under `lib/ARCH/`, where JDK 9
/// on has them under `lib/`), for 11 otherwise.
pub fn classes_for_jvm(name: &str, java: &Path) -> Option<PathBuf> {
    classes_for(name, if jdk8(java) { 8 } else { 11 })
}

/// Whether the JVM `java` is JDK 8 (or older): its home keeps its
/// libraries in `lib/ARCH/`.
pub fn jdk8(java: &Path) -> bool {
    home(java).is_some_and(|home| home.join("lib").join(JDK8_ARCH).is_dir())
}

/// The directory JDK 8 keeps this architecture's libraries in, under
/// `lib/`.
const JDK8_ARCH: &str = if cfg!(target_arch = "aarch64") {
    "aarch64"
} else {
    "amd64"
};

/// The home of the JVM `java` (`bin/java`'s parent's parent; JDK 8's
/// `jre/`), symbolic links resolved.
fn home(java: &Path) -> Option<PathBuf> {
    let java = which(java).canonicalize().ok()?;
    Some(java.parent()?.parent()?.to_path_buf())
}

/// `java` itself, or, a bare name, where PATH finds it.
fn which(java: &Path) -> PathBuf {
    if java.components().count() > 1 {
        return java.to_path_buf();
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(java))
        .find(|p| p.is_file())
        .unwrap_or_else(|| java.to_path_buf())
}

/// Whether the launcher of the JVM `java` has no symbol table (its
/// libjli.so has no `.symtab`, as Debian sid's JDK 8 package strips it,
/// and its libc and libjvm beside it): its native frames are then
/// unnamed, by the package, not by flare.
pub fn stripped_launcher(java: &Path) -> bool {
    let Some(home) = home(java) else {
        return false;
    };
    // JDK 9 on: lib/libjli.so; JDK 8: lib/ARCH/jli/libjli.so.
    let jli = [
        home.join("lib/libjli.so"),
        home.join(format!("lib/{JDK8_ARCH}/jli/libjli.so")),
    ];
    jli.iter()
        .find_map(|p| std::fs::read(p).ok())
        .is_some_and(|elf| !has_symtab(&elf))
}

/// Whether the 64-bit little-endian ELF file `elf` has a section of
/// type SHT_SYMTAB (a symbol table beyond the dynamic one). The guests
/// of scripts/vmtest have no `nm` to ask.
fn has_symtab(elf: &[u8]) -> bool {
    let int = |at: usize, n: usize| -> Option<u64> {
        let b = elf.get(at..at + n)?;
        Some(b.iter().rev().fold(0, |v, &x| v << 8 | u64::from(x)))
    };
    let sections = || -> Option<bool> {
        if elf.get(..5)? != b"\x7fELF\x02" {
            return None;
        }
        let (off, size, count) = (int(0x28, 8)?, int(0x3a, 2)?, int(0x3c, 2)?);
        Some((0..count).any(|i| {
            let at = off + i * size;
            usize::try_from(at + 4).is_ok_and(|at| int(at, 4) == Some(2))
        }))
    };
    sections().unwrap_or(true)
}

/// Seconds a Java workload runs for where `seconds` do here: twice as
/// many in the emulated guests, whose JVMs take a second or two more to
/// compile the hot methods and whose timers sample less often.
pub fn seconds(seconds: u32) -> String {
    let emulated = std::env::var_os("FLARE_KERNEL_CAN").is_some();
    (if emulated { seconds * 2 } else { seconds }).to_string()
}

/// The `java` of OpenJDK `major`'s JRE (11 from Debian 11, 21 and 25 from
/// Debian 13, 8 from Debian sid) as `scripts/runtimes` keeps it in its
/// cache, fetched the first time from the package registry;
/// scripts/vmtest's guests have no registry, only the copies it puts at
/// the same path. Missing,
/// it fails the test under FLARE_REQUIRE_BPF=1 and skips it (said on
/// stderr) otherwise.
pub fn jre(major: u32) -> Option<PathBuf> {
    super::runtimes::required(
        ("java", &major.to_string()),
        &format!("Java {major}"),
        &format!("java{major}"),
        &|arch| format!("usr/lib/jvm/java-{major}-openjdk-{arch}/bin/java"),
    )
}
