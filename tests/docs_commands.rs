//! Docs that cannot drift: every `flare ...` command line in a code block
//! of README.md and docs/*.md is parsed by flare itself (`--help` put
//! before its `--`, or at its end: flare parses every option before it
//! and exits 0 only when all of them are its own), so a renamed flag or
//! tool breaks this test, not a reader's copy and paste.
//!
//! A line is a command when its second word is one of flare's tools (a
//! message quoted in troubleshooting.md, "flare needs root, …", is not);
//! synopses (`[options]`, `A|B`) are left out. Shell around a command is
//! cut away: a comment, a pipe or redirection, `$(…)` (a process id).
//! The examples that end each `--help` are parsed the same way.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files whose code blocks are read.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// flare's tools, as `flare --help` lists them (hidden ones too).
fn tools() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_flare"))
        .arg("--help")
        .output()
        .expect("flare --help");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut tools: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|t| t != "help")
        .collect();
    // Hidden from --help but documented.
    tools.push("man".into());
    tools
}

/// Splits a shell line into words, honouring single and double quotes;
/// `$(…)` becomes a process id.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut chars = line.chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, '$') if chars.peek() == Some(&'(') => {
                let mut depth = 0;
                for d in chars.by_ref() {
                    match d {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                word.push('1');
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

/// The command of a code line, if it is one: its words after `flare`,
/// up to a comment, pipe, redirection or list.
fn command(line: &str, tools: &[String]) -> Option<Vec<String>> {
    let line = line.trim();
    let line = line
        .strip_prefix("# ")
        .or_else(|| line.strip_prefix("$ "))
        .unwrap_or(line);
    let line = line.strip_prefix("sudo ").unwrap_or(line);
    if !line.starts_with("flare ") || line.contains('[') || line.contains("...") {
        return None;
    }
    let mut args = Vec::new();
    for w in words(line).into_iter().skip(1) {
        if w.starts_with('#') || ["|", ">", ">>", "2>", "&&", ";", "&"].contains(&w.as_str()) {
            break;
        }
        args.push(w);
    }
    let tool = args.first()?;
    if !tools.contains(tool) || tool.contains('|') {
        return None;
    }
    Some(args)
}

/// Every command of the code blocks of `text`, with its line number.
fn commands(text: &str, tools: &[String]) -> Vec<(usize, Vec<String>)> {
    let mut inside = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            continue;
        }
        if inside {
            if let Some(args) = command(line, tools) {
                out.push((n + 1, args));
            }
        }
    }
    out
}

#[test]
fn every_documented_command_parses() {
    let tools = tools();
    assert!(tools.iter().any(|t| t == "profile"), "tools: {tools:?}");
    let mut all = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("reading a document");
        for (line, args) in commands(&text, &tools) {
            all.push((file.clone(), line, args));
        }
    }
    // Enough that the extraction cannot have silently failed, and every
    // tool shown somewhere.
    assert!(all.len() >= 25, "only {} commands found", all.len());
    for tool in [
        "profile",
        "offcputime",
        "wakeuptime",
        "offwaketime",
        "stackcount",
        "wallclock",
        "agent",
    ] {
        assert!(
            all.iter().any(|(_, _, a)| a[0] == tool),
            "no documented `flare {tool}` command"
        );
    }
    let mut failed = Vec::new();
    for (file, line, args) in &all {
        if let Err(e) = parses(args) {
            failed.push(format!("{}:{line}: {e}", file.display()));
        }
    }
    assert!(
        failed.is_empty(),
        "documented commands flare does not parse:\n{}",
        failed.join("\n")
    );
}

/// Whether flare parses `args` (its words after `flare`): `--help` put
/// before its `--`, or at its end. What flare said when not.
fn parses(args: &[String]) -> Result<(), String> {
    let mut run = args.to_vec();
    match run.iter().position(|a| a == "--") {
        Some(at) => run.insert(at, "--help".into()),
        None => run.push("--help".into()),
    }
    let out = Command::new(env!("CARGO_BIN_EXE_flare"))
        .args(&run)
        .output()
        .expect("running flare");
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "flare {}\n  {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// `flare --help` and every tool's end with two or more examples, and
/// each of them parses: the help cannot drift either.
#[test]
fn every_help_ends_with_examples_that_parse() {
    let tools = tools();
    let mut helps: Vec<Vec<String>> = vec![vec![]];
    helps.extend(
        tools
            .iter()
            .filter(|t| *t != "man")
            .map(|t| vec![t.clone()]),
    );
    let mut failed = Vec::new();
    for tool in &helps {
        let out = Command::new(env!("CARGO_BIN_EXE_flare"))
            .args(tool)
            .arg("--help")
            .output()
            .expect("running flare");
        let text = String::from_utf8_lossy(&out.stdout);
        let examples: Vec<Vec<String>> = text
            .lines()
            .skip_while(|l| l.trim() != "Examples:")
            .skip(1)
            .filter_map(|l| command(l, &tools))
            .collect();
        let name = format!("flare {}", tool.join(" "));
        if examples.len() < 2 {
            failed.push(format!("{name} --help: {} examples", examples.len()));
        }
        for e in &examples {
            if let Err(e) = parses(e) {
                failed.push(format!("{name} --help: {e}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn the_extraction_keeps_commands_and_leaves_prose() {
    let tools = vec!["profile".to_string(), "agent".to_string()];
    let text = "```sh\n\
        flare profile -F 99 5   # a comment\n\
        # flare profile -p $(pgrep -f app.py) -f\n\
        sudo flare profile -o a.svg -- ./app --opt | tee x\n\
        flare needs root, or the capabilities\n\
        flare profile [-p PID] [-F HZ]\n\
        flare agent --label 'team=a b'\n\
        ```\n\
        flare profile --not-in-a-block\n";
    let got: Vec<Vec<String>> = commands(text, &tools).into_iter().map(|(_, a)| a).collect();
    let want: Vec<Vec<&str>> = vec![
        vec!["profile", "-F", "99", "5"],
        vec!["profile", "-p", "1", "-f"],
        vec!["profile", "-o", "a.svg", "--", "./app", "--opt"],
        vec!["agent", "--label", "team=a b"],
    ];
    assert_eq!(got, want);
}
