//! Figures for bench/unwind.py: the unwind tables of every process on
//! this machine (objects, rows, bytes in BPF), how long building them
//! takes (libc, a given large binary, the slowest object) and how long
//! loading one from the disk cache takes. Needs no BPF; run as root to
//! see every process.
//!
//! usage: unwind_tables [BIG_BINARY]

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use flare::unwind::cache::DiskCache;
use flare::unwind::elf::Elf;
use flare::unwind::procs::{all_pids, exec_mappings, Backing};
use flare::unwind::table::Table;

/// Builds the table of the ELF file at `path`: (rows, time to read the
/// file and build).
fn build(path: &Path) -> Option<(Table, Duration)> {
    let t0 = Instant::now();
    let data = std::fs::read(path).ok()?;
    let elf = Elf::parse(&data)?;
    let table = Table::from_parsed(&data, &elf).ok()?;
    Some((table, t0.elapsed()))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let big = std::env::args().nth(1);
    let cache_dir = tempfile::tempdir().expect("temporary directory");
    let cache = DiskCache::at(cache_dir.path());
    let mut objects: HashMap<(u64, u64), (String, usize, Duration)> = HashMap::new();
    let mut processes = 0;
    let mut mappings = 0usize;
    for pid in all_pids() {
        let Ok(maps) = exec_mappings(pid) else {
            continue;
        };
        processes += 1;
        mappings += maps.len();
        for m in &maps {
            let Backing::File(path) = &m.backing else {
                continue;
            };
            let Some(file) = m.open_paths(pid).into_iter().find(|p| p.exists()) else {
                continue;
            };
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            let id = (meta.dev(), meta.ino());
            if objects.contains_key(&id) {
                continue;
            }
            let (rows, took) = match build(&file) {
                Some((t, took)) => {
                    cache.store(&format!("{}-{}", id.0, id.1), &t);
                    (t.rows.len(), took)
                }
                None => (0, Duration::ZERO),
            };
            objects.insert(id, (path.clone(), rows, took));
        }
    }
    let rows: usize = objects.values().map(|o| o.1).sum();
    let build_total: Duration = objects.values().map(|o| o.2).sum();
    let slowest = objects.values().max_by_key(|o| o.2);
    // Loading every object back from the disk cache.
    let t0 = Instant::now();
    let mut loaded = 0;
    for id in objects.keys() {
        if cache.load(&format!("{}-{}", id.0, id.1)).is_some() {
            loaded += 1;
        }
    }
    let from_cache = t0.elapsed();
    let bytes = rows * 8 + mappings * 32;
    println!("processes {processes}");
    println!("objects {}", objects.len());
    println!("rows {rows}");
    println!("mappings {mappings}");
    println!("table_mib {:.1}", bytes as f64 / (1 << 20) as f64);
    println!("build_all_ms {:.0}", ms(build_total));
    if let Some((path, rows, took)) = slowest {
        println!("slowest {path} {rows} rows {:.1} ms", ms(*took));
    }
    println!(
        "cache_load_ms_per_object {:.3}",
        ms(from_cache) / loaded.max(1) as f64
    );
    for (name, path) in [
        ("libc", Some("/lib/x86_64-linux-gnu/libc.so.6".to_string())),
        ("big", big),
    ] {
        let Some(path) = path else { continue };
        // Best of three, as a cold cache would see it.
        let best = (0..3)
            .filter_map(|_| build(Path::new(&path)))
            .map(|(t, took)| (t.rows.len(), took))
            .min_by_key(|x| x.1);
        if let Some((rows, took)) = best {
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            println!(
                "build {name} {path} {:.1} MB {rows} rows {:.1} ms",
                size as f64 / 1e6,
                ms(took)
            );
        }
    }
}
