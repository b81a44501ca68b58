//! OpenTelemetry profiles over OTLP/HTTP: `POST URL/v1development/profiles`
//! with an `ExportProfilesServiceRequest` in protobuf.
//!
//! The window is built as pprof first (the same interned tables) and then
//! laid out as OTLP's dictionary: pprof's 1-based ids become indices into
//! tables whose entry 0 is the zero value, stacks are interned, and pprof
//! labels become attributes under OpenTelemetry's semantic-convention
//! names (`process.pid`, `thread.id`, `thread.name`,
//! `process.executable.path`, `container.id`, `service.name` and
//! `k8s.pod.uid` where a process has them, `host.name` on the
//! resource). The values are pprof's first sample type: CPU samples'
//! counts (the period one sample's CPU time), or off-CPU or wall-clock
//! nanoseconds. Where the run kept times, each sample carries its events'
//! `timestamps_unix_nano`, one value per timestamp.

use prost::Message;
use std::collections::HashMap;
use std::time::Duration;

use super::auth::{Connection, Headers};
use super::otlp_proto as otlp;
use super::pprof::Encoder;
use super::{unix_nanos, DeliveryError, Destination, Encode, Payload, Window};
use crate::output::pprof::proto as pprof;

/// The request path under the collector's base URL.
pub const PATH: &str = "/v1development/profiles";

/// pprof label keys and the OpenTelemetry attribute each becomes.
const ATTRIBUTES: &[(&str, &str)] = &[
    ("pid", "process.pid"),
    ("tid", "thread.id"),
    ("comm", "thread.name"),
    ("exe", "process.executable.path"),
    ("cgroup", "process.linux.cgroup"),
    ("container_id", "container.id"),
    ("service_name", "service.name"),
    ("pod_uid", "k8s.pod.uid"),
    ("systemd_unit", "systemd.unit"),
];

/// Each sample's events as (Unix time in ns, value), in time order, when
/// the profile kept times.
fn timestamps(profile: &crate::profile::Profile) -> Option<Vec<Vec<(u64, u64)>>> {
    let t = profile.timeline.as_ref()?;
    let mut out = vec![Vec::new(); profile.samples.len()];
    for e in &t.events {
        if let Some(v) = out.get_mut(e.sample as usize) {
            v.push((t.origin_unix_ns.saturating_add(t.offset_ns(e)), e.value));
        }
    }
    for v in &mut out {
        v.sort_unstable();
    }
    Some(out)
}

/// Interning of attributes (key, value) into the dictionary.
#[derive(Default)]
struct Attributes {
    table: Vec<otlp::KeyValueAndUnit>,
    index: HashMap<(i32, AttrValue), i32>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum AttrValue {
    Str(i32),
    Int(i64),
}

impl Attributes {
    fn get(&mut self, key: i32, value: AttrValue) -> i32 {
        if self.table.is_empty() {
            self.table.push(otlp::KeyValueAndUnit::default());
        }
        if let Some(&i) = self.index.get(&(key, value.clone())) {
            return i;
        }
        let i = self.table.len() as i32;
        let v = match value {
            AttrValue::Str(s) => otlp::any_value::Value::StringValueStrindex(s),
            AttrValue::Int(n) => otlp::any_value::Value::IntValue(n),
        };
        self.table.push(otlp::KeyValueAndUnit {
            key_strindex: key,
            value: Some(otlp::AnyValue { value: Some(v) }),
            unit_strindex: 0,
        });
        self.index.insert((key, value), i);
        i
    }
}

fn kv(key: &str, value: &str) -> otlp::KeyValue {
    otlp::KeyValue {
        key: key.to_string(),
        value: Some(otlp::AnyValue {
            value: Some(otlp::any_value::Value::StringValue(value.to_string())),
        }),
        key_strindex: 0,
    }
}

/// Lays out a pprof profile of `window` as an OTLP export request.
pub fn from_pprof(
    p: pprof::Profile,
    window: &Window,
    service: &str,
) -> otlp::ExportProfilesServiceRequest {
    let mut strings = p.string_table;
    let mut string_index: HashMap<String, i32> = strings
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as i32))
        .collect();
    let mut string = |s: &str, strings: &mut Vec<String>| -> i32 {
        if let Some(&i) = string_index.get(s) {
            return i;
        }
        let i = strings.len() as i32;
        strings.push(s.to_string());
        string_index.insert(s.to_string(), i);
        i
    };
    let mut attributes = Attributes::default();
    attributes.get(0, AttrValue::Int(0));
    let build_id_key = string("process.executable.build_id.gnu", &mut strings);

    // pprof ids are 1-based and dense (flare's writer makes them so): id
    // n is index n here, after the zero value.
    let mut mapping_table = vec![otlp::Mapping::default()];
    for m in &p.mapping {
        let mut attribute_indices = Vec::new();
        if m.build_id != 0 {
            attribute_indices.push(attributes.get(build_id_key, AttrValue::Str(m.build_id as i32)));
        }
        mapping_table.push(otlp::Mapping {
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename_strindex: m.filename as i32,
            attribute_indices,
        });
    }
    let mut function_table = vec![otlp::Function::default()];
    function_table.extend(p.function.iter().map(|f| otlp::Function {
        name_strindex: f.name as i32,
        system_name_strindex: f.system_name as i32,
        filename_strindex: f.filename as i32,
        start_line: f.start_line,
    }));
    let mut location_table = vec![otlp::Location::default()];
    location_table.extend(p.location.iter().map(|l| {
        otlp::Location {
            mapping_index: l.mapping_id as i32,
            address: l.address,
            lines: l
                .line
                .iter()
                .map(|x| otlp::Line {
                    function_index: x.function_id as i32,
                    line: x.line,
                    column: x.column,
                })
                .collect(),
            attribute_indices: Vec::new(),
        }
    }));

    let keys: HashMap<i64, i32> = ATTRIBUTES
        .iter()
        .filter_map(|(from, to)| {
            let from = strings.iter().position(|x| x == from)? as i64;
            Some((from, string(to, &mut strings)))
        })
        .collect();
    let mut stack_table = vec![otlp::Stack::default()];
    let mut stacks: HashMap<Vec<i32>, i32> = HashMap::new();
    let mut samples = Vec::with_capacity(p.sample.len());
    let times = timestamps(&window.profile);
    for (i, s) in p.sample.iter().enumerate() {
        let locations: Vec<i32> = s.location_id.iter().map(|&l| l as i32).collect();
        let stack_index = *stacks.entry(locations).or_insert_with_key(|k| {
            stack_table.push(otlp::Stack {
                location_indices: k.clone(),
            });
            stack_table.len() as i32 - 1
        });
        let attribute_indices = s
            .label
            .iter()
            .filter_map(|l| {
                let key = *keys.get(&l.key)?;
                let value = if l.str != 0 {
                    AttrValue::Str(l.str as i32)
                } else {
                    AttrValue::Int(l.num)
                };
                Some(attributes.get(key, value))
            })
            .collect();
        let total = s.value.first().copied().unwrap_or(0);
        // One value per timestamp where times were kept (pprof's sample
        // i is the profile's sample i), each event's share of the total.
        let (values, timestamps_unix_nano) = match times.as_ref().and_then(|t| t.get(i)) {
            Some(events) if !events.is_empty() => {
                let sum: u64 = events.iter().map(|&(_, v)| v).sum();
                let values = events
                    .iter()
                    .map(|&(_, v)| (total as i128 * v as i128 / sum.max(1) as i128) as i64)
                    .collect();
                (values, events.iter().map(|&(t, _)| t).collect())
            }
            _ => (vec![total], Vec::new()),
        };
        samples.push(otlp::Sample {
            stack_index,
            attribute_indices,
            link_index: 0,
            values,
            timestamps_unix_nano,
        });
    }

    // The first of pprof's sample types is the value carried (CPU
    // samples' count, off-CPU or wall-clock nanoseconds); the period's
    // type as pprof gives it. Their strings are pprof's, kept above.
    let value_type = |t: Option<&pprof::ValueType>| otlp::ValueType {
        type_strindex: t.map_or(0, |t| t.r#type as i32),
        unit_strindex: t.map_or(0, |t| t.unit as i32),
    };
    let samples_type = value_type(p.sample_type.first());
    let period_type = value_type(p.period_type.as_ref());
    let start = unix_nanos(window.start);
    let profile = otlp::Profile {
        sample_type: Some(samples_type),
        samples,
        time_unix_nano: start,
        duration_nano: unix_nanos(window.end).saturating_sub(start),
        period_type: Some(period_type),
        period: p.period,
        ..Default::default()
    };
    let resource = otlp::Resource {
        attributes: vec![
            kv("host.name", &window.host),
            kv("service.name", window.service.as_deref().unwrap_or(service)),
        ],
        dropped_attributes_count: 0,
    };
    otlp::ExportProfilesServiceRequest {
        resource_profiles: vec![otlp::ResourceProfiles {
            resource: Some(resource),
            scope_profiles: vec![otlp::ScopeProfiles {
                scope: Some(otlp::InstrumentationScope {
                    name: "flare".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                profiles: vec![profile],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(otlp::ProfilesDictionary {
            mapping_table,
            location_table,
            function_table,
            link_table: vec![otlp::Link {
                trace_id: vec![0; 16],
                span_id: vec![0; 8],
            }],
            string_table: strings,
            attribute_table: attributes.table,
            stack_table,
        }),
    }
}

/// An OTLP/HTTP collector.
pub struct Otlp {
    url: String,
    service: String,
    agent: ureq::Agent,
    headers: Headers,
}

/// Lays windows out as OTLP requests for `service`.
struct OtlpEncoder {
    pprof: Encoder,
    service: String,
}

impl Encode for OtlpEncoder {
    fn encode(&mut self, window: &Window) -> std::io::Result<Payload> {
        let p = self.pprof.build(window);
        let request = from_pprof(p, window, &self.service);
        Ok(Payload::of(window, request.encode_to_vec()))
    }
}

impl Otlp {
    /// `base` is the collector's URL (`http://host:4318`); the signal's
    /// path is appended unless the URL already ends with it.
    pub fn new(base: &str, service: &str, headers: Headers, conn: &Connection) -> Self {
        let base = base.trim_end_matches('/');
        let url = if base.ends_with(PATH) {
            base.to_string()
        } else {
            format!("{base}{PATH}")
        };
        Otlp {
            url,
            service: service.to_string(),
            agent: super::auth::http_agent(conn),
            headers,
        }
    }
}

impl Destination for Otlp {
    fn name(&self) -> String {
        format!("otlp {}", self.url)
    }

    /// Samples carry `timestamps_unix_nano`.
    fn keeps_time(&self) -> bool {
        true
    }

    fn encoder(&self) -> Box<dyn Encode> {
        Box::new(OtlpEncoder {
            pprof: Encoder::new(),
            service: self.service.clone(),
        })
    }

    fn deliver(&mut self, payload: &Payload, timeout: Duration) -> Result<(), DeliveryError> {
        let mut req = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/x-protobuf");
        for (k, v) in self.headers.iter() {
            req = req.header(k, v);
        }
        super::auth::send(req, &payload.body, timeout, &self.name())
    }
}
