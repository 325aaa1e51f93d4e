use super::postprocess::{self, Candidate};
use super::preprocess::{self, place, Transform};
use super::spec::{Color, ImageSpec, Layout, OutputKind, Resize};
use super::*;
use crate::error::ErrorKind;
use crate::model_api::types::DataType;
use crate::model_config::pbtxt::parse_config;

fn image_file(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/images/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A config with one FP32 input of `dims`, one output and `params` (key, value) pairs.
fn config(dims: &str, max_batch: u32, params: &[(&str, &str)]) -> crate::proto::inference::ModelConfig {
    let mut text = format!(
        "name: \"m\"\nmax_batch_size: {max_batch}\ninput [{{ name: \"x\" data_type: TYPE_FP32 dims: [{dims}] }}]\n\
         output [{{ name: \"y\" data_type: TYPE_FP32 dims: [10] }}]\n"
    );
    for (k, v) in params {
        text += &format!("parameters {{ key: \"{k}\" value: {{ string_value: \"{v}\" }} }}\n");
    }
    parse_config(&text, "config.pbtxt").expect("test config parses")
}

fn spec(dims: &str, params: &[(&str, &str)]) -> Result<ImageSpec> {
    ImageSpec::from_config(&config(dims, 1, params))
}

fn invalid_message(r: Result<ImageSpec>) -> String {
    let e = r.expect_err("the spec is refused");
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    e.message
}

#[test]
fn spec_defaults_come_from_the_input() {
    let s = spec("3, 224, 320", &[]).unwrap();
    assert_eq!((s.input.as_str(), s.layout, s.width, s.height), ("x", Layout::Nchw, 320, 224));
    assert_eq!(s.shape, vec![1, 3, 224, 320]);
    assert_eq!((s.color, s.resize, s.pad), (Color::Rgb, Resize::Stretch, 114));
    assert_eq!((s.scale, s.mean, s.std), (1.0 / 255.0, [0.0; 3], [1.0; 3]));
    assert_eq!(s.output, OutputKind::Classification { output: "y".into() });
    assert_eq!((s.score_threshold, s.iou_threshold), (0.25, 0.45));
    let s = spec("64, 48, 3", &[]).unwrap();
    assert_eq!((s.layout, s.width, s.height), (Layout::Nhwc, 48, 64));
    // No batching: the dims are the shape; a fixed leading 1 is allowed.
    let s = ImageSpec::from_config(&config("1, 3, 32, 32", 0, &[])).unwrap();
    assert_eq!((s.shape, s.width, s.height), (vec![1, 3, 32, 32], 32, 32));
}

/// Every parameter but `image.input` (the model's one input is found without it), none at its default.
const EVERY_PARAMETER: [(&str, &str); 11] = [
    ("image.layout", "nhwc"),
    ("image.color", "BGR"),
    ("image.resize", "center_crop"),
    ("image.pad", "0"),
    ("image.scale", "1/255"),
    ("image.mean", "0.485, 0.456,0.406"),
    ("image.std", "0.229,0.224,0.225"),
    ("image.output", "yolo"),
    ("image.yolo_objectness", "true"),
    ("detection.score_threshold", "0.5"),
    ("detection.iou_threshold", "0.7"),
];

#[test]
fn spec_reads_every_parameter() {
    let named_input: Vec<_> = [("image.input", "x")].into_iter().chain(EVERY_PARAMETER).collect();
    let s = spec("3, 8, 8", &named_input);
    // NHWC [3, 8, 8] is 3 rows of 8 pixels with 8 channels: not a picture.
    assert!(invalid_message(s).contains("dims"));
    let s = spec("8, 8, 3", &EVERY_PARAMETER).unwrap();
    assert_eq!((s.layout, s.color, s.resize, s.pad), (Layout::Nhwc, Color::Bgr, Resize::CenterCrop, 0));
    assert_eq!(s.mean, [0.485, 0.456, 0.406]);
    assert_eq!(s.output, OutputKind::Yolo { output: "y".into(), objectness: true });
    assert_eq!((s.score_threshold, s.iou_threshold), (0.5, 0.7));
}

#[test]
fn bad_parameters_are_named() {
    for (params, key) in [
        (&[("image.layout", "CHW")][..], "image.layout"),
        (&[("image.color", "RGBA")], "image.color"),
        (&[("image.resize", "fill")], "image.resize"),
        (&[("image.pad", "300")], "image.pad"),
        (&[("image.scale", "x")], "image.scale"),
        (&[("image.mean", "1,2")], "image.mean"),
        (&[("image.std", "1,0,1")], "image.std"),
        (&[("image.output", "segmentation")], "image.output"),
        (&[("image.output", "efficient_nms")], "num_detections"),
        (&[("image.input", "nope")], "image.input"),
        (&[("detection.iou_threshold", "2")], "detection.iou_threshold"),
    ] {
        let msg = invalid_message(spec("3, 8, 8", params));
        assert!(msg.contains(key) && msg.contains("model 'm'"), "{params:?}: {msg}");
    }
    // Not picture-shaped: dynamic sides, four channels, a flat vector.
    for dims in ["3, -1, -1", "4, 8, 8", "16", "8, 8"] {
        assert!(invalid_message(spec(dims, &[])).contains("dims"), "{dims}");
    }
    let mut two_inputs = config("3, 8, 8", 1, &[]);
    let mut second = two_inputs.input[0].clone();
    second.name = "z".into();
    two_inputs.input.push(second);
    assert!(invalid_message(ImageSpec::from_config(&two_inputs)).contains("image.input"));
}

#[test]
fn letterbox_maps_exactly_both_ways() {
    // 320x240 into 32x32: scale 0.1, 32x24, 4 rows of padding above.
    let p = place(Resize::Letterbox, 320, 240, 32, 32);
    assert_eq!(p.dst, (0, 4, 32, 24));
    assert_eq!(p.transform.to_original(8.0, 12.0), (80.0, 80.0));
    assert_eq!(p.transform.to_original(24.0, 20.0), (240.0, 160.0));
    assert_eq!(p.transform.to_input(80.0, 80.0), (8.0, 12.0));
    // Portrait: padding left and right.
    let p = place(Resize::Letterbox, 240, 320, 32, 32);
    assert_eq!(p.dst, (4, 0, 24, 32));
    assert_eq!(p.transform.to_original(4.0, 0.0), (0.0, 0.0));
    assert_eq!(p.transform.to_original(28.0, 32.0), (240.0, 320.0));
    // 640x480 into 640x640 (YOLO): 80 rows above.
    let p = place(Resize::Letterbox, 640, 480, 640, 640);
    assert_eq!(p.dst, (0, 80, 640, 480));
    assert_eq!(p.transform.to_original(100.0, 180.0), (100.0, 100.0));
}

#[test]
fn center_crop_and_stretch_map_back() {
    // 400x200 covering 100x100: scale 0.5, the middle 200x200 (x 100..300) is kept.
    let p = place(Resize::CenterCrop, 400, 200, 100, 100);
    assert_eq!(p.src, (100.0, 0.0, 200.0, 200.0));
    assert_eq!(p.transform.to_original(0.0, 0.0), (100.0, 0.0));
    assert_eq!(p.transform.to_original(100.0, 100.0), (300.0, 200.0));
    let p = place(Resize::Stretch, 64, 48, 8, 8);
    assert_eq!(p.transform, Transform { kx: 8.0, bx: 0.0, ky: 6.0, by: 0.0 });
}

#[test]
fn letterbox_pads_and_tensor_layouts() {
    let mut s = spec("3, 4, 4", &[("image.resize", "letterbox"), ("image.pad", "100")]).unwrap();
    // A 4x2 red picture: rows 1 and 2 red, rows 0 and 3 padding.
    let img = image::RgbImage::from_pixel(4, 2, image::Rgb([255, 0, 0]));
    let (canvas, _) = preprocess::resize(&img, &s).unwrap();
    assert_eq!(canvas.get_pixel(0, 0).0, [100; 3]);
    assert_eq!(canvas.get_pixel(3, 1).0, [255, 0, 0]);
    assert_eq!(canvas.get_pixel(2, 3).0, [100; 3]);
    // NCHW FP32: the red plane first.
    let floats =
        |b: Vec<u8>| -> Vec<f32> { b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect() };
    let t = floats(preprocess::to_tensor(&canvas, &s));
    assert_eq!(t.len(), 48);
    assert_eq!(&t[4..8], &[1.0; 4]);
    assert_eq!(t[0], 100.0 * (1.0 / 255.0));
    assert_eq!(&t[16 + 4..16 + 8], &[0.0; 4]);
    // NHWC BGR UINT8 with mean/std: (x - 100) / 2, clamped.
    s.layout = Layout::Nhwc;
    s.color = Color::Bgr;
    s.datatype = DataType::Uint8;
    s.scale = 1.0;
    s.mean = [100.0; 3];
    s.std = [0.5; 3];
    let t = preprocess::to_tensor(&canvas, &s);
    assert_eq!(&t[..3], &[0, 0, 0]);
    assert_eq!(&t[12..15], &[0, 0, 255]); // row 1: red → B, G, R
}

#[test]
fn decoding_honours_exif_orientation() {
    let img = decode(&image_file("exif6_320x240.jpg")).unwrap();
    assert_eq!(img.dimensions(), (240, 320));
    // Stored left half red, right half blue; rotated 90° clockwise: top red, bottom blue.
    let top = img.get_pixel(120, 10).0;
    let bottom = img.get_pixel(120, 310).0;
    assert!(top[0] > 200 && top[2] < 50, "{top:?}");
    assert!(bottom[2] > 200 && bottom[0] < 50, "{bottom:?}");
    let png = decode(&image_file("green_40x30.png")).unwrap();
    assert_eq!(png.dimensions(), (40, 30));
    assert!(png.pixels().all(|p| p.0 == [0, 255, 0]));
}

#[test]
fn corrupt_and_foreign_payloads_are_invalid() {
    let e = decode(&image_file("corrupt.jpg")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.starts_with("cannot decode the JPEG image"), "{}", e.message);
    let e = decode(b"GIF89a....").unwrap_err();
    assert_eq!(e.message, "the payload is not a JPEG or PNG image");
    for n in 0..20 {
        // Every truncation of a valid JPEG is an error, never a panic.
        let full = image_file("red_64x48.jpg");
        let cut = &full[..full.len() * n / 20];
        if let Err(e) = decode(cut) {
            assert_eq!(e.kind, ErrorKind::InvalidArgument);
        }
    }
}

#[test]
fn oversized_pictures_are_refused_before_decoding() {
    // A valid 1x1 PNG whose header is rewritten to claim 20000x10 (CRC fixed), without the pixels.
    let mut png = Vec::new();
    image::RgbImage::new(1, 1).write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
    png[16..20].copy_from_slice(&20000u32.to_be_bytes());
    png[20..24].copy_from_slice(&10u32.to_be_bytes());
    let mut crc = flate2::Crc::new();
    crc.update(&png[12..29]);
    png[29..33].copy_from_slice(&crc.sum().to_be_bytes());
    let e = decode(&png).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
    assert!(e.message.contains("20000") || e.message.contains("limit"), "{}", e.message);
}

/// Sniffs and decodes, as a payload's receiver and `prepare` do between them.
fn decode(bytes: &[u8]) -> Result<image::RgbImage> {
    preprocess::decode(bytes, preprocess::format_of(bytes))
}

#[test]
fn formats_are_recognised_by_magic_bytes() {
    use preprocess::format_of;
    assert_eq!(format_of(&image_file("red_64x48.jpg")), Some(Format::Jpeg));
    assert_eq!(format_of(&image_file("green_40x30.png")), Some(Format::Png));
    assert_eq!(format_of(b"{\"inputs\": []}"), None);
    assert_eq!(format_of(b""), None);
    assert_eq!(format_of(&[0xFF, 0xD8]), None);
    assert_eq!(Picture::new(Bytes::from_static(b"\x89PNG\r\n\x1a\n")).format, Some(Format::Png));
}

#[test]
fn classification_top_k_sorts_by_score_then_index() {
    let labels: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
    let classes = postprocess::classify(&[0.1, 0.7, 0.7, f32::NAN], Some(&labels), 5, None);
    let got: Vec<(usize, &str, f32)> = classes.iter().map(|c| (c.index, c.label.as_str(), c.score)).collect();
    assert_eq!(got, vec![(1, "b", 0.7), (2, "c", 0.7), (0, "a", 0.1)]);
    assert_eq!(
        postprocess::classify(&[0.1, 0.7, 0.3], None, 2, None).iter().map(|c| c.index).collect::<Vec<_>>(),
        [1, 2]
    );
    let filtered = postprocess::classify(&[0.1, 0.7, 0.3], None, 5, Some(0.3));
    assert_eq!(filtered.iter().map(|c| (c.index, c.label.as_str())).collect::<Vec<_>>(), [(1, ""), (2, "")]);
}

fn cand(x1: f32, y1: f32, x2: f32, y2: f32, score: f32, class: usize) -> Candidate {
    Candidate { x1, y1, x2, y2, score, class }
}

#[test]
fn nms_is_class_wise() {
    let boxes = vec![
        cand(0.0, 0.0, 10.0, 10.0, 0.8, 0),
        cand(1.0, 0.0, 11.0, 10.0, 0.9, 0), // overlaps the first (IoU 0.82): the first goes
        cand(1.0, 0.0, 11.0, 10.0, 0.5, 1), // same place, other class: kept
        cand(20.0, 20.0, 30.0, 30.0, 0.3, 0),
    ];
    let kept = postprocess::nms(boxes, 0.45, 300);
    assert_eq!(kept.iter().map(|b| (b.score, b.class)).collect::<Vec<_>>(), [(0.9, 0), (0.5, 1), (0.3, 0)]);
    let kept = postprocess::nms(kept, 0.45, 2);
    assert_eq!(kept.len(), 2);
}

#[test]
fn yolo_rows_and_transposed_layouts_agree() {
    // Two boxes, two classes: [cx, cy, w, h, s0, s1].
    let rows = [10.0, 10.0, 4.0, 2.0, 0.1, 0.9, 20.0, 20.0, 2.0, 2.0, 0.2, 0.1];
    let want = vec![cand(8.0, 9.0, 12.0, 11.0, 0.9, 1)];
    let got = postprocess::yolo_candidates(&rows, &[1, 2, 6], false, Some(2), 0.25).unwrap();
    assert_eq!(got, want);
    // The same as [1, 6, 2] (YOLOv8 exports), told apart by the label count (without labels the
    // smaller dimension is taken as the attributes: [1, 84, 8400]).
    let mut transposed = vec![0.0; 12];
    for i in 0..2 {
        for k in 0..6 {
            transposed[k * 2 + i] = rows[i * 6 + k];
        }
    }
    assert_eq!(postprocess::yolo_candidates(&transposed, &[1, 6, 2], false, Some(2), 0.25).unwrap(), want);
    assert_eq!(postprocess::yolo_candidates(&transposed, &[6, 2], false, Some(2), 0.25).unwrap(), want);
    // YOLOv5 objectness multiplies: 0.5 x 0.9.
    let v5 = [10.0, 10.0, 4.0, 2.0, 0.5, 0.1, 0.9];
    let got = postprocess::yolo_candidates(&v5, &[1, 1, 7], true, Some(2), 0.25).unwrap();
    assert_eq!(got, vec![cand(8.0, 9.0, 12.0, 11.0, 0.45, 1)]);
    // Malformed outputs are errors, not panics.
    assert!(postprocess::yolo_candidates(&rows, &[2, 2, 6], false, None, 0.25).is_err());
    assert!(postprocess::yolo_candidates(&rows[..5], &[1, 2, 6], false, None, 0.25).is_err());
    assert!(postprocess::yolo_candidates(&rows, &[1, 3, 4], false, None, 0.25).is_err());
}

#[test]
fn efficient_nms_outputs_are_read_up_to_num_detections() {
    let boxes = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 0.0, 0.0, 1.0, 1.0];
    let got = postprocess::efficient_nms_candidates(&[2.0], &boxes, &[0.9, 0.1, 0.8], &[3.0, 1.0, 2.0], 0.25).unwrap();
    assert_eq!(got, vec![cand(1.0, 2.0, 3.0, 4.0, 0.9, 3)]);
    // num_detections beyond K is clamped; a negative one is refused.
    assert_eq!(
        postprocess::efficient_nms_candidates(&[9.0], &boxes, &[0.9, 0.5, 0.8], &[0.0; 3], 0.25).unwrap().len(),
        3
    );
    assert!(postprocess::efficient_nms_candidates(&[-1.0], &boxes, &[0.9], &[0.0], 0.25).is_err());
}

#[test]
fn detections_map_back_and_clamp() {
    let p = place(Resize::Letterbox, 320, 240, 32, 32);
    let labels: Vec<String> = vec!["red".into()];
    let d = postprocess::to_detections(
        &[cand(8.0, 12.0, 24.0, 20.0, 0.9, 0), cand(0.0, 24.0, 8.0, 32.0, 0.4, 3)],
        &p.transform,
        320,
        240,
        Some(&labels),
    );
    assert_eq!((d[0].x_min, d[0].y_min, d[0].x_max, d[0].y_max), (80.0, 80.0, 240.0, 160.0));
    assert_eq!(d[0].label, "red");
    // Box 2 reaches into the padding below the picture: clamped to its 240 rows; no label → the index.
    assert_eq!((d[1].x_min, d[1].y_min, d[1].x_max, d[1].y_max), (0.0, 200.0, 80.0, 240.0));
    assert_eq!(d[1].label, "3");
}

#[test]
fn write_json_shapes() {
    let mut r = ImageResult {
        model_version: 1,
        width: 4,
        height: 3,
        timings: Timings::default(),
        analysis: Analysis::Classes(vec![Class { index: 0, label: "red".into(), score: 1.0 }]),
    };
    let mut obj = serde_json::Map::new();
    r.write_json(&mut obj);
    let v = Value::Object(obj);
    assert_eq!(v["image"], json!({"width": 4, "height": 3}));
    assert_eq!(v["classes"], json!([{"index": 0, "label": "red", "score": 1.0}]));
    assert!(v["timings_ms"]["total"].is_number());
    r.analysis = Analysis::Detections(vec![Detection {
        label: "a".into(),
        class_id: 0,
        confidence: 0.5,
        x_min: 1.0,
        y_min: 2.0,
        x_max: 3.0,
        y_max: 4.0,
    }]);
    let mut obj = serde_json::Map::new();
    r.write_json(&mut obj);
    assert_eq!(obj["success"], json!(true));
    assert_eq!(obj["predictions"][0]["y_max"], json!(4.0));
    let t = crate::model_api::types::Tensor::new(
        "o",
        DataType::Int64,
        vec![2],
        [7i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
    );
    assert_eq!(
        postprocess::raw_json(&[t]).unwrap(),
        json!([{"name": "o", "datatype": "INT64", "shape": [2], "data": [7, -1]}])
    );
}

#[test]
fn ssd_outputs_by_name_or_order_and_their_boxes() {
    let text = "name: \"m\"\nmax_batch_size: 0\ninput [{ name: \"x\" data_type: TYPE_UINT8 dims: [1, 8, 8, 3] }]\n\
        output [{ name: \"num_detections\" data_type: TYPE_FP32 dims: [1] },\
        { name: \"detection_scores\" data_type: TYPE_FP32 dims: [1, 2] },\
        { name: \"detection_boxes\" data_type: TYPE_FP32 dims: [1, 2, 4] },\
        { name: \"detection_classes\" data_type: TYPE_FP32 dims: [1, 2] }]\n\
        parameters { key: \"image.output\" value: { string_value: \"ssd\" } }\n";
    let s = ImageSpec::from_config(&parse_config(text, "config.pbtxt").unwrap()).unwrap();
    assert_eq!(
        s.output,
        OutputKind::Ssd {
            boxes: "detection_boxes".into(),
            classes: "detection_classes".into(),
            scores: "detection_scores".into(),
            count: "num_detections".into()
        }
    );
    // Names that say nothing: the configuration's order.
    let plain = text
        .replace("num_detections", "a")
        .replace("detection_scores", "b")
        .replace("detection_boxes", "c")
        .replace("detection_classes", "d");
    let s = ImageSpec::from_config(&parse_config(&plain, "config.pbtxt").unwrap()).unwrap();
    assert_eq!(
        s.output,
        OutputKind::Ssd { boxes: "a".into(), classes: "b".into(), scores: "c".into(), count: "d".into() }
    );
    assert!(invalid_message(spec("3, 8, 8", &[("image.output", "ssd")])).contains("four outputs"));

    let boxes = [0.1, 0.2, 0.5, 0.6, 0.0, 0.0, 0.25, 0.25, 9.0, 9.0, 9.0, 9.0];
    let found = postprocess::ssd_boxes(&boxes, &[2.0, 0.0, 1.0], &[0.9, 0.2, 0.95], &[2.0], 0.3).unwrap();
    // The count limits the rows read (the third is past it); the threshold drops the second.
    assert_eq!(found, vec![(2, 0.9, [0.1, 0.2, 0.5, 0.6])]);
    assert!(postprocess::ssd_boxes(&boxes, &[0.0], &[0.9], &[f32::NAN], 0.3).is_err());
}
