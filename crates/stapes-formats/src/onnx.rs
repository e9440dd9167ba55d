//! ONNX reader: the named constant tensors of a model (graph initializers and `Constant` nodes,
//! including those inside `If`/`Loop` subgraphs) plus a flat list of nodes for introspection.
//!
//! The protobuf messages are hand-written `prost` structs holding only the fields we read (prost
//! skips the others), so no `protoc` is needed at build time. Field numbers follow `onnx.proto`.

use crate::FormatError;
use prost::Message;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `onnx.ModelProto` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    #[prost(string, tag = "2")]
    pub producer_name: String,
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
}

/// `onnx.OperatorSetIdProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// `onnx.GraphProto` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
}

/// `onnx.NodeProto` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub op_type: String,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
}

/// `onnx.AttributeProto` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(float, tag = "2")]
    pub f: f32,
    #[prost(int64, tag = "3")]
    pub i: i64,
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    #[prost(message, optional, tag = "6")]
    pub g: Option<GraphProto>,
    #[prost(float, repeated, tag = "7")]
    pub floats: Vec<f32>,
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    #[prost(message, repeated, tag = "11")]
    pub graphs: Vec<GraphProto>,
    #[prost(int32, tag = "20")]
    pub r#type: i32,
}

/// `onnx.TensorProto` (subset; external data is not supported and is reported as an error).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    #[prost(string, tag = "8")]
    pub name: String,
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    #[prost(int32, tag = "14")]
    pub data_location: i32,
}

/// `onnx.StringStringEntryProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `TensorProto.DataType` values we understand.
pub mod dtype {
    pub const FLOAT: i32 = 1;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const BOOL: i32 = 9;
    pub const FLOAT16: i32 = 10;
    pub const DOUBLE: i32 = 11;
    pub const BFLOAT16: i32 = 16;
}

/// The values of a decoded tensor: floating types widen to f32, integer types to i64.
#[derive(Clone, Debug, PartialEq)]
pub enum OnnxData {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

/// One named constant of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct OnnxTensor {
    pub name: String,
    /// Outermost first, as stored.
    pub dims: Vec<usize>,
    /// The stored `TensorProto.DataType`.
    pub data_type: i32,
    pub data: OnnxData,
}

impl OnnxTensor {
    /// The values as f32, or `None` for an integer tensor.
    pub fn f32_values(&self) -> Option<&[f32]> {
        match &self.data {
            OnnxData::F32(v) => Some(v),
            OnnxData::I64(_) => None,
        }
    }
}

/// A node of the graph, flattened out of subgraphs (for checking hyper-parameters such as conv
/// strides; the graph is not executed).
#[derive(Clone, Debug, PartialEq)]
pub struct OnnxNode {
    pub name: String,
    pub op_type: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Integer and integer-list attributes (`strides`, `pads`, `kernel_shape`, `group`, …).
    pub int_attrs: BTreeMap<String, Vec<i64>>,
}

/// What [`read_onnx`] returns.
#[derive(Clone, Debug)]
pub struct OnnxFile {
    pub path: PathBuf,
    pub ir_version: i64,
    pub producer: String,
    /// `(domain, version)`; the default domain is `""`.
    pub opsets: Vec<(String, i64)>,
    /// Initializers and `Constant` outputs of the main graph and every subgraph, by name.
    pub tensors: BTreeMap<String, OnnxTensor>,
    /// Every node, depth first (a subgraph's nodes follow the node that holds it).
    pub nodes: Vec<OnnxNode>,
}

impl OnnxFile {
    pub fn tensor(&self, name: &str) -> Option<&OnnxTensor> {
        self.tensors.get(name)
    }
}

/// Read an ONNX model file.
pub fn read_onnx(path: impl AsRef<Path>) -> Result<OnnxFile, FormatError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_onnx(path, &bytes)
}

/// Parse ONNX bytes; `path` is only used in errors.
pub fn parse_onnx(path: &Path, bytes: &[u8]) -> Result<OnnxFile, FormatError> {
    let corrupt = |detail: String| FormatError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    if bytes.is_empty() {
        return Err(corrupt("empty file (not an ONNX model)".into()));
    }
    let model = ModelProto::decode(bytes)
        .map_err(|e| corrupt(format!("not a valid ONNX protobuf: {e}")))?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| corrupt("the ONNX model has no graph".into()))?;
    if model.ir_version <= 0 {
        return Err(corrupt(format!(
            "ir_version {} is not a valid ONNX IR version",
            model.ir_version
        )));
    }
    let mut out = OnnxFile {
        path: path.to_path_buf(),
        ir_version: model.ir_version,
        producer: model.producer_name.clone(),
        opsets: model
            .opset_import
            .iter()
            .map(|o| (o.domain.clone(), o.version))
            .collect(),
        tensors: BTreeMap::new(),
        nodes: Vec::new(),
    };
    collect_graph(path, graph, &mut out, 0)?;
    Ok(out)
}

/// Subgraphs nest only a few levels in real exports; the bound keeps a hostile file from
/// recursing without end.
const MAX_GRAPH_DEPTH: usize = 32;

fn collect_graph(
    path: &Path,
    g: &GraphProto,
    out: &mut OnnxFile,
    depth: usize,
) -> Result<(), FormatError> {
    if depth > MAX_GRAPH_DEPTH {
        return Err(FormatError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("subgraphs nested deeper than {MAX_GRAPH_DEPTH}"),
        });
    }
    for t in &g.initializer {
        let decoded = decode_tensor(path, t, &t.name)?;
        out.tensors.insert(t.name.clone(), decoded);
    }
    for n in &g.node {
        let mut int_attrs = BTreeMap::new();
        for a in &n.attribute {
            if !a.ints.is_empty() {
                int_attrs.insert(a.name.clone(), a.ints.clone());
            } else if a.r#type == ATTR_INT {
                int_attrs.insert(a.name.clone(), vec![a.i]);
            }
        }
        out.nodes.push(OnnxNode {
            name: n.name.clone(),
            op_type: n.op_type.clone(),
            inputs: n.input.clone(),
            outputs: n.output.clone(),
            int_attrs,
        });
        if n.op_type == "Constant" {
            if let (Some(a), Some(name)) = (
                n.attribute.iter().find(|a| a.name == "value"),
                n.output.first(),
            ) {
                if let Some(t) = &a.t {
                    let decoded = decode_tensor(path, t, name)?;
                    out.tensors.insert(name.clone(), decoded);
                }
            }
        }
        for a in &n.attribute {
            if let Some(sub) = &a.g {
                collect_graph(path, sub, out, depth + 1)?;
            }
            for sub in &a.graphs {
                collect_graph(path, sub, out, depth + 1)?;
            }
        }
    }
    Ok(())
}

/// `AttributeProto.AttributeType.INT`.
const ATTR_INT: i32 = 2;

fn decode_tensor(path: &Path, t: &TensorProto, name: &str) -> Result<OnnxTensor, FormatError> {
    let bad = |detail: String| FormatError::BadTensor {
        path: path.to_path_buf(),
        tensor: name.to_string(),
        detail,
    };
    if t.data_location == 1 || !t.external_data.is_empty() {
        return Err(bad("stored as external data (not supported)".into()));
    }
    let mut dims = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        if d < 0 {
            return Err(bad(format!("negative dimension {d} in {:?}", t.dims)));
        }
        dims.push(d as usize);
    }
    let n = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad(format!("dimensions {dims:?} overflow")))?;
    let raw = &t.raw_data;
    let check_raw = |width: usize| -> Result<(), FormatError> {
        let want = n
            .checked_mul(width)
            .ok_or_else(|| bad("size overflows".into()))?;
        if raw.len() != want {
            return Err(bad(format!(
                "raw_data holds {} bytes, dims {dims:?} need {want} (truncated or corrupt)",
                raw.len()
            )));
        }
        Ok(())
    };
    let check_len = |got: usize| -> Result<(), FormatError> {
        if got != n {
            return Err(bad(format!("holds {got} values, dims {dims:?} need {n}")));
        }
        Ok(())
    };
    let data = match t.data_type {
        dtype::FLOAT => {
            if !raw.is_empty() || (t.float_data.is_empty() && n > 0) {
                check_raw(4)?;
                OnnxData::F32(
                    raw.chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                )
            } else {
                check_len(t.float_data.len())?;
                OnnxData::F32(t.float_data.clone())
            }
        }
        dtype::FLOAT16 | dtype::BFLOAT16 => {
            // Without raw_data, 16-bit values travel as the low half of int32_data.
            let bits: Vec<u16> = if !raw.is_empty() || (t.int32_data.is_empty() && n > 0) {
                check_raw(2)?;
                raw.chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect()
            } else {
                check_len(t.int32_data.len())?;
                t.int32_data.iter().map(|&v| v as u16).collect()
            };
            let f = if t.data_type == dtype::FLOAT16 {
                bits.iter()
                    .map(|&b| half::f16::from_bits(b).to_f32())
                    .collect()
            } else {
                bits.iter()
                    .map(|&b| half::bf16::from_bits(b).to_f32())
                    .collect()
            };
            OnnxData::F32(f)
        }
        dtype::DOUBLE => {
            if !raw.is_empty() || (t.double_data.is_empty() && n > 0) {
                check_raw(8)?;
                OnnxData::F32(
                    raw.chunks_exact(8)
                        .map(|c| {
                            f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                                as f32
                        })
                        .collect(),
                )
            } else {
                check_len(t.double_data.len())?;
                OnnxData::F32(t.double_data.iter().map(|&v| v as f32).collect())
            }
        }
        dtype::INT64 => {
            if !raw.is_empty() || (t.int64_data.is_empty() && n > 0) {
                check_raw(8)?;
                OnnxData::I64(
                    raw.chunks_exact(8)
                        .map(|c| {
                            i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                        })
                        .collect(),
                )
            } else {
                check_len(t.int64_data.len())?;
                OnnxData::I64(t.int64_data.clone())
            }
        }
        dtype::INT32 | dtype::BOOL => {
            if !raw.is_empty() || (t.int32_data.is_empty() && n > 0) {
                let width = if t.data_type == dtype::BOOL { 1 } else { 4 };
                check_raw(width)?;
                OnnxData::I64(if width == 1 {
                    raw.iter().map(|&b| b as i64).collect()
                } else {
                    raw.chunks_exact(4)
                        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                        .collect()
                })
            } else {
                check_len(t.int32_data.len())?;
                OnnxData::I64(t.int32_data.iter().map(|&v| v as i64).collect())
            }
        }
        other => return Err(bad(format!("data type {other} is not supported"))),
    };
    Ok(OnnxTensor {
        name: name.to_string(),
        dims,
        data_type: t.data_type,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_with(t: TensorProto) -> Vec<u8> {
        let g = GraphProto {
            node: vec![],
            name: "g".into(),
            initializer: vec![t],
        };
        ModelProto {
            ir_version: 8,
            producer_name: "test".into(),
            graph: Some(g),
            opset_import: vec![],
        }
        .encode_to_vec()
    }

    #[test]
    fn reads_raw_and_field_floats_and_constant_nodes_in_subgraphs() {
        let raw: Vec<u8> = [1.5f32, -2.0, 3.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let t = TensorProto {
            dims: vec![3],
            data_type: dtype::FLOAT,
            raw_data: raw,
            name: "w".into(),
            ..Default::default()
        };
        let c = TensorProto {
            dims: vec![2],
            data_type: dtype::FLOAT,
            float_data: vec![7.0, 8.0],
            ..Default::default()
        };
        let inner = GraphProto {
            node: vec![NodeProto {
                output: vec!["inner_c".into()],
                op_type: "Constant".into(),
                attribute: vec![AttributeProto {
                    name: "value".into(),
                    t: Some(c),
                    r#type: 4,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let g = GraphProto {
            node: vec![NodeProto {
                op_type: "If".into(),
                attribute: vec![AttributeProto {
                    name: "then_branch".into(),
                    g: Some(inner),
                    r#type: 5,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            name: "main".into(),
            initializer: vec![t],
        };
        let bytes = ModelProto {
            ir_version: 8,
            producer_name: "p".into(),
            graph: Some(g),
            opset_import: vec![],
        }
        .encode_to_vec();
        let f = parse_onnx(Path::new("x.onnx"), &bytes).unwrap();
        assert_eq!(
            f.tensor("w").unwrap().f32_values().unwrap(),
            &[1.5, -2.0, 3.25]
        );
        assert_eq!(
            f.tensor("inner_c").unwrap().f32_values().unwrap(),
            &[7.0, 8.0]
        );
        assert_eq!(f.nodes.len(), 2);
    }

    #[test]
    fn truncated_raw_data_names_the_tensor() {
        let t = TensorProto {
            dims: vec![4],
            data_type: dtype::FLOAT,
            raw_data: vec![0; 12],
            name: "enc.w".into(),
            ..Default::default()
        };
        let err = parse_onnx(Path::new("m.onnx"), &model_with(t))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("m.onnx") && err.contains("enc.w") && err.contains("12 bytes"),
            "{err}"
        );
    }

    #[test]
    fn garbage_and_empty_input_are_errors() {
        assert!(parse_onnx(Path::new("e.onnx"), &[]).is_err());
        assert!(parse_onnx(Path::new("g.onnx"), &[0xff, 0xff, 0xff, 0x07, 0x01]).is_err());
        // A valid protobuf that is not a model: no graph.
        let bytes = ModelProto {
            ir_version: 8,
            ..Default::default()
        }
        .encode_to_vec();
        assert!(parse_onnx(Path::new("n.onnx"), &bytes)
            .unwrap_err()
            .to_string()
            .contains("no graph"));
    }
}
