//! Unit tests of `metrics_text/names.rs`.

use super::*;

#[test]
fn every_family_has_one_name_and_a_help_text() {
    let mut seen = std::collections::HashSet::new();
    for f in ALL {
        assert!(seen.insert(f.name), "{} is listed twice", f.name);
        assert!(f.name.starts_with("nv_") || f.name.starts_with("tritonrs_"), "{}", f.name);
        assert!(f.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'), "{}", f.name);
        assert!(!f.help.is_empty() && !f.help.contains('\n'), "{} has no one-line help text", f.name);
    }
    // A histogram's samples add `_bucket`, `_sum` and `_count`: none may be another family's name.
    for f in ALL.iter().filter(|f| f.kind == Kind::Histogram) {
        for suffix in ["_bucket", "_sum", "_count"] {
            let sample = format!("{}{suffix}", f.name);
            assert!(!seen.contains(sample.as_str()), "{sample} is both a histogram's sample and a family");
        }
    }
}

#[test]
fn the_header_is_help_then_type() {
    let mut out = String::new();
    MQTT_MESSAGES.header(&mut out);
    assert_eq!(
        out,
        "# HELP tritonrs_mqtt_messages_total MQTT request messages by how they ended\n\
             # TYPE tritonrs_mqtt_messages_total counter\n"
    );
}
