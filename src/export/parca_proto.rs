//! Parca's `parca.profilestore.v1alpha1` messages for the `WriteRaw` call
//! (vendored in `proto/parca/`), declared by hand with prost's derive so
//! that building needs no protoc. Only the unary `WriteRaw` is used; the
//! Arrow-based calls are not.

/// The gRPC path of `ProfileStoreService.WriteRaw`.
pub const WRITE_RAW_PATH: &str = "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw";

#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRawRequest {
    /// Deprecated by Parca; left empty.
    #[prost(string, tag = "1")]
    pub tenant: String,
    #[prost(message, repeated, tag = "2")]
    pub series: Vec<RawProfileSeries>,
    /// Whether addresses are already file offsets (flare sends symbolized
    /// profiles with process addresses: false).
    #[prost(bool, tag = "3")]
    pub normalized: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRawResponse {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RawProfileSeries {
    #[prost(message, optional, tag = "1")]
    pub labels: Option<LabelSet>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelSet {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
}

/// One pprof profile (gzipped or not) and, optionally, how to normalize
/// its executable's addresses.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawSample {
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    pub executable_info: Vec<ExecutableInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecutableInfo {
    #[prost(uint32, tag = "1")]
    pub elf_type: u32,
    #[prost(message, optional, tag = "2")]
    pub load_segment: Option<LoadSegment>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LoadSegment {
    #[prost(uint64, tag = "1")]
    pub offset: u64,
    #[prost(uint64, tag = "2")]
    pub vaddr: u64,
}
