//! Parca's `ProfileStoreService.WriteRaw` over gRPC (tonic, rustls): one
//! series per window, labelled with the profile's name (`flare_cpu`,
//! `flare_offcpu`, `flare_wall`) and the host,
//! holding the window's gzipped pprof.
//!
//! tonic's generic client is driven with prost's codec and the hand-written
//! messages of [`super::parca_proto`]; a single-threaded tokio runtime owned
//! by the destination runs each call to completion, so the sender thread
//! stays plain blocking code.

use std::time::Duration;

use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use super::auth::Connection;
use super::parca_proto as pb;
use super::pprof::Encoder;
use super::{server_text, DeliveryError, Destination, Encode, Payload, Window};
use crate::profile::Kind;

/// A Parca server (or agent-compatible store).
pub struct Parca {
    addr: String,
    host: String,
    token: Option<String>,
    runtime: tokio::runtime::Runtime,
    channel: Channel,
}

/// Wraps each window's gzipped pprof in a `WriteRaw` request.
struct ParcaEncoder {
    pprof: Encoder,
    host: String,
}

impl Encode for ParcaEncoder {
    fn encode(&mut self, window: &Window) -> std::io::Result<Payload> {
        let pprof = self.pprof.encode_gzip(window)?;
        let name = profile_name(window.profile.meta.kind);
        let mut req = request(&name, &self.host, pprof);
        if let (Some(service), Some(labels)) = (&window.service, &mut req.series[0].labels) {
            labels.labels.push(pb::Label {
                name: "service_name".into(),
                value: service.to_string(),
            });
        }
        Ok(Payload::of(window, req.encode_to_vec()))
    }
}

/// The series name (`__name__`) of profiles of `kind`: `flare_cpu`,
/// `flare_offcpu`, `flare_wall`, as pprof names their sample types.
pub fn profile_name(kind: Kind) -> String {
    format!("flare_{}", super::kind_name(kind))
}

/// The request for one gzipped pprof of `host`, in series `name`.
pub fn request(name: &str, host: &str, pprof: Vec<u8>) -> pb::WriteRawRequest {
    let label = |name: &str, value: &str| pb::Label {
        name: name.into(),
        value: value.into(),
    };
    pb::WriteRawRequest {
        tenant: String::new(),
        series: vec![pb::RawProfileSeries {
            labels: Some(pb::LabelSet {
                labels: vec![label("__name__", name), label("hostname", host)],
            }),
            samples: vec![pb::RawSample {
                raw_profile: pprof,
                executable_info: Vec::new(),
            }],
        }],
        normalized: false,
    }
}

impl Parca {
    /// `addr` is `host:port` (plain HTTP/2), or a URL: `https://host:port`
    /// for TLS.
    pub fn new(
        addr: &str,
        host: &str,
        token: Option<String>,
        conn: &Connection,
    ) -> Result<Self, String> {
        let url = if addr.contains("://") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        let bad = |e: &dyn std::fmt::Display| format!("--parca {addr}: {e}");
        let mut endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| bad(&e))?
            .timeout(conn.timeout)
            .connect_timeout(conn.timeout.min(Duration::from_secs(5)));
        if url.starts_with("https://") {
            let mut tls = ClientTlsConfig::new();
            tls = match &conn.ca_pem {
                Some(pem) => tls.ca_certificate(Certificate::from_pem(pem.as_slice())),
                None => tls.with_webpki_roots(),
            };
            endpoint = endpoint.tls_config(tls).map_err(|e| bad(&e))?;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| bad(&e))?;
        let channel = {
            let _guard = runtime.enter();
            endpoint.connect_lazy()
        };
        Ok(Parca {
            addr: url,
            host: host.to_string(),
            token,
            runtime,
            channel,
        })
    }
}

/// Whether a gRPC status is worth retrying.
fn retryable(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(
        code,
        Unavailable
            | DeadlineExceeded
            | ResourceExhausted
            | Aborted
            | Internal
            | Unknown
            | Cancelled
    )
}

impl Destination for Parca {
    fn name(&self) -> String {
        format!("parca {}", self.addr)
    }

    fn encoder(&self) -> Box<dyn Encode> {
        Box::new(ParcaEncoder {
            pprof: Encoder::new(),
            host: self.host.clone(),
        })
    }

    fn deliver(&mut self, payload: &Payload, timeout: Duration) -> Result<(), DeliveryError> {
        let what = Destination::name(self);
        let message = pb::WriteRawRequest::decode(payload.body.as_slice()).map_err(|e| {
            DeliveryError::Rejected(format!("{what}: spooled request unreadable: {e}"))
        })?;
        let mut request = tonic::Request::new(message);
        if let Some(t) = &self.token {
            let value = format!("Bearer {t}").parse().map_err(|_| {
                DeliveryError::Rejected(format!(
                    "{what}: FLARE_PARCA_TOKEN is not a valid header value"
                ))
            })?;
            request.metadata_mut().insert("authorization", value);
        }
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let path = PathAndQuery::from_static(pb::WRITE_RAW_PATH);
        request.set_timeout(timeout);
        let call = async move {
            grpc.ready()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            grpc.unary::<_, pb::WriteRawResponse, _>(
                request,
                path,
                tonic_prost::ProstCodec::default(),
            )
            .await
        };
        // The whole call, connecting included, within the timeout.
        let result = self.runtime.block_on(async move {
            tokio::time::timeout(timeout, call)
                .await
                .unwrap_or_else(|_| {
                    Err(tonic::Status::deadline_exceeded(format!(
                        "no answer in {} s",
                        timeout.as_secs_f64()
                    )))
                })
        });
        match result {
            Ok(_) => Ok(()),
            Err(s) if retryable(s.code()) => Err(DeliveryError::Retry(format!(
                "{what}: {}",
                server_text(s.message())
            ))),
            Err(s) => Err(DeliveryError::Rejected(format!(
                "{what}: {:?}: {}",
                s.code(),
                server_text(s.message())
            ))),
        }
    }
}
