//! A window as pprof: the `-o` writer's `profile.proto` plus the labels a
//! continuous-profiling server groups by (`exe`, `cgroup`, `container_id`,
//! and where a process has them `service_name`, `pod_uid` and
//! `systemd_unit`; `hostname` on every sample, next to the writer's
//! `pid`, `tid` and `comm`) and the build id of each mapping whose file
//! can be read.
//!
//! Build ids are read once per file and kept in a small cache that starts
//! again from empty when full, so that a long-running agent stays flat.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use ahash::AHashMap;
use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use super::{unix_nanos, Window};
use crate::output::pprof::{self as writer, proto};
use crate::profile::Kind;

/// Build ids cached at most.
const MAX_BUILD_IDS: usize = 4096;

/// Encodes windows as pprof, remembering build ids between windows.
#[derive(Default)]
pub struct Encoder {
    build_ids: HashMap<String, Option<Arc<str>>>,
    /// The sizes of the last profile of each kind, to start the next at.
    sizes: HashMap<Kind, writer::Sizes>,
}

/// Interns strings into an existing pprof string table, by the index the
/// writer built it with.
struct Strings<'a> {
    table: &'a mut Vec<String>,
    index: AHashMap<String, i64>,
}

impl Strings<'_> {
    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// The window as a `profile.proto` message.
    pub fn build(&mut self, window: &Window) -> proto::Profile {
        let sizes = self.sizes.entry(window.profile.meta.kind).or_default();
        let (mut p, index) =
            writer::build_interned(&window.profile, unix_nanos(window.start) as i64, sizes);
        // Exactly the window's span, so that consecutive windows tile.
        p.duration_nanos = unix_nanos(window.end).saturating_sub(unix_nanos(window.start)) as i64;
        let mut strings = Strings {
            table: &mut p.string_table,
            index,
        };
        let pid_key = strings.get("pid");
        let keys = [
            strings.get("exe"),
            strings.get("cgroup"),
            strings.get("container_id"),
            strings.get("service_name"),
            strings.get("pod_uid"),
            strings.get("systemd_unit"),
        ];
        let host_key = strings.get("hostname");
        let host = strings.get(&window.host);
        // Which pid's root to read each mapping's file under, for
        // processes in another mount namespace: by mapping id, of the
        // mappings whose build id is still to read (ids count from 1).
        let mut mapping_pid: Vec<Option<u32>> = vec![None; p.mapping.len()];
        let wanted: Vec<bool> = p.mapping.iter().map(|m| m.build_id == 0).collect();
        let location_mapping: Vec<usize> = p
            .location
            .iter()
            .map(|l| (l.mapping_id as usize).wrapping_sub(1))
            .collect();
        for s in &mut p.sample {
            let Some(pid) = s.label.iter().find(|l| l.key == pid_key).map(|l| l.num) else {
                continue;
            };
            let pid = pid as u32;
            for &loc in &s.location_id {
                let m = location_mapping.get((loc as usize).wrapping_sub(1));
                if let Some(&m) = m.filter(|&&m| wanted.get(m) == Some(&true)) {
                    mapping_pid[m].get_or_insert(pid);
                }
            }
            if let Some(labels) = window.processes.get(&pid) {
                let values = [
                    &labels.exe,
                    &labels.cgroup,
                    &labels.container_id,
                    &labels.service,
                    &labels.pod_uid,
                    &labels.unit,
                ];
                for (key, value) in keys.iter().zip(values) {
                    if let Some(v) = value {
                        s.label.push(proto::Label {
                            key: *key,
                            str: strings.get(v),
                            ..Default::default()
                        });
                    }
                }
            }
            s.label.push(proto::Label {
                key: host_key,
                str: host,
                ..Default::default()
            });
        }
        // The writer fills build ids from the frames' objects where the
        // symbolizer knew them; the rest are read from the files here.
        for m in p.mapping.iter_mut().filter(|m| m.build_id == 0) {
            let Some(file) = strings.table.get(m.filename as usize).cloned() else {
                continue;
            };
            if !file.starts_with('/') {
                continue;
            }
            let pid = mapping_pid
                .get((m.id as usize).wrapping_sub(1))
                .copied()
                .flatten();
            if let Some(id) = self.build_id(&file, pid) {
                m.build_id = strings.get(&id);
            }
        }
        p
    }

    /// The window as a gzipped `profile.proto`, as servers take it.
    pub fn encode_gzip(&mut self, window: &Window) -> io::Result<Vec<u8>> {
        let bytes = self.build(window).encode_to_vec();
        let mut gz = GzEncoder::new(Vec::with_capacity(bytes.len() / 3), Compression::fast());
        gz.write_all(&bytes)?;
        gz.finish()
    }

    /// The GNU build id of `file` as hex, read directly or under the root
    /// of process `pid`.
    pub fn build_id(&mut self, file: &str, pid: Option<u32>) -> Option<Arc<str>> {
        if let Some(id) = self.build_ids.get(file) {
            return id.clone();
        }
        if self.build_ids.len() >= MAX_BUILD_IDS {
            self.build_ids.clear();
        }
        let read = |path: &str| super::buildid::read(std::path::Path::new(path)).map(Arc::from);
        let id = read(file).or_else(|| pid.and_then(|p| read(&format!("/proc/{p}/root{file}"))));
        self.build_ids.insert(file.to_string(), id.clone());
        id
    }
}
