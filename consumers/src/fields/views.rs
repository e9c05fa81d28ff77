//! What a tensor is shown as — an image, a point cloud or a series over its index — and where
//! the tensors of a record are, at any depth. One decision, shared by the plotter's page and
//! the Foxglove bridge and export, so that a field looks the same in both.

use snapbus_schemas::{DType, TensorView, TypeDesc, Value};

/// Tensor views per schema and producer (the plotter) or per schema (the Foxglove bridge) at
/// most: a list of cameras whose length never stops growing must not grow them without end;
/// the tensors past it are not shown.
pub const MAX_VIEWS: usize = 64;

/// How a tensor of some shape is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// `[h, w]` (grey) or `[h, w, c]`: `c` = 3 RGB, 4 RGBA, otherwise its channel 0.
    Image {
        /// Rows.
        height: u64,
        /// Columns.
        width: u64,
        /// Values per pixel (the last dimension; 1 for a 2-D tensor).
        channels: u64,
    },
    /// `[n, 3]`: n points (x, y, z). A grey image three pixels wide says nothing; a list of
    /// positions is what such an array almost always holds.
    Points {
        /// Points.
        count: u64,
    },
    /// `[n]`: a profile, its values over their index (a histogram, a spectrum, a row).
    Series {
        /// Values.
        len: u64,
    },
}

impl View {
    /// The view of a tensor of `shape`; `None` when it has none (a scalar, rank 4 and more, an
    /// empty dimension).
    pub fn of(shape: &[u64]) -> Option<View> {
        if shape.contains(&0) {
            return None;
        }
        Some(match *shape {
            [len] => View::Series { len },
            [count, 3] => View::Points { count },
            [height, width] => View::Image {
                height,
                width,
                channels: 1,
            },
            [height, width, channels] => View::Image {
                height,
                width,
                channels,
            },
            _ => return None,
        })
    }

    /// `image`, `points` or `series`.
    pub fn kind(&self) -> &'static str {
        match self {
            View::Image { .. } => "image",
            View::Points { .. } => "points",
            View::Series { .. } => "series",
        }
    }
}

/// Whether values of `desc` can hold a tensor anywhere: in a struct, a sequence, an array, a
/// tuple, an option, a map's values or an enum's payload (a dynamic field holds none).
pub fn has_tensors(desc: &TypeDesc) -> bool {
    match desc {
        TypeDesc::Tensor { .. } => true,
        TypeDesc::Option { some: t }
        | TypeDesc::Seq { elem: t }
        | TypeDesc::Array { elem: t, .. } => has_tensors(t),
        TypeDesc::Map { value, .. } => has_tensors(value),
        TypeDesc::Tuple { elems } => elems.iter().any(has_tensors),
        TypeDesc::Struct { fields } => fields.iter().any(|f| has_tensors(&f.ty)),
        TypeDesc::Enum { variants } => variants.iter().any(|v| match &v.kind {
            snapbus_schemas::VariantKind::Unit => false,
            snapbus_schemas::VariantKind::Tuple { elems } => elems.iter().any(has_tensors),
            snapbus_schemas::VariantKind::Struct { fields } => {
                fields.iter().any(|f| has_tensors(&f.ty))
            }
        }),
        _ => false,
    }
}

/// Every tensor of `v` with its dotted path (the naming of [`FieldNode`](super::FieldNode):
/// struct fields by name, list elements by index, map entries by key, enum payloads under
/// the variant's name), in the record's order: `sensors.0.rgba`, `by_name.wrist.rgba`.
pub fn tensors<'v, 'a>(v: &'v Value<'a>) -> Vec<(String, &'v TensorView<'a>)> {
    fn walk<'v, 'a>(v: &'v Value<'a>, path: &str, out: &mut Vec<(String, &'v TensorView<'a>)>) {
        match v {
            Value::Tensor(t) => out.push((path.to_owned(), t)),
            Value::Option(Some(inner)) => walk(inner, path, out),
            Value::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &super::join(path, &i.to_string()), out);
                }
            }
            Value::Struct(fields) => {
                for (name, item) in fields {
                    walk(item, &super::join(path, name), out);
                }
            }
            Value::Map(entries) => {
                for (key, item) in entries {
                    let key = match key {
                        Value::Str(s) => s.to_string(),
                        k => k
                            .as_f64()
                            .map_or_else(|| k.to_json().to_string(), |n| n.to_string()),
                    };
                    walk(item, &super::join(path, &key), out);
                }
            }
            Value::Variant { name, value, .. } => walk(value, &super::join(path, name), out),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out
}

/// An image's pixels as bytes: the tensor of an image [`View`] every `stride`-th row and
/// column, u8 as is, other types scaled from their min and max (non-finite values 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Pixels {
    /// Rows.
    pub height: u64,
    /// Columns.
    pub width: u64,
    /// 3 (RGB), 4 (RGBA) or 1 (grey: channel 0 of other channel counts).
    pub channels: u64,
    /// Row-major, `channels` bytes per pixel.
    pub data: Vec<u8>,
    /// The smallest and largest finite values (0 when there are none).
    pub min: f64,
    /// See `min`.
    pub max: f64,
}

/// The [`Pixels`] of `t` if it is an image, every `stride`-th row and column (`None`: not an
/// image, or a payload shorter than its shape).
pub fn scaled_pixels(t: &TensorView<'_>, stride: u64) -> Option<Pixels> {
    let View::Image {
        height: h,
        width: w,
        channels: c,
    } = View::of(&t.shape)?
    else {
        return None;
    };
    let channels = if matches!(c, 3 | 4) { c } else { 1 };
    let stride = stride.max(1);
    let at = |y: u64, x: u64, k: u64| t.get_f64(((y * w + x) * c + k) as usize);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut values =
        Vec::with_capacity((h.div_ceil(stride) * w.div_ceil(stride) * channels) as usize);
    for y in (0..h).step_by(stride as usize) {
        for x in (0..w).step_by(stride as usize) {
            for k in 0..channels {
                let v = at(y, x, k)?;
                if v.is_finite() {
                    min = min.min(v);
                    max = max.max(v);
                }
                values.push(v);
            }
        }
    }
    let range = if max > min { max - min } else { 1.0 };
    let data = values
        .iter()
        .map(|v| match t.dtype {
            DType::U8 => *v as u8,
            _ if v.is_finite() => ((v - min) / range * 255.0).round().clamp(0.0, 255.0) as u8,
            _ => 0,
        })
        .collect();
    Some(Pixels {
        height: h.div_ceil(stride),
        width: w.div_ceil(stride),
        channels,
        data,
        min: if min.is_finite() { min } else { 0.0 },
        max: if max.is_finite() { max } else { 0.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_have_the_views_they_mean() {
        assert_eq!(View::of(&[7]), Some(View::Series { len: 7 }));
        assert_eq!(View::of(&[100, 3]), Some(View::Points { count: 100 }));
        let image = |height, width, channels| {
            Some(View::Image {
                height,
                width,
                channels,
            })
        };
        assert_eq!(View::of(&[4, 5]), image(4, 5, 1));
        assert_eq!(View::of(&[4, 5, 3]), image(4, 5, 3));
        for none in [&[][..], &[2, 2, 2, 2], &[0, 3], &[4, 0, 3]] {
            assert_eq!(View::of(none), None, "{none:?}");
        }
    }
}
