//! TensorBoard event files: `Event` protobuf messages (the few of TensorFlow's `event.proto`
//! and `summary.proto` that scalars and text need), each framed as a TFRecord.
//!
//! A record is: the data length (u64, little endian), the masked CRC-32C of those 8 bytes
//! (u32), the data, the masked CRC-32C of the data. TensorBoard skips a file whose checksums
//! do not match, so they are written and checked here exactly as TensorFlow does.

use prost::Message;
use std::io::{self, Read, Write};

/// `tensorflow.Event`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// Seconds since the Unix epoch.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(oneof = "What", tags = "3, 5")]
    pub what: Option<What>,
}

/// What an event carries (the fields of `Event.what` used here).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum What {
    /// The first event of a file: `brain.Event:2`.
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryValue {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
    #[prost(oneof = "Value", tags = "2, 8")]
    pub value: Option<Value>,
}

/// The value of a `Summary.Value` (the fields used here).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    #[prost(message, tag = "8")]
    Tensor(TensorProto),
}

/// `tensorflow.SummaryMetadata`: which TensorBoard plugin shows the value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
}

/// `tensorflow.SummaryMetadata.PluginData`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginData {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

/// `tensorflow.TensorProto`, for string tensors only.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// `tensorflow.DataType`; [`DT_STRING`] here.
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShape>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
}

/// `tensorflow.TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShape {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
}

/// `tensorflow.TensorShapeProto.Dim`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

/// `tensorflow.DataType.DT_STRING`.
pub const DT_STRING: i32 = 7;

/// The version string TensorBoard expects in a file's first event.
pub const FILE_VERSION: &str = "brain.Event:2";

impl Event {
    /// The first event of every file.
    pub fn file_version(wall_time: f64) -> Event {
        Event { wall_time, step: 0, what: Some(What::FileVersion(FILE_VERSION.into())) }
    }

    /// A scalar `tag` at `step`.
    pub fn scalar(wall_time: f64, step: i64, tag: &str, value: f32) -> Event {
        let value = SummaryValue { tag: tag.into(), metadata: None, value: Some(Value::SimpleValue(value)) };
        Event { wall_time, step, what: Some(What::Summary(Summary { value: vec![value] })) }
    }

    /// Markdown `text` under `tag`, shown by TensorBoard's Text tab.
    pub fn text(wall_time: f64, step: i64, tag: &str, text: &str) -> Event {
        let tensor = TensorProto {
            dtype: DT_STRING,
            tensor_shape: Some(TensorShape { dim: vec![Dim { size: 1 }] }),
            string_val: vec![text.as_bytes().to_vec()],
        };
        let metadata =
            SummaryMetadata { plugin_data: Some(PluginData { plugin_name: "text".into(), content: Vec::new() }) };
        let value = SummaryValue { tag: tag.into(), metadata: Some(metadata), value: Some(Value::Tensor(tensor)) };
        Event { wall_time, step, what: Some(What::Summary(Summary { value: vec![value] })) }
    }
}

/// TFRecord's checksum: CRC-32C rotated and offset, so that checksumming data that holds
/// checksums stays strong.
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Writes one record holding `data`.
pub fn write_record(out: &mut impl Write, data: &[u8]) -> io::Result<()> {
    let len = (data.len() as u64).to_le_bytes();
    out.write_all(&len)?;
    out.write_all(&masked_crc(&len).to_le_bytes())?;
    out.write_all(data)?;
    out.write_all(&masked_crc(data).to_le_bytes())
}

/// Writes `event` as one record.
pub fn write_event(out: &mut impl Write, event: &Event) -> io::Result<()> {
    write_record(out, &event.encode_to_vec())
}

/// Reads every record of `input`, checking both checksums of each; an error names the record
/// that is cut short or damaged.
pub fn read_records(mut input: impl Read) -> io::Result<Vec<Vec<u8>>> {
    let mut records = Vec::new();
    loop {
        let mut len = [0u8; 8];
        match input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(records),
            Err(e) => return Err(e),
        }
        let n = records.len();
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("record {n}: {what}"));
        let mut crc = [0u8; 4];
        input.read_exact(&mut crc)?;
        if u32::from_le_bytes(crc) != masked_crc(&len) {
            return Err(bad("the length's checksum does not match"));
        }
        let size = usize::try_from(u64::from_le_bytes(len)).map_err(|_| bad("impossible length"))?;
        let mut data = Vec::new();
        input.by_ref().take(size as u64).read_to_end(&mut data)?;
        if data.len() != size {
            return Err(bad("cut short"));
        }
        input.read_exact(&mut crc)?;
        if u32::from_le_bytes(crc) != masked_crc(&data) {
            return Err(bad("the data's checksum does not match"));
        }
        records.push(data);
    }
}

/// Decodes the events of a file's records.
pub fn decode_events(records: &[Vec<u8>]) -> Result<Vec<Event>, prost::DecodeError> {
    records.iter().map(|r| Event::decode(r.as_slice())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crc_matches_tensorflow() {
        // Values of TensorBoard's own masked_crc32c (tensorboard.compat.tensorflow_stub).
        assert_eq!(masked_crc(b"123456789"), 0xc78a_b0e5);
        assert_eq!(masked_crc(&0u64.to_le_bytes()), 0x0798_0329);
    }

    #[test]
    fn a_flipped_byte_is_caught() {
        let mut buf = Vec::new();
        write_event(&mut buf, &Event::scalar(1.0, 2, "eval/loss", 0.5)).unwrap();
        assert_eq!(read_records(buf.as_slice()).unwrap().len(), 1);
        let last = buf.len() - 6;
        buf[last] ^= 1;
        let e = read_records(buf.as_slice()).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
    }
}
