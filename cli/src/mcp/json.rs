//! Values as an assistant reads them: JSON with long arrays and tensors summarized (dtype,
//! shape, min, max, mean) unless asked for in full, and results cut at a byte budget with a
//! cursor to continue from.

use serde_json::{Map, Value as Json, json};
use snapbus_schemas::{DType, Value};

/// Arrays and tensors of more elements than this are summarized unless `full` is asked.
pub(crate) const SHOWN_ELEMENTS: usize = 16;

/// `v` as JSON; arrays and tensors of more than [`SHOWN_ELEMENTS`] elements (unless `full`)
/// as `{"dtype", "shape", "min", "max", "mean"}`.
pub(crate) fn compact(v: &Value<'_>, full: bool) -> Json {
    match v {
        Value::Tensor(t) if !full && t.len() > SHOWN_ELEMENTS => {
            let mut m = numbers(t.dtype, &t.data);
            m.insert("shape".into(), json!(t.shape));
            Json::Object(m)
        }
        Value::Packed(p) if !full && p.len() > SHOWN_ELEMENTS => {
            let mut m = numbers(p.dtype, &p.bytes);
            m.insert("shape".into(), json!([p.len()]));
            Json::Object(m)
        }
        Value::Bytes(b) if !full && b.len() > SHOWN_ELEMENTS => {
            json!({ "bytes": b.len() })
        }
        Value::Struct(fields) => Json::Object(
            fields
                .iter()
                .map(|(k, v)| (k.to_string(), compact(v, full)))
                .collect(),
        ),
        Value::Seq(items) if !full && items.len() > SHOWN_ELEMENTS => {
            let mut shown: Vec<Json> = items[..SHOWN_ELEMENTS]
                .iter()
                .map(|v| compact(v, full))
                .collect();
            shown.push(json!(format!("… {} more", items.len() - SHOWN_ELEMENTS)));
            Json::Array(shown)
        }
        Value::Seq(items) => Json::Array(items.iter().map(|v| compact(v, full)).collect()),
        Value::Option(Some(v)) => compact(v, full),
        Value::Variant { name, value, .. } => match **value {
            Value::Unit => json!(name),
            ref inner => json!({ name.to_string(): compact(inner, full) }),
        },
        Value::Map(entries) if entries.iter().all(|(k, _)| matches!(k, Value::Str(_))) => {
            Json::Object(
                entries
                    .iter()
                    .map(|(k, v)| {
                        let key = match k {
                            Value::Str(s) => s.to_string(),
                            _ => String::new(),
                        };
                        (key, compact(v, full))
                    })
                    .collect(),
            )
        }
        other => other.to_json(),
    }
}

/// dtype, min, max and mean of little-endian elements (NaN left out).
fn numbers(dtype: DType, bytes: &[u8]) -> Map<String, Json> {
    let size = dtype.size_bytes();
    let (mut min, mut max, mut sum, mut n) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0u64);
    for chunk in bytes.chunks_exact(size) {
        let x = dtype.to_f64(chunk);
        if x.is_nan() {
            continue;
        }
        min = min.min(x);
        max = max.max(x);
        sum += x;
        n += 1;
    }
    let mut m = Map::new();
    m.insert("dtype".into(), json!(dtype.name()));
    if n > 0 {
        m.insert("min".into(), json!(min));
        m.insert("max".into(), json!(max));
        m.insert("mean".into(), json!(sum / n as f64));
    }
    m
}

/// Rows from `start` (a cursor) while they fit in `max_bytes` of JSON (at least one row);
/// with the cursor of the next row if some are left.
pub(crate) fn page(rows: Vec<Json>, start: usize, max_bytes: usize) -> (Vec<Json>, Option<String>) {
    let total = rows.len();
    let mut used = 0;
    let mut out = Vec::new();
    for row in rows.into_iter().skip(start) {
        let bytes = serde_json::to_vec(&row).map_or(0, |b| b.len() + 1);
        if !out.is_empty() && used + bytes > max_bytes {
            break;
        }
        used += bytes;
        out.push(row);
    }
    let next = start + out.len();
    (out, (next < total).then(|| next.to_string()))
}

/// A cursor given back by the client: the row to start at.
pub(crate) fn cursor(c: Option<&str>) -> Result<usize, String> {
    match c {
        None | Some("") => Ok(0),
        Some(c) => c
            .parse()
            .map_err(|_| format!("cursor {c:?} is not one this server gave")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snapbus_schemas::{Snapshot, Tensor, Wire};

    #[derive(Snapshot)]
    #[snapshot(id = "t.json", version = 1)]
    struct Obs {
        x: f64,
        img: Tensor<u8>,
        small: Vec<f32>,
    }

    #[test]
    fn tensors_are_summarized_and_small_arrays_shown() {
        let o = Obs {
            x: 1.5,
            img: Tensor::new(vec![4, 8], (0..32).collect()).expect("tensor"),
            small: vec![1.0, 2.0],
        };
        let bytes = o.encode_to_vec().expect("encode");
        let desc = Obs::descriptor();
        let v = desc.decode(&bytes).expect("decode");
        let j = compact(&v, false);
        assert_eq!(j["x"], 1.5);
        assert_eq!(j["small"], json!([1.0, 2.0]));
        assert_eq!(j["img"]["shape"], json!([4, 8]));
        assert_eq!(j["img"]["dtype"], "u8");
        assert_eq!(j["img"]["max"], 31.0);
        assert_eq!(j["img"]["mean"], 15.5);
        let full = compact(&v, true);
        assert_eq!(full["img"]["data"].as_array().map(Vec::len), Some(32));
    }

    #[test]
    fn pages_stop_at_the_budget_and_the_cursor_resumes() {
        let rows: Vec<Json> = (0..100).map(|i| json!({ "i": i })).collect();
        let (first, next) = page(rows.clone(), 0, 50);
        assert!(first.len() > 1 && first.len() < 100);
        let at = cursor(next.as_deref()).expect("cursor");
        assert_eq!(at, first.len());
        let (rest, end) = page(rows, at, 1 << 20);
        assert_eq!(first.len() + rest.len(), 100);
        assert_eq!(rest[0]["i"], first.len());
        assert!(end.is_none());
        assert!(cursor(Some("x")).is_err());
    }
}
