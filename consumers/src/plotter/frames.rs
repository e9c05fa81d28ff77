//! Frames: the latest value of each tensor of a record, as its [`View`] says: an image scaled
//! to 0–255, a cloud of points, or a series over its index.

use snapbus_schemas::{TensorView, Value};

use super::store::{Frame, Image, Store};
use super::{Feeds, MAX_IMAGE_SIDE};
use crate::fields::{View, scaled_pixels, tensors};

/// Views per schema and producer at most ([`MAX_VIEWS`](crate::fields::MAX_VIEWS)).
pub const MAX_FEED_VIEWS: usize = crate::fields::MAX_VIEWS;
/// Points of a cloud kept per frame at most (every k-th point beyond).
pub const MAX_POINTS: u64 = 20_000;
/// Values of a series kept per frame at most (every k-th value beyond).
pub const MAX_SERIES_VALUES: u64 = 4096;

/// Sets the frames of the tensors of a decoded record `v` of `feeds`, making the views of
/// tensors seen for the first time.
pub(super) fn set_frames(store: &mut Store, feeds: &mut Feeds, v: &Value<'_>, seq: u64, t: f64) {
    for (path, tv) in tensors(v) {
        let Some(view) = View::of(&tv.shape) else {
            continue;
        };
        let id = match feeds.images.get(&path) {
            Some(id) => *id,
            None if feeds.images.len() < MAX_FEED_VIEWS => {
                store.images.push(Image {
                    src: super::Source {
                        field: path.clone(),
                        ..feeds.source.clone()
                    },
                    kind: view.kind(),
                    frame: None,
                    frames: 1,
                });
                store.version += 1;
                feeds.images.insert(path, store.images.len() - 1);
                store.images.len() - 1
            }
            None => continue,
        };
        if let (Some(frame), Some(img)) = (frame_of(tv, seq, t), store.images.get_mut(id)) {
            img.frame = Some(frame);
        }
    }
}

/// A tensor's frame, as its view says (`None` if it has none).
pub(super) fn frame_of(t: &TensorView<'_>, seq: u64, time: f64) -> Option<Frame> {
    let frame = |shape: Vec<u64>, channels, data, values| Frame {
        seq,
        t: time,
        shape,
        channels,
        dtype: t.dtype.name(),
        min: 0.0,
        max: 0.0,
        data,
        values,
    };
    match View::of(&t.shape)? {
        View::Image {
            height,
            width,
            channels,
        } => image(t, height, width, channels).map(|f| Frame { seq, t: time, ..f }),
        View::Points { count } => {
            let stride = count.div_ceil(MAX_POINTS).max(1) as usize;
            let values = (0..count as usize)
                .step_by(stride)
                .flat_map(|i| (0..3).map(move |k| i * 3 + k))
                .map(|i| t.get_f64(i))
                .collect::<Option<Vec<f64>>>()?;
            Some(frame(
                vec![(values.len() / 3) as u64, 3],
                3,
                Vec::new(),
                values,
            ))
        }
        View::Series { len } => {
            let stride = len.div_ceil(MAX_SERIES_VALUES).max(1) as usize;
            let values = (0..len as usize)
                .step_by(stride)
                .map(|i| t.get_f64(i))
                .collect::<Option<Vec<f64>>>()?;
            Some(frame(vec![values.len() as u64], 1, Vec::new(), values))
        }
    }
}

/// An image, scaled to 0–255 ([`scaled_pixels`]), subsampled beyond [`MAX_IMAGE_SIDE`].
fn image(t: &TensorView<'_>, h: u64, w: u64, c: u64) -> Option<Frame> {
    let p = scaled_pixels(t, h.max(w).div_ceil(MAX_IMAGE_SIDE))?;
    Some(Frame {
        seq: 0,
        t: 0.0,
        shape: if c == 1 && t.shape.len() == 2 {
            vec![p.height, p.width]
        } else {
            vec![p.height, p.width, p.channels]
        },
        channels: p.channels,
        dtype: t.dtype.name(),
        min: p.min,
        max: p.max,
        data: p.data,
        values: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use snapbus_schemas::{Tensor, Wire, decode};

    #[test]
    fn frames_are_scaled_subsampled_and_shaped() {
        let t = Tensor::new(vec![3, 2], vec![0u16, 100, 200, 300, 400, 1000]).expect("tensor");
        let bytes = snapbus_schemas::Wire::encode_to_vec(&t).expect("encode");
        let desc = Tensor::<u16>::type_desc();
        let Value::Tensor(view) = decode(&desc, &bytes).expect("decode") else {
            panic!("a tensor");
        };
        let f = frame_of(&view, 7, 1.5).expect("2-D is an image");
        assert_eq!(
            (f.shape.clone(), f.channels, f.min, f.max),
            (vec![3, 2], 1, 0.0, 1000.0)
        );
        assert_eq!(f.data, [0, 26, 51, 77, 102, 255]);

        let big = Tensor::new(vec![1030, 4, 3], vec![9u8; 1030 * 4 * 3]).expect("tensor");
        let bytes = snapbus_schemas::Wire::encode_to_vec(&big).expect("encode");
        let desc = Tensor::<u8>::type_desc();
        let Value::Tensor(view) = decode(&desc, &bytes).expect("decode") else {
            panic!("a tensor");
        };
        let f = frame_of(&view, 1, 0.0).expect("3-D RGB");
        assert_eq!((f.shape.clone(), f.channels), (vec![344, 2, 3], 3));
        assert_eq!(f.data.len(), 344 * 2 * 3);

        let v = Tensor::new(vec![5], vec![1u8; 5]).expect("tensor");
        let bytes = snapbus_schemas::Wire::encode_to_vec(&v).expect("encode");
        let Value::Tensor(view) = decode(&desc, &bytes).expect("decode") else {
            panic!("a tensor");
        };
        let f = frame_of(&view, 1, 0.0).expect("1-D is a series");
        assert_eq!((f.shape, f.values), (vec![5], vec![1.0; 5]));
    }
}
