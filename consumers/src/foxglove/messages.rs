//! Foxglove's well-known message types in their JSON encoding, made from snapbus tensors:
//! `foxglove.RawImage` (an image [`View`]) and `foxglove.PointCloud` (points), with the JSON
//! Schemas Foxglove publishes for them (bytes fields as base64 strings, as Foxglove's JSON
//! encoding has them). Shared by the live bridge and `snapbus export --format foxglove`.

use data_encoding::BASE64;
use serde_json::{Value as Json, json};
use snapbus_schemas::{DType, TensorView};

use crate::fields::{View, scaled_pixels};

/// Schema name of images.
pub const RAW_IMAGE: &str = "foxglove.RawImage";
/// Schema name of point clouds.
pub const POINT_CLOUD: &str = "foxglove.PointCloud";
/// Images larger than this per side are subsampled (every k-th row and column).
pub const MAX_SIDE: u64 = 4096;

/// A `foxglove.Time` of `t_nanos`.
fn time(t_nanos: u64) -> Json {
    json!({"sec": t_nanos / 1_000_000_000, "nsec": t_nanos % 1_000_000_000})
}

fn time_schema() -> Json {
    json!({
        "type": "object",
        "properties": {"sec": {"type": "integer", "minimum": 0}, "nsec": {"type": "integer", "minimum": 0}},
    })
}

/// The JSON Schema of `foxglove.RawImage` or `foxglove.PointCloud` (`None` for other names).
pub fn json_schema(name: &str) -> Option<Json> {
    let bytes = json!({"type": "string", "contentEncoding": "base64"});
    let props = match name {
        RAW_IMAGE => json!({
            "timestamp": time_schema(),
            "frame_id": {"type": "string"},
            "width": {"type": "integer", "minimum": 0},
            "height": {"type": "integer", "minimum": 0},
            "encoding": {"type": "string"},
            "step": {"type": "integer", "minimum": 0},
            "data": bytes,
        }),
        POINT_CLOUD => {
            let vector = |keys: &[&str]| {
                let p: serde_json::Map<String, Json> = keys
                    .iter()
                    .map(|k| ((*k).to_owned(), json!({"type": "number"})))
                    .collect();
                json!({"type": "object", "properties": p})
            };
            json!({
                "timestamp": time_schema(),
                "frame_id": {"type": "string"},
                "pose": {"type": "object", "properties": {
                    "position": vector(&["x", "y", "z"]),
                    "orientation": vector(&["x", "y", "z", "w"]),
                }},
                "point_stride": {"type": "integer", "minimum": 0},
                "fields": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 0},
                    "type": {"type": "integer"},
                }}},
                "data": bytes,
            })
        }
        _ => return None,
    };
    Some(json!({"title": name, "type": "object", "properties": props}))
}

/// The Foxglove message of tensor `t` at `path` of a record of time `t_nanos`: its schema
/// name and its JSON, or `None` when its [`View`] is not an image or points (a series is a
/// field of the record's own message, plottable there).
///
/// Images: u8 as `mono8`/`rgb8`/`rgba8` (1, 3, 4 channels), u16 as `mono16`, f32 as `32FC1`
/// (one channel), every other type and channel count scaled to 8 bits from its min and max
/// (other channel counts: channel 0). Points: x, y, z as f32, in frame `path`.
pub fn of_tensor(t: &TensorView<'_>, path: &str, t_nanos: u64) -> Option<(&'static str, Json)> {
    match View::of(&t.shape)? {
        View::Image {
            height,
            width,
            channels,
        } => {
            let (encoding, size, data) = match (t.dtype, channels) {
                (DType::U16, 1) if height.max(width) <= MAX_SIDE => ("mono16", 2, t.data.to_vec()),
                (DType::F32, 1) if height.max(width) <= MAX_SIDE => ("32FC1", 4, t.data.to_vec()),
                _ => {
                    let stride = height.max(width).div_ceil(MAX_SIDE).max(1);
                    let p = scaled_pixels(t, stride)?;
                    let enc = match p.channels {
                        3 => "rgb8",
                        4 => "rgba8",
                        _ => "mono8",
                    };
                    return Some((
                        RAW_IMAGE,
                        raw_image(t_nanos, path, p.height, p.width, enc, p.channels, &p.data),
                    ));
                }
            };
            Some((
                RAW_IMAGE,
                raw_image(t_nanos, path, height, width, encoding, size, &data),
            ))
        }
        View::Points { count } => {
            let mut data = Vec::with_capacity(count as usize * 12);
            for i in 0..count as usize * 3 {
                data.extend_from_slice(&(t.get_f64(i)? as f32).to_le_bytes());
            }
            let field =
                |name: &str, offset: u32| json!({"name": name, "offset": offset, "type": 7});
            Some((
                POINT_CLOUD,
                json!({
                    "timestamp": time(t_nanos),
                    "frame_id": path,
                    "pose": {
                        "position": {"x": 0.0, "y": 0.0, "z": 0.0},
                        "orientation": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0},
                    },
                    "point_stride": 12,
                    "fields": [field("x", 0), field("y", 4), field("z", 8)],
                    "data": BASE64.encode(&data),
                }),
            ))
        }
        View::Series { .. } => None,
    }
}

/// A `foxglove.RawImage`: `bytes_per_pixel` sets its row step.
fn raw_image(
    t_nanos: u64,
    path: &str,
    height: u64,
    width: u64,
    encoding: &str,
    bytes_per_pixel: u64,
    data: &[u8],
) -> Json {
    json!({
        "timestamp": time(t_nanos),
        "frame_id": path,
        "width": width,
        "height": height,
        "encoding": encoding,
        "step": width * bytes_per_pixel,
        "data": BASE64.encode(data),
    })
}

/// A Foxglove topic name for a snapbus name: `/` then its dotted parts as path segments
/// (`demo.step` → `/demo/step`; `sensors.0.rgba` under it → `/demo/step/sensors/0/rgba`), so
/// that Foxglove's message paths (`/demo/step.reward`) need no quoting.
pub fn topic(schema: &str, field: Option<&str>) -> String {
    let mut t = format!("/{}", schema.replace('.', "/"));
    if let Some(f) = field {
        t.push('/');
        t.push_str(&f.replace('.', "/"));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use snapbus_schemas::{Tensor, Value, Wire, decode};

    fn view_of<T: snapbus_schemas::Element>(t: &Tensor<T>) -> Vec<u8> {
        t.encode_to_vec().expect("encode")
    }

    #[test]
    fn images_and_points_have_foxglove_fields() {
        let t = Tensor::new(vec![2, 2, 3], (0u8..12).collect()).expect("tensor");
        let (bytes, desc) = (view_of(&t), Tensor::<u8>::type_desc());
        let Value::Tensor(v) = decode(&desc, &bytes).expect("decode") else {
            panic!("a tensor")
        };
        let (name, m) = of_tensor(&v, "cam", 1_500_000_000).expect("an image");
        assert_eq!(name, RAW_IMAGE);
        assert_eq!(m["encoding"], "rgb8");
        assert_eq!(
            (m["width"].clone(), m["step"].clone()),
            (json!(2), json!(6))
        );
        assert_eq!(m["timestamp"], json!({"sec": 1, "nsec": 500_000_000}));
        let data = BASE64
            .decode(m["data"].as_str().expect("b64").as_bytes())
            .expect("b64");
        assert_eq!(data, (0u8..12).collect::<Vec<_>>());

        let t = Tensor::new(vec![2, 3], vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("tensor");
        let (bytes, desc) = (view_of(&t), Tensor::<f64>::type_desc());
        let Value::Tensor(v) = decode(&desc, &bytes).expect("decode") else {
            panic!("a tensor")
        };
        let (name, m) = of_tensor(&v, "cloud", 0).expect("points");
        assert_eq!(name, POINT_CLOUD);
        let data = BASE64
            .decode(m["data"].as_str().expect("b64").as_bytes())
            .expect("b64");
        let xs: Vec<f32> = data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(xs, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(
            topic("demo.step", Some("sensors.0.rgba")),
            "/demo/step/sensors/0/rgba"
        );
        assert!(json_schema(RAW_IMAGE).is_some() && json_schema(POINT_CLOUD).is_some());
    }
}
