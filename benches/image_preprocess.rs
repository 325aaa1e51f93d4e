//! Image pipeline micro-benchmarks (src/vision): decoding a 640x480 JPEG, resizing and normalising it
//! to a 224x224 FP32 NCHW tensor, and both together. Run: `cargo bench --bench image_preprocess`.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tritonrs::model_config::pbtxt::parse_config;
use tritonrs::vision::preprocess::{decode, resize, to_tensor};
use tritonrs::vision::spec::ImageSpec;
use tritonrs::vision::{prepare, Format, Picture, Prepared};

/// A 640x480 JPEG (quality 85) of a gradient with deterministic noise, so it compresses like a photo
/// rather than a flat colour.
fn jpeg_640x480() -> Vec<u8> {
    let mut seed: u32 = 0x1234_5678;
    let img = image::RgbImage::from_fn(640, 480, |x, y| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let n = (seed & 0x3f) as u8;
        image::Rgb([(x / 3) as u8 ^ n, (y / 2) as u8 ^ (n >> 1), ((x + y) / 5) as u8 ^ (n << 1)])
    });
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 85).encode_image(&img).expect("encode the JPEG");
    out
}

/// A 224x224 FP32 NCHW input with the ImageNet mean and std, stretched.
fn spec_224() -> ImageSpec {
    let text = r#"name: "bench"
max_batch_size: 1
input [{ name: "x" data_type: TYPE_FP32 dims: [3, 224, 224] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [1000] }]
parameters { key: "image.mean" value: { string_value: "0.485,0.456,0.406" } }
parameters { key: "image.std" value: { string_value: "0.229,0.224,0.225" } }
"#;
    ImageSpec::from_config(&parse_config(text, "config.pbtxt").expect("config parses")).expect("image spec")
}

fn bench(c: &mut Criterion) {
    let jpeg = jpeg_640x480();
    let spec = spec_224();
    let decoded = decode(&jpeg, Some(Format::Jpeg)).expect("decode");
    c.bench_function("decode_jpeg_640x480", |b| {
        b.iter(|| decode(black_box(&jpeg), Some(Format::Jpeg)).expect("decode"))
    });
    c.bench_function("resize_normalize_224_fp32_nchw", |b| {
        b.iter(|| {
            let (resized, _) = resize(black_box(&decoded), &spec).expect("resize");
            to_tensor(&resized, &spec)
        })
    });
    let picture = Picture::new(bytes::Bytes::from(jpeg));
    c.bench_function("decode_and_preprocess_640x480_to_224", |b| {
        b.iter(|| {
            let p: Prepared = prepare(black_box(&picture), &spec).expect("prepare");
            p.data
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
