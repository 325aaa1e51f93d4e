//! Unit tests of `frontend/mqtt/request.rs`.

use super::*;

fn props(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn encoded_outputs_take_their_place_among_sorted_keys() {
    use crate::model_api::types::{DataType, Tensor};
    let t = [Tensor::new("OUT", DataType::Fp32, vec![2], [0.1f32, 2.5].map(f32::to_le_bytes).concat())];
    let outputs = Outputs::new(&t, |_| false).unwrap();
    let raw = serde_json::value::to_raw_value(&outputs.json(KeyOrder::Sorted)).unwrap();
    let mut fields = Map::new();
    for k in ["model", "model_name", "ts", "parameters", "a"] {
        fields.insert(k.into(), json!(k));
    }
    let answer = Answer { fields: fields.clone(), outputs: Some(raw), binary: None };
    let written = String::from_utf8(answer.to_json()).unwrap();
    // The same bytes as the object re-read into a sorted map and written again.
    let reread: Map<String, Value> = serde_json::from_str(&written).unwrap();
    assert_eq!(written, serde_json::to_string(&reread).unwrap());
    assert!(written.contains(r#""model_name":"model_name","outputs":[{"data":[0.1,2.5],"datatype":"FP32","#));
    // Outputs sort last, and an answer without outputs is its fields.
    let mut last = Map::new();
    last.insert("a".into(), json!(1));
    let raw = serde_json::value::to_raw_value(&json!([])).unwrap();
    let answer = Answer { fields: last.clone(), outputs: Some(raw), binary: None };
    assert_eq!(answer.to_json(), br#"{"a":1,"outputs":[]}"#);
    assert_eq!(Answer::fields(last).to_json(), br#"{"a":1}"#);
}

#[test]
fn payloads_are_recognised_by_content() {
    use crate::vision::Format;
    assert_eq!(kind(b"\xff\xd8\xff\xe0rest", &[]).unwrap(), Kind::Image(Format::Jpeg));
    assert_eq!(kind(b"\x89PNG\r\n\x1a\nrest", &[]).unwrap(), Kind::Image(Format::Png));
    assert_eq!(kind(b"  \n{\"inputs\": []}", &[]).unwrap(), Kind::Json);
    assert_eq!(kind(b"{}xx", &props(&[("inference-header-content-length", "2")])).unwrap(), Kind::Binary(2));
    let e = kind(b"GIF89a", &[]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(kind(b"{}", &props(&[(HEADER_LEN, "-1")])).is_err());
}

#[test]
fn request_ids_come_from_json_without_decoding_tensors() {
    assert_eq!(json_request_id(br#"{"id": "r1", "inputs": [{"data": [1,2,3]}]}"#).as_deref(), Some("r1"));
    assert_eq!(json_request_id(br#"{"id": "", "inputs": []}"#), None);
    assert_eq!(json_request_id(b"not json"), None);
}

#[test]
fn a_payload_over_the_limit_is_not_read_for_its_id() {
    let json = br#"{"id": "r1", "inputs": []}"#;
    assert_eq!(request_id(&[], json, false).as_deref(), Some("r1"));
    assert_eq!(request_id(&[], json, true), None);
    let user = props(&[("request_id", "u1")]);
    assert_eq!(request_id(&user, json, true).as_deref(), Some("u1"));
    assert_eq!(request_id(&[], br#" {"id": "r1"}"#, false), None, "only a payload starting with '{{' is read");
}

#[test]
fn user_properties_set_options_or_explain() {
    let o = Options::from_user(&props(&[("model_version", "2"), ("min_confidence", "0.5"), ("top_k", "3")])).unwrap();
    assert_eq!((o.version, o.min_confidence, o.top_k), (Some(2), Some(0.5), Some(3)));
    for bad in [("model_version", "x"), ("min_confidence", "2"), ("top_k", "0")] {
        let e = Options::from_user(&props(&[bad])).unwrap_err();
        assert!(e.message.contains(bad.0) || e.message.contains("version"), "{}", e.message);
    }
}

#[test]
fn error_results_carry_the_common_fields() {
    let c = Common { model: "m", device: "d", source: Some("cam"), id: "r" };
    let m = c.error("rejected", "the queue is full");
    assert_eq!(m["success"], json!(false));
    assert_eq!(m["error"]["code"], json!("rejected"));
    assert_eq!((m["model"].as_str(), m["device"].as_str(), m["source"].as_str()), (Some("m"), Some("d"), Some("cam")));
    assert!(m["ts"].as_str().is_some_and(|t| t.ends_with('Z') && t.contains('T')));
    assert_eq!(m["model_version"], Value::Null);
}
