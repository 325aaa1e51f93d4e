//! Unit tests of `frontend/frigate/protocol.rs`.

use super::*;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn reads_each_request() {
    let r = parse(&[b(r#"{"shape": [1, 320, 320, 3], "dtype": "uint8", "model_type": "yolo-generic"}"#), b("xyz")]);
    assert_eq!(
        r,
        Ok(Request::Detect {
            shape: vec![1, 320, 320, 3],
            datatype: DataType::Uint8,
            model_type: Some("yolo-generic".into()),
            tensor: b("xyz")
        })
    );
    assert_eq!(
        parse(&[b(r#"{"model_request": true, "model_name": "m.onnx"}"#)]),
        Ok(Request::ModelCheck { name: "m.onnx".into() })
    );
    assert_eq!(
        parse(&[b(r#"{"model_data": true, "model_name": "m.onnx"}"#), b("ONNX")]),
        Ok(Request::ModelPush { name: "m.onnx".into(), data: b("ONNX") })
    );
}

#[test]
fn names_what_is_wrong() {
    assert_eq!(parse(&[]).unwrap_err().reason(), "header");
    assert_eq!(parse(&[b("not json")]).unwrap_err().reason(), "header");
    assert_eq!(parse(&[b(r#"{"dtype": "uint8"}"#), b("x")]).unwrap_err().reason(), "header");
    assert_eq!(parse(&[b(r#"{"shape": [1], "dtype": "complex64"}"#), b("x")]).unwrap_err().reason(), "dtype");
    assert_eq!(parse(&[b(r#"{"shape": [1], "dtype": "uint8"}"#)]).unwrap_err().reason(), "short_tensor");
    assert_eq!(parse(&[b(r#"{"model_data": true, "model_name": "m"}"#)]), Err(BadRequest::MissingData));
}

#[test]
fn replies_are_480_bytes_of_20_rows() {
    let rows = [[2.0, 0.9, 0.1, 0.2, 0.3, 0.4]];
    let bytes = detections_bytes(&rows);
    assert_eq!(bytes.len(), 480);
    assert_eq!(&bytes[..4], &2.0f32.to_le_bytes());
    assert_eq!(&bytes[20..24], &0.4f32.to_le_bytes());
    assert!(bytes[24..].iter().all(|&x| x == 0));
    assert_eq!(detections_bytes(&[[1.0; 6]; 25]).len(), 480, "at most 20 rows");
    let framed = detection_reply(&rows, ReplyForm::Tensor);
    assert_eq!(framed.len(), 2);
    let header: serde_json::Value = serde_json::from_slice(&framed[0]).unwrap();
    assert_eq!(header, serde_json::json!({"shape": [20, 6], "dtype": "float32"}));
    assert_eq!(detection_reply(&rows, ReplyForm::Bytes).len(), 1);
    assert_eq!(&model_check_reply(true, false)[0][..], br#"{"model_available": true, "model_loaded": false}"#);
}

#[test]
fn model_names_are_file_stems() {
    assert_eq!(model_stem("/config/model_cache/yolov9-t-320.onnx"), "yolov9-t-320");
    assert_eq!(model_stem("yolo"), "yolo");
    assert_eq!(model_stem("a.b.onnx"), "a.b");
    assert_eq!(model_stem(".hidden"), ".hidden");
}
